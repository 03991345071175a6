package catalog

import (
	"maps"
	"slices"

	"github.com/weirflow/weir/internal/nexmark"
)

// The Nexmark queries written by hand, as a user would without weir: state
// in maps, a window closed once the watermark passes it, no bound on
// state. `weir bench nexmark`'s d-hand-written mode runs them
// (bench.HandWritten).

const (
	tumble  = 10_000 // ms: q7 and q8 windows, q5's size, q11's gap
	q5Slide = 2_000
)

// handQ0 passes every bid on.
type handQ0 struct{}

func (handQ0) Add(ev nexmark.Event, emit func(any)) {
	if ev.Bid != nil {
		emit(ev)
	}
}
func (handQ0) Fire(int64, func(any)) {}

type handDedup struct{ seen map[string]struct{} }

func (d *handDedup) Add(ev nexmark.Event, emit func(any)) {
	if _, ok := d.seen[ev.ID]; !ok {
		d.seen[ev.ID] = struct{}{}
		emit(ev)
	}
}
func (d *handDedup) Fire(int64, func(any)) {}

// handQ5: bids per auction in sliding windows; each window's hottest.
type handQ5 struct{ counts map[int64]map[int64]int64 } // window start → auction → bids

func (q *handQ5) Add(ev nexmark.Event, _ func(any)) {
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

func (q *handQ5) Fire(wm int64, emit func(any)) {
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

func (q *handQ7) Add(ev nexmark.Event, _ func(any)) {
	if ev.Bid == nil {
		return
	}
	s := ev.TS - ev.TS%tumble
	if b, ok := q.max[s]; !ok || ev.Bid.Price > b.Price {
		q.max[s] = *ev.Bid
	}
}

func (q *handQ7) Fire(wm int64, emit func(any)) {
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

func (q *handQ8) Add(ev nexmark.Event, _ func(any)) {
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

func (q *handQ8) Fire(wm int64, emit func(any)) {
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

func (q *handQ11) Add(ev nexmark.Event, emit func(any)) {
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

func (q *handQ11) Fire(wm int64, emit func(any)) {
	for bidder, s := range q.sessions {
		if s.last+tumble <= wm {
			emit(map[string]int64{"bidder": bidder, "start": s.start, "end": s.last + tumble, "bids": s.bids})
			delete(q.sessions, bidder)
		}
	}
}
