package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/edge"
)

// openPerMessage prepares the hand-written hop: one pull consumer per
// partition, pulling before anything is published.
func (h *hop) openPerMessage(ctx context.Context, sub jetstream.JetStream) error {
	c := h.cfg
	st, err := sub.Stream(ctx, h.spec.StreamName())
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	for p := range c.Partitions {
		cons, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:       edge.ConsumerName("bench", fmt.Sprintf("hop/%d", p)),
			FilterSubject: h.spec.Subject(p),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       2 * time.Minute,
			MaxAckPending: c.MaxAckPending,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			return fmt.Errorf("bench: create consumer: %w", err)
		}
		it, err := cons.Messages(jetstream.PullMaxMessages(c.FetchBatch))
		if err != nil {
			return fmt.Errorf("bench: pull: %w", err)
		}
		h.consumers = append(h.consumers, cons)
		h.iters = append(h.iters, it)
	}
	return nil
}

// stallWait is how long a publish waits for room among InFlight: under
// SyncAlways on a slow disk the default 200ms is too short.
const stallWait = time.Minute

// publishMessages publishes every record's JSON payload as its own message
// with PublishAsync, at most InFlight awaiting their acks, and waits for
// the last ack.
func (h *hop) publishMessages(ctx context.Context) (int, error) {
	for i := range h.cfg.Records {
		if i%1024 == 0 && ctx.Err() != nil {
			return 0, ctx.Err()
		}
		b := makeBid(uint64(i))
		subj := h.subjects[h.layout.Partition(b.key())]
		if _, err := h.pub.PublishAsync(subj, b.appendJSON(make([]byte, 0, 224)), jetstream.WithStallWait(stallWait)); err != nil {
			return 0, fmt.Errorf("bench: publish record %d: %w", i, err)
		}
	}
	select {
	case <-h.pub.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	h.pubErr.Lock()
	defer h.pubErr.Unlock()
	return h.cfg.Records, h.pubErr.err
}

// consumeMessages reads every partition on its own goroutine, acking each
// message, until every record has arrived.
func (h *hop) consumeMessages(ctx context.Context, t *tally) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(h.iters))
	var wg sync.WaitGroup
	for _, it := range h.iters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := consumePartition(it, t); err != nil {
				errc <- err
				cancel()
			}
		}()
	}
	select {
	case <-t.done:
	case <-ctx.Done():
	}
	// Stopping an iterator ends its goroutine's Next.
	for _, it := range h.iters {
		it.Stop()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
	}
	if !t.complete() {
		return ctx.Err()
	}
	return nil
}

func consumePartition(it jetstream.MessagesContext, t *tally) error {
	for {
		msg, err := it.Next()
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("bench: pull: %w", err)
		}
		if err := t.mark(msg.Data()); err != nil {
			return err
		}
		if err := msg.Ack(); err != nil {
			return fmt.Errorf("bench: ack: %w", err)
		}
	}
}
