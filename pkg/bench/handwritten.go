package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/pkg/nexmark"
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
// results it published. Queries: q0, dedup, q5, q7, q8, q11.
func HandWritten(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, stream, query, subject string, n int, ooo time.Duration) (time.Duration, int, error) {
	q, ok := handQueries[query]
	if !ok {
		return 0, 0, fmt.Errorf("bench: no hand-written %s", query)
	}
	h := &hand{nc: nc, subject: subject, ooo: ooo.Milliseconds(), q: q()}
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
	q       handQuery
	results int
}

func (h *hand) add(ev nexmark.Event) error {
	var out []any
	emit := func(v any) { out = append(out, v) }
	h.q.add(ev, emit)
	// Windows are closed when the watermark has moved on by a tick, as a
	// user's timer would, not after every event.
	if ev.TS > h.maxTS {
		h.maxTS = ev.TS
		if wm := h.maxTS - h.ooo; wm/fireTick > h.fired/fireTick {
			h.fired = wm
			h.q.fire(wm, emit)
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

// handQuery is one query's logic: add takes an event, fire closes what the
// watermark (ms) has passed.
type handQuery interface {
	add(ev nexmark.Event, emit func(any))
	fire(wm int64, emit func(any))
}

var handQueries = map[string]func() handQuery{
	"q0":    func() handQuery { return handQ0{} },
	"dedup": func() handQuery { return &handDedup{seen: map[string]struct{}{}} },
	"q5":    func() handQuery { return &handQ5{counts: map[int64]map[int64]int64{}} },
	"q7":    func() handQuery { return &handQ7{max: map[int64]nexmark.Bid{}} },
	"q8":    func() handQuery { return &handQ8{windows: map[int64]*q8Window{}} },
	"q11":   func() handQuery { return &handQ11{sessions: map[int64]*q11Session{}} },
}

const (
	fireTick = 100    // ms
	tumble   = 10_000 // ms: q7 and q8 windows, q5's size, q11's gap
	q5Slide  = 2_000
)

// handQ0 passes every bid on.
type handQ0 struct{}

func (handQ0) add(ev nexmark.Event, emit func(any)) {
	if ev.Bid != nil {
		emit(ev)
	}
}
func (handQ0) fire(int64, func(any)) {}

type handDedup struct{ seen map[string]struct{} }

func (d *handDedup) add(ev nexmark.Event, emit func(any)) {
	if _, ok := d.seen[ev.ID]; !ok {
		d.seen[ev.ID] = struct{}{}
		emit(ev)
	}
}
func (d *handDedup) fire(int64, func(any)) {}

// handQ5: bids per auction in sliding windows; each window's hottest.
type handQ5 struct{ counts map[int64]map[int64]int64 } // window start → auction → bids

func (q *handQ5) add(ev nexmark.Event, _ func(any)) {
	if ev.Bid == nil {
		return
	}
	last := ev.TS - ev.TS%q5Slide
	for s := last; s > ev.TS-tumble; s -= q5Slide {
		w := q.counts[s]
		if w == nil {
			w = map[int64]int64{}
			q.counts[s] = w
		}
		w[ev.Bid.Auction]++
	}
}

func (q *handQ5) fire(wm int64, emit func(any)) {
	for _, s := range slices.Sorted(maps.Keys(q.counts)) {
		if s+tumble > wm {
			return
		}
		var best, count int64
		for a, c := range q.counts[s] {
			if c > count || c == count && a < best {
				best, count = a, c
			}
		}
		emit(map[string]int64{"window_start": s, "auction": best, "count": count})
		delete(q.counts, s)
	}
}

// handQ7: the highest bid of each tumbling window.
type handQ7 struct{ max map[int64]nexmark.Bid }

func (q *handQ7) add(ev nexmark.Event, _ func(any)) {
	if ev.Bid == nil {
		return
	}
	s := ev.TS - ev.TS%tumble
	if b, ok := q.max[s]; !ok || ev.Bid.Price > b.Price {
		q.max[s] = *ev.Bid
	}
}

func (q *handQ7) fire(wm int64, emit func(any)) {
	for s, b := range q.max {
		if s+tumble <= wm {
			emit(map[string]any{"window_start": s, "bid": b})
			delete(q.max, s)
		}
	}
}

// handQ8: people who opened an auction in the window they registered in.
type handQ8 struct{ windows map[int64]*q8Window }

type q8Window struct {
	people   map[int64]string
	auctions []nexmark.Auction
}

func (q *handQ8) add(ev nexmark.Event, _ func(any)) {
	if ev.Person == nil && ev.Auction == nil {
		return
	}
	s := ev.TS - ev.TS%tumble
	w := q.windows[s]
	if w == nil {
		w = &q8Window{people: map[int64]string{}}
		q.windows[s] = w
	}
	if ev.Person != nil {
		w.people[ev.Person.ID] = ev.Person.Name
	} else {
		w.auctions = append(w.auctions, *ev.Auction)
	}
}

func (q *handQ8) fire(wm int64, emit func(any)) {
	for s, w := range q.windows {
		if s+tumble > wm {
			continue
		}
		for _, a := range w.auctions {
			if name, ok := w.people[a.Seller]; ok {
				emit(map[string]any{"window_start": s, "person": a.Seller, "name": name, "auction": a.ID})
			}
		}
		delete(q.windows, s)
	}
}

// handQ11: bids per bidder session, a session closing after a gap.
type handQ11 struct{ sessions map[int64]*q11Session }

type q11Session struct{ start, last, bids int64 }

func (q *handQ11) add(ev nexmark.Event, emit func(any)) {
	if ev.Bid == nil {
		return
	}
	s := q.sessions[ev.Bid.Bidder]
	switch {
	case s == nil:
		q.sessions[ev.Bid.Bidder] = &q11Session{start: ev.TS, last: ev.TS, bids: 1}
	case ev.TS >= s.last+tumble:
		emit(map[string]int64{"bidder": ev.Bid.Bidder, "start": s.start, "end": s.last + tumble, "bids": s.bids})
		*s = q11Session{start: ev.TS, last: ev.TS, bids: 1}
	default:
		s.start, s.last, s.bids = min(s.start, ev.TS), max(s.last, ev.TS), s.bids+1
	}
}

func (q *handQ11) fire(wm int64, emit func(any)) {
	for bidder, s := range q.sessions {
		if s.last+tumble <= wm {
			emit(map[string]int64{"bidder": bidder, "start": s.start, "end": s.last + tumble, "bids": s.bids})
			delete(q.sessions, bidder)
		}
	}
}
