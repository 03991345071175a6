package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// rawAckEvery is how many messages a raw reader takes per acknowledgement:
// an AckAll acknowledges them together.
const rawAckEvery = 500

// FetchAndAck measures the physical limit of reading a stream: it pulls the
// first n messages of stream with a pull consumer of its own, acknowledging
// every rawAckEvery-th message and the last with AckAll, and does nothing
// else with them. It is the ceiling any pipeline reading that stream works
// under: no decoding, no state, no output.
func FetchAndAck(ctx context.Context, js jetstream.JetStream, stream string, n int) (time.Duration, error) {
	return read(ctx, js, stream, n, func(jetstream.Msg) error { return nil })
}

// read pulls the first n messages of stream as FetchAndAck does, hands each
// to f, and returns the time from the first pull to the last ack.
func read(ctx context.Context, js jetstream.JetStream, stream string, n int, f func(jetstream.Msg) error) (time.Duration, error) {
	cons, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		AckPolicy: jetstream.AckAllPolicy, MaxAckPending: 4 * rawAckEvery, InactiveThreshold: time.Minute,
	})
	if err != nil {
		return 0, fmt.Errorf("bench: consumer on %s: %w", stream, err)
	}
	defer js.DeleteConsumer(context.WithoutCancel(ctx), stream, cons.CachedInfo().Name)
	start := time.Now()
	it, err := cons.Messages(jetstream.PullMaxMessages(2 * rawAckEvery))
	if err != nil {
		return 0, err
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for got := 1; got <= n; got++ {
		m, err := it.Next()
		if err != nil {
			return 0, fmt.Errorf("bench: read %s at %d of %d: %w", stream, got, n, err)
		}
		if err := f(m); err != nil {
			return 0, err
		}
		if got%rawAckEvery == 0 || got == n {
			if err := m.DoubleAck(ctx); err != nil {
				return 0, fmt.Errorf("bench: ack %s at %d: %w", stream, got, err)
			}
		}
	}
	return time.Since(start), nil
}
