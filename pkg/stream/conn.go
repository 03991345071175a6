package stream

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/natsconn"
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

// connect connects to the broker as the instance cfg names, reconnecting
// for ever. The connection's handlers keep down and reconnected, stop the
// run on a permissions violation (denied), and fail the reader — reader
// is where the run keeps it — when a subscription overflowed.
func (c *conn) connect(cfg *Config, pipeline string, log *slog.Logger, reader *atomic.Pointer[edge.Reader]) (*nats.Conn, error) {
	return cfg.Auth.Connect(cfg.NATSURL,
		nats.Name("weir-"+cfg.Operator+"-"+cfg.Instance),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { c.down.Store(true) }),
		nats.ReconnectHandler(func(*nats.Conn) {
			// In this order: the loop reads down first (checkIdle).
			c.reconnected.Store(true)
			c.down.Store(false)
		}),
		// A subscription that overflows drops deliveries (see
		// edge.Reader's pump): reopen the input at the committed position.
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if s, ok := natsconn.DeniedPublish(err); ok && s == checkpoint.FilesPurgeSubject(pipeline, cfg.Operator) {
				// The object store purges what a failed upload stored;
				// an instance may not purge the bucket, and the
				// coordinator collects those chunks (checkpoint.Store.forget).
				log.Debug("a failed upload's chunks are left to the coordinator", "err", err)
				return
			}
			c.denied(err)
			if errors.Is(err, nats.ErrSlowConsumer) {
				if r := reader.Load(); r != nil {
					r.Fail(fmt.Errorf("edge: deliveries dropped: %w", err))
				}
			}
		}),
	)
}
