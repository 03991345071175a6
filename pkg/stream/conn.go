package stream

import (
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// conn is a run's connection to the broker.
type conn struct {
	nc *nats.Conn
	js jetstream.JetStream
	// down is set while the connection to the broker is lost, and
	// reconnected once it is back, until the loop has seen it: the
	// broker's outage is no input's silence (serviceTime).
	down, reconnected atomic.Bool
	// denied stops the run when the server reports a permissions
	// violation (natsconn.Auth.Guard).
	denied func(error)
}
