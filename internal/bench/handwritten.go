package bench

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/nexmark"
)

// HandWritten runs a Nexmark query the way a user would write it without
// weir: one nats.go consumer of the ingress stream, acknowledging in bulk as
// FetchAndAck does; events decoded from JSON; state in maps; a window
// closed once the largest event time seen passes its end by ooo; results
// published with core NATS to subject, unacknowledged. It has none of
// weir's guarantees — no checkpoints, no exactly-once results, no bound
// on state, no dead letters, no late data, out-of-order sessions not
// merged — and is the figure weir's cost is weighed against. It reads the
// stream's first n events and returns the time that took and how many
// results it published. The queries are internal/catalog's baselines.
func HandWritten(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, stream string, q HandQuery, subject string, n int, ooo time.Duration) (time.Duration, int, error) {
	h := &hand{nc: nc, subject: subject, ooo: ooo.Milliseconds(), q: q}
	d, err := read(ctx, js, stream, n, func(m jetstream.Msg) error {
		ev, err := nexmark.Decode(m.Data())
		if err != nil {
			return nil // a user's loop skips what it cannot read
		}
		return h.add(ev)
	})
	if err == nil {
		err = nc.Flush()
	}
	return d, h.results, err
}

// hand is the loop around a hand-written query: it tracks the watermark
// and publishes what the query emits.
type hand struct {
	nc      *nats.Conn
	subject string
	ooo     int64 // ms
	maxTS   int64
	fired   int64 // the watermark windows were last closed at
	q       HandQuery
	results int
}

func (h *hand) add(ev nexmark.Event) error {
	var out []any
	emit := func(v any) { out = append(out, v) }
	h.q.Add(ev, emit)
	// Windows are closed when the watermark has moved on by a tick, as a
	// user's timer would, not after every event.
	if ev.TS > h.maxTS {
		h.maxTS = ev.TS
		if wm := h.maxTS - h.ooo; wm/fireTick > h.fired/fireTick {
			h.fired = wm
			h.q.Fire(wm, emit)
		}
	}
	for _, v := range out {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if err := h.nc.Publish(h.subject, b); err != nil {
			return err
		}
		h.results++
	}
	return nil
}

// HandQuery is one query's logic: Add takes an event, Fire closes what the
// watermark (ms) has passed; both publish what they emit.
type HandQuery interface {
	Add(ev nexmark.Event, emit func(any))
	Fire(wm int64, emit func(any))
}

// fireTick is how often, in event time (ms), the hand-written loop closes
// windows.
const fireTick = 100
