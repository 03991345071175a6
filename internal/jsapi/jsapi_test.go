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

// TestTransient: an API call the JetStream cluster could not serve for
// the moment (503: "JetStream system temporarily unavailable", during an
// election) is tried again, whether the error comes from nats.go's
// jetstream package or from its older API, which a key-value watch still
// creates its consumer with (weir chaos -cluster: a dedup process ended
// on "watch assignment: nats: JetStream system temporarily unavailable").
// A refusal is not tried again.
func TestTransient(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("checkpoint: watch assignment: %w", err) }
	for _, err := range []error{
		wrap(&nats.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}),
		wrap(&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}),
		wrap(nats.ErrTimeout), wrap(context.DeadlineExceeded), wrap(nats.ErrNoResponders),
	} {
		if !jsapi.Transient(err) {
			t.Errorf("%v: not tried again", err)
		}
	}
	for _, err := range []error{
		wrap(&nats.APIError{Code: 400, ErrorCode: 10148, Description: "consumer already exists"}),
		wrap(&jetstream.APIError{Code: 404, ErrorCode: 10059, Description: "stream not found"}),
		wrap(context.Canceled),
	} {
		if jsapi.Transient(err) {
			t.Errorf("%v: tried again", err)
		}
	}
}
