package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/pkg/producer"
)

// IngestMode is how Ingest publishes.
type IngestMode int

const (
	// AtomicBatches is weir's producer path: pkg/producer's atomic batches
	// of up to producer.MaxBatch messages, one stored write each.
	AtomicBatches IngestMode = iota
	// OnePerPublish is one message per asynchronous publish, up to
	// ingestInFlight outstanding: what a producer written without
	// batches does.
	OnePerPublish
	// Sequenced is AtomicBatches by stream sequence
	// (producer.NewSequenced): the messages' Nats-Msg-Id headers are
	// left out, and each batch states the stream sequence it follows.
	Sequenced
)

// ingestInFlight bounds the outstanding publishes of OnePerPublish.
const ingestInFlight = 256

func (m IngestMode) String() string {
	switch m {
	case OnePerPublish:
		return "one-per-publish"
	case Sequenced:
		return "atomic-batches by sequence, no message IDs"
	}
	return "atomic-batches"
}

// Ingest measures storing msgs into a new stream of configuration cfg (its
// subjects must cover theirs) the way mode says, every message
// acknowledged as stored before the clock stops. The stream is deleted
// afterwards. msgs are copied: their headers are not changed.
func Ingest(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig, msgs []*nats.Msg, mode IngestMode) (time.Duration, error) {
	cfg.AllowAtomicPublish = true
	s, err := js.CreateStream(ctx, cfg)
	if err != nil {
		return 0, fmt.Errorf("bench: ingest stream %s: %w", cfg.Name, err)
	}
	defer js.DeleteStream(context.WithoutCancel(ctx), cfg.Name)
	own := make([]*nats.Msg, len(msgs))
	for i, m := range msgs {
		own[i] = &nats.Msg{Subject: m.Subject, Header: nats.Header{}, Data: m.Data}
		for k, v := range m.Header {
			own[i].Header[k] = append([]string(nil), v...)
		}
	}
	start := time.Now()
	switch mode {
	case OnePerPublish:
		err = producer.Each(ctx, js, own, ingestInFlight)
	case Sequenced:
		err = sequenced(ctx, js, own)
	default:
		_, err = producer.Publish(ctx, js, own, 0, 0)
	}
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("bench: ingest %s: %w", mode, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	if got := info.State.Msgs; got != uint64(len(msgs)) {
		return 0, fmt.Errorf("bench: ingest %s stored %d of %d messages", mode, got, len(msgs))
	}
	return d, nil
}

// sequenced stores msgs, without their message IDs, through a Sequenced
// Pipeline, in batches of producer.MaxBatch.
func sequenced(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg) error {
	for _, m := range msgs {
		m.Header.Del(jetstream.MsgIDHeader)
	}
	p := producer.NewSequenced(js, "")
	defer p.Close()
	for len(msgs) > 0 {
		n := min(len(msgs), producer.MaxBatch)
		if _, err := p.Send(ctx, msgs[:n]); err != nil {
			return err
		}
		msgs = msgs[n:]
	}
	_, err := p.Flush(ctx)
	return err
}
