package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/pkg/producer"
)

// ReadAndWrite measures the floor of a pipeline that writes one synced
// result per event, as q0 and dedup do: it reads the first n messages of
// stream as FetchAndAck does and stores each one again, its payload and
// Nats-Msg-Id as read (a result has an ID for the broker to deduplicate
// by, as weir's do), in a new stream of its own
// through a producer.Pipeline — atomic batches of rawAckEvery messages,
// one synced write each, a few in flight, weir's own way of writing. The
// ingress is acknowledged as each batch is sent, and the clock stops when
// every batch is stored. Nothing is decoded, kept or framed:
// no pipeline that reads the ingress and durably writes a result per event
// can spend less. The written stream, out, is created and left for the
// caller to read or delete.
func ReadAndWrite(ctx context.Context, js jetstream.JetStream, stream, out string, n int) (time.Duration, error) {
	subject := "bench.read-write." + out
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: out, Subjects: []string{subject}, Storage: jetstream.FileStorage,
		AllowAtomicPublish: true, Duplicates: 2 * time.Minute,
	})
	if err != nil {
		return 0, fmt.Errorf("bench: read-write stream %s: %w", out, err)
	}
	p := producer.NewPipeline(js, 0, 0)
	defer p.Close()
	batch := make([]*nats.Msg, 0, rawAckEvery)
	send := func() error {
		_, err := p.Send(ctx, batch)
		batch = make([]*nats.Msg, 0, rawAckEvery) // the Pipeline keeps the sent one
		return err
	}
	start := time.Now()
	// read acknowledges the ingress after every rawAckEvery-th message,
	// once send has handed its batch to the Pipeline.
	_, err = read(ctx, js, stream, n, func(m jetstream.Msg) error {
		h := nats.Header{}
		if id := m.Headers().Get(jetstream.MsgIDHeader); id != "" {
			h.Set(jetstream.MsgIDHeader, id)
		}
		batch = append(batch, &nats.Msg{Subject: subject, Header: h, Data: m.Data()})
		if len(batch) < rawAckEvery {
			return nil
		}
		return send()
	})
	if err == nil && len(batch) > 0 {
		err = send()
	}
	if err == nil {
		_, err = p.Flush(ctx)
	}
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("bench: read and write %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	if got := info.State.Msgs; got != uint64(n) {
		return 0, fmt.Errorf("bench: read and write stored %d of %d messages", got, n)
	}
	return d, nil
}
