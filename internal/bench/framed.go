package bench

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/edge"
)

// openFramed prepares weir's hop: a framed writer and a bounded reader with
// one pull consumer per partition, pulling before anything is published.
func (h *hop) openFramed(ctx context.Context, sub jetstream.JetStream) error {
	c := h.cfg
	var err error
	h.writer, err = edge.NewWriter(edge.WriterConfig{
		Spec: h.spec, KeyGroups: benchKeyGroups, Producer: "bench/0", Generation: 1,
		Limits: edge.Limits{MaxRecords: c.FrameRecords, MaxBytes: DefaultFrameBytes},
	})
	if err != nil {
		return err
	}
	inputs := make([]edge.Input, c.Partitions)
	for p := range inputs {
		inputs[p] = edge.Input{Name: fmt.Sprintf("hop/%d", p), Partition: p,
			Stream: h.spec.StreamName(), Subject: h.spec.Subject(p), Frames: true}
	}
	h.reader, err = edge.OpenReader(ctx, sub, edge.ReaderConfig{
		Consumer: "bench", Inputs: inputs, FetchBatch: c.FetchBatch, MaxAckPending: c.MaxAckPending,
	})
	if err != nil {
		return err
	}
	for _, in := range inputs {
		cons, err := sub.Consumer(ctx, in.Stream, edge.ConsumerName("bench", in.Name))
		if err != nil {
			return fmt.Errorf("bench: consumer of %s: %w", in.Name, err)
		}
		h.consumers = append(h.consumers, cons)
	}
	return nil
}

// publishFrames writes the records into frames and publishes them with
// edge.Publish, InFlight frames at a time. A second goroutine encodes the
// next frames while the current ones are published. It returns the number
// of frames published.
func (h *hop) publishFrames(ctx context.Context) (int, error) {
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan []edge.Message, 1)
	go func() {
		defer close(batches)
		n, per := h.cfg.Records, h.cfg.InFlight*h.cfg.FrameRecords
		for i := range n {
			h.writer.Write(makeBid(uint64(i)).record())
			if (i+1)%per != 0 && i != n-1 {
				continue
			}
			select {
			case batches <- h.writer.Flush():
			case <-gctx.Done():
				return
			}
		}
	}()
	frames := 0
	var err error
	// The loop ends when the encoder closes batches, so the encoder has
	// finished when publishFrames returns.
	for msgs := range batches {
		if err != nil {
			continue
		}
		if err = edge.Publish(ctx, h.pub, msgs, h.cfg.InFlight); err != nil {
			cancel()
		}
		frames += len(msgs)
	}
	return frames, err
}

// consumeFrames reads frames until every record has arrived, acking each
// frame once its records are tallied.
func (h *hop) consumeFrames(ctx context.Context, t *tally) error {
	for !t.complete() {
		select {
		case d := <-h.reader.C():
			recs, err := edge.DecodeFrame(d.Msg.Data())
			if err != nil {
				return fmt.Errorf("bench: frame %d: %w", d.Seq, err)
			}
			for _, r := range recs {
				if err := t.mark(r.Value); err != nil {
					return err
				}
			}
			if err := d.Msg.Ack(); err != nil {
				return fmt.Errorf("bench: ack frame %d: %w", d.Seq, err)
			}
		case err := <-h.reader.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
