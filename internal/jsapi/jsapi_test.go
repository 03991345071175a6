package jsapi_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/jsapi"
)

// TestUnreachable: a broker that went away, or did not answer, is a
// reason to start again — as the errors come, wrapped by the step that
// met them — and a request it refused, or a stop, is not. weir chaos
// found a q11 process ended by "nats: server is disconnected" while it
// published the frames it had staged at start, its broker killed.
func TestUnreachable(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("edge: producer: batch of 4 from f (s): %w", err) }
	for _, err := range []error{
		wrap(nats.ErrDisconnected), wrap(nats.ErrConnectionReconnecting), wrap(nats.ErrTimeout),
		wrap(nats.ErrNoServers), wrap(context.DeadlineExceeded), wrap(os.ErrDeadlineExceeded), wrap(jetstream.ErrNoStreamResponse),
	} {
		if !jsapi.Unreachable(err) {
			t.Errorf("%v: not taken for an unreachable broker", err)
		}
	}
	for _, err := range []error{
		wrap(context.Canceled), wrap(jetstream.ErrStreamNotFound), wrap(nats.ErrBadSubject), wrap(nats.ErrMaxPayload),
		wrap(errors.New("stream: refusing to start: bad contract")),
	} {
		if jsapi.Unreachable(err) {
			t.Errorf("%v: taken for an unreachable broker", err)
		}
	}
}
