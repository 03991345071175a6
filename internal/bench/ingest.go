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

// Streams are where an ingest stores its messages: one stream, or an
// ingress placed over several, message m in Configs[Route(m)].
type Streams struct {
	Configs []jetstream.StreamConfig
	// Route says which of Configs a message is for; nil with one.
	Route func(*nats.Msg) int
}

// One is the single stream of configuration cfg.
func One(cfg jetstream.StreamConfig) Streams { return Streams{Configs: []jetstream.StreamConfig{cfg}} }

// Ingested is what an Ingest measured.
type Ingested struct {
	// Took is from the first publish until every message was stored.
	Took time.Duration
	// Leaders are the servers leading each stream, in the order of the
	// configurations: where a cluster placed them.
	Leaders []string
}

// Ingest measures storing msgs into new streams of configurations
// to.Configs (their subjects must cover the messages') the way mode says,
// every message acknowledged as stored before the clock stops. The streams
// are deleted afterwards. msgs are copied: their headers are not changed.
// Over several streams, only AtomicBatches is measured: each stream's
// messages in batches of their own (producer.Split).
func Ingest(ctx context.Context, js jetstream.JetStream, to Streams, msgs []*nats.Msg, mode IngestMode) (Ingested, error) {
	var out Ingested
	if len(to.Configs) > 1 && mode != AtomicBatches {
		return out, fmt.Errorf("bench: ingest %s over %d streams: only %s is measured over several", mode, len(to.Configs), AtomicBatches)
	}
	var streams []jetstream.Stream
	for _, cfg := range to.Configs {
		cfg.AllowAtomicPublish = true
		s, err := js.CreateStream(ctx, cfg)
		if err != nil {
			return out, fmt.Errorf("bench: ingest stream %s: %w", cfg.Name, err)
		}
		defer js.DeleteStream(context.WithoutCancel(ctx), cfg.Name)
		streams = append(streams, s)
	}
	own := make([]*nats.Msg, len(msgs))
	for i, m := range msgs {
		own[i] = &nats.Msg{Subject: m.Subject, Header: nats.Header{}, Data: m.Data}
		for k, v := range m.Header {
			own[i].Header[k] = append([]string(nil), v...)
		}
	}
	start := time.Now()
	var err error
	switch mode {
	case OnePerPublish:
		err = producer.Each(ctx, js, own, ingestInFlight)
	case Sequenced:
		err = sequenced(ctx, js, own)
	default:
		// As the generator publishes: batches pipelined whatever subjects
		// they share (producer.NewSplit), where PublishSplit keeps a
		// subject's batches one at a time.
		s := producer.NewSplit(js, len(streams), to.Route, 0, 0, 0)
		for _, m := range own {
			if _, err = s.Add(ctx, m); err != nil {
				break
			}
		}
		if err == nil {
			_, err = s.Flush(ctx)
		}
		s.Close()
	}
	out.Took = time.Since(start)
	if err != nil {
		return out, fmt.Errorf("bench: ingest %s: %w", mode, err)
	}
	var got uint64
	for _, s := range streams {
		info, err := s.Info(ctx)
		if err != nil {
			return out, err
		}
		got += info.State.Msgs
		leader := ""
		if info.Cluster != nil {
			leader = info.Cluster.Leader
		}
		out.Leaders = append(out.Leaders, leader)
	}
	if got != uint64(len(msgs)) {
		return out, fmt.Errorf("bench: ingest %s stored %d of %d messages in %d streams", mode, got, len(msgs), len(streams))
	}
	return out, nil
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
