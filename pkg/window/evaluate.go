package window

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/weirflow/weir/pkg/record"
)

// Step is one step of a script for Evaluate. Its parts apply in order:
// processing time advances by Advance (and interval triggers that come due
// fire), then Record arrives, then the watermark moves to Watermark (and
// windows it completes or expires fire). Zero parts are skipped; a
// watermark behind the current one is ignored.
type Step struct {
	Record    *record.Record
	Watermark time.Time
	Advance   time.Duration
}

// Evaluate is the reference evaluation of spec over a script: a bounded,
// in-memory model of what the Operator emits, written independently of it
// as the test oracle. It keeps every accepted element, recomputes windows
// and sessions from them, and renders each pane by folding Add over the
// pane's elements (never Merge). keyOf gives each record's state key.
//
// The runtime contract it models: a record is processed under the current
// watermark; after the watermark moves, due windows fire in (time, key,
// window start, window end) order, time being the maximum timestamp of a
// window that has not had its ON_TIME pane and the GC time of one that has;
// after processing time moves, due interval triggers fire in (deadline,
// key, window start, window end) order.
//
// It returns the emitted panes in order and the side-output records.
func Evaluate(spec Spec, agg Aggregator, keyOf func(record.Record) []byte, script []Step) (panes, side []record.Record, err error) {
	if err := spec.Validate(); err != nil {
		return nil, nil, err
	}
	ev := &evaluator{spec: spec, agg: agg, keyOf: keyOf, now: time.Unix(1<<30, 0).UTC(), wins: map[winID]*evWin{}}
	for i, st := range script {
		if st.Advance < 0 {
			return nil, nil, fmt.Errorf("window: step %d: negative Advance %v", i, st.Advance)
		}
		if st.Advance > 0 {
			ev.now = ev.now.Add(st.Advance)
			ev.fireDeadlines()
		}
		if st.Record != nil {
			ev.element(*st.Record)
		}
		if !st.Watermark.IsZero() {
			if st.Watermark.After(ev.wm) {
				ev.wm = st.Watermark
			}
			ev.fireWatermark()
		}
		if ev.err != nil {
			return nil, nil, fmt.Errorf("window: step %d: %w", i, ev.err)
		}
	}
	return ev.panes, ev.side, nil
}

type evaluator struct {
	spec    Spec
	agg     Aggregator
	keyOf   func(record.Record) []byte
	now, wm time.Time
	elems   []*evElem // accepted elements of live windows, in arrival order
	wins    map[winID]*evWin
	panes   []record.Record
	side    []record.Record
	err     error
}

// evElem is one accepted element.
type evElem struct {
	key     string
	ts      int64 // event time, Unix ms
	rec     record.Record
	arrived time.Time
	in      []span        // windows that accepted it (not sessions)
	done    map[span]bool // windows whose panes included it (not sessions)
	sdone   bool          // its session's panes included it (sessions)
}

type winID struct {
	key string
	sp  span
}

// evWin is the pane history of one live window.
type evWin struct {
	winID
	late           bool // past its ON_TIME moment
	index, version uint64
	last           json.RawMessage // last insert, in retracting mode
}

func (ev *evaluator) fail(err error) {
	if ev.err == nil {
		ev.err = err
	}
}

func (ev *evaluator) element(r record.Record) {
	ts, err := eventMillis(r.Time)
	if err != nil {
		ev.fail(err)
		return
	}
	if _, err := ev.agg.Add(nil, r); err != nil {
		ev.fail(err)
		return
	}
	e := &evElem{key: string(ev.keyOf(r)), ts: ts, rec: r, arrived: ev.now, done: map[span]bool{}}
	if ev.spec.Kind == Session {
		ev.sessionElement(e)
		return
	}
	for _, sp := range ev.windowsOf(ts) {
		if !ev.expired(sp) {
			e.in = append(e.in, sp)
		}
	}
	if len(e.in) == 0 {
		ev.side = append(ev.side, r)
		return
	}
	ev.elems = append(ev.elems, e)
	for _, sp := range e.in {
		w := ev.wins[winID{e.key, sp}]
		if w == nil {
			w = &evWin{winID: winID{e.key, sp}, late: ev.pastEnd(sp)}
			ev.wins[w.winID] = w
		}
		ev.afterAdd(w)
	}
}

func (ev *evaluator) sessionElement(e *evElem) {
	gap := int64(ev.spec.Gap / time.Millisecond)
	if ev.expired(span{e.ts, e.ts + gap}) {
		ev.side = append(ev.side, e.rec)
		return
	}
	ev.elems = append(ev.elems, e)
	// Recompute the key's sessions from its elements: sort their own
	// windows by start and join those that overlap.
	var protos []span
	for _, x := range ev.elems {
		if x.key == e.key {
			protos = append(protos, span{x.ts, x.ts + gap})
		}
	}
	slices.SortFunc(protos, func(a, b span) int { return cmp.Compare(a.start, b.start) })
	var sessions []span
	for _, p := range protos {
		if n := len(sessions); n > 0 && sessions[n-1].end > p.start {
			sessions[n-1].end = max(sessions[n-1].end, p.end)
			continue
		}
		sessions = append(sessions, p)
	}
	var s span
	for _, c := range sessions {
		if c.start <= e.ts && e.ts < c.end {
			s = c
		}
	}
	// The windows it replaces are the key's windows inside it.
	var olds []*evWin
	for _, w := range ev.wins {
		if w.key == e.key && s.covers(w.sp) {
			olds = append(olds, w)
		}
	}
	slices.SortFunc(olds, func(a, b *evWin) int { return cmp.Compare(a.sp.start, b.sp.start) })
	if len(olds) == 1 && olds[0].sp == s {
		ev.afterAdd(olds[0])
		return
	}
	nw := &evWin{winID: winID{e.key, s}, late: ev.pastEnd(s)}
	for _, o := range olds {
		if ev.spec.Accumulation == Retracting && o.last != nil {
			o.version++
			ev.emit(o, PaneInfo{Index: o.index, Timing: timingOf(o), Final: true}, Retract, o.last)
			o.index++
		}
		nw.index = max(nw.index, o.index)
		nw.version = max(nw.version, o.version)
		delete(ev.wins, o.winID)
	}
	ev.wins[nw.winID] = nw
	ev.afterAdd(nw)
}

// members are the window's elements in arrival order.
func (ev *evaluator) members(w *evWin) []*evElem {
	var out []*evElem
	gap := int64(ev.spec.Gap / time.Millisecond)
	for _, e := range ev.elems {
		switch {
		case e.key != w.key:
		case ev.spec.Kind == Session:
			if w.sp.covers(span{e.ts, e.ts + gap}) {
				out = append(out, e)
			}
		case slices.Contains(e.in, w.sp):
			out = append(out, e)
		}
	}
	return out
}

// pending are the window's elements no pane has included yet.
func (ev *evaluator) pending(w *evWin) []*evElem {
	var out []*evElem
	for _, e := range ev.members(w) {
		if !ev.included(e, w) {
			out = append(out, e)
		}
	}
	return out
}

func (ev *evaluator) included(e *evElem, w *evWin) bool {
	if ev.spec.Kind == Session {
		return e.sdone
	}
	return e.done[w.sp]
}

func timingOf(w *evWin) Timing {
	if w.late {
		return Late
	}
	return Early
}

// deadline is when the window's interval trigger fires: the interval of its
// phase after the arrival of its first pending element.
func (ev *evaluator) deadline(w *evWin) (time.Time, bool) {
	iv := ev.spec.EarlyEvery
	if w.late {
		iv = ev.spec.LateEvery
	}
	p := ev.pending(w)
	if iv <= 0 || len(p) == 0 {
		return time.Time{}, false
	}
	first := p[0].arrived
	for _, e := range p {
		if e.arrived.Before(first) {
			first = e.arrived
		}
	}
	return first.Add(iv), true
}

// afterAdd runs the element triggers of w after an element joined it.
func (ev *evaluator) afterAdd(w *evWin) {
	switch d, ok := ev.deadline(w); {
	case !w.late && ev.spec.EarlyCount > 0 && len(ev.pending(w)) >= ev.spec.EarlyCount:
		ev.fire(w, Early, false)
	case w.late && ev.spec.LateEach:
		ev.fire(w, Late, false)
	case ok && !d.After(ev.now):
		ev.fire(w, timingOf(w), false)
	}
}

// fire emits a pane of w.
func (ev *evaluator) fire(w *evWin, timing Timing, final bool) {
	in := ev.members(w)
	p := ev.pending(w)
	if ev.spec.Accumulation == Discarding {
		in = p
	}
	var acc []byte
	for _, e := range in {
		var err error
		if acc, err = ev.agg.Add(acc, e.rec); err != nil {
			ev.fail(err)
			return
		}
	}
	val, err := ev.agg.Result(acc)
	if err != nil {
		ev.fail(err)
		return
	}
	info := PaneInfo{Index: w.index, Timing: timing, Final: final}
	if ev.spec.Accumulation == Retracting && w.last != nil {
		w.version++
		ev.emit(w, info, Retract, w.last)
	}
	w.version++
	ev.emit(w, info, Insert, val)
	w.index++
	w.last = val
	for _, e := range p {
		if ev.spec.Kind == Session {
			e.sdone = true
		} else {
			e.done[w.sp] = true
		}
	}
}

func (ev *evaluator) emit(w *evWin, info PaneInfo, kind PaneKind, val json.RawMessage) {
	p := Pane{Window: w.sp.window(), Key: w.key, Info: info, Version: w.version, Kind: kind, Value: val}
	r, err := p.Record()
	if err != nil {
		ev.fail(err)
		return
	}
	ev.panes = append(ev.panes, r)
}

// due is a window's next event-time moment: its maximum timestamp before
// the ON_TIME pane, its GC time after.
func (ev *evaluator) due(w *evWin) time.Time {
	if w.late {
		return ev.closes(w.sp)
	}
	return ev.ends(w.sp)
}

func (ev *evaluator) fireWatermark() {
	if ev.spec.Kind == Global || ev.wm.IsZero() {
		return
	}
	var due []*evWin
	for _, w := range ev.wins {
		if !ev.due(w).After(ev.wm) {
			due = append(due, w)
		}
	}
	slices.SortFunc(due, func(a, b *evWin) int {
		return cmp.Or(ev.due(a).Compare(ev.due(b)), cmp.Compare(a.key, b.key),
			cmp.Compare(a.sp.start, b.sp.start), cmp.Compare(a.sp.end, b.sp.end))
	})
	for _, w := range due {
		expired := ev.expired(w.sp)
		if !w.late {
			ev.fire(w, OnTime, expired)
			w.late = true
		}
		if !expired {
			continue
		}
		if len(ev.pending(w)) > 0 {
			ev.fire(w, Late, true)
		}
		ev.collect(w)
	}
}

// collect forgets an expired window, and the elements no live window holds.
func (ev *evaluator) collect(w *evWin) {
	delete(ev.wins, w.winID)
	kept := ev.elems[:0]
	for _, e := range ev.elems {
		alive := false
		if ev.spec.Kind == Session {
			alive = e.key != w.key || e.ts < w.sp.start || e.ts >= w.sp.end
		} else {
			for _, sp := range e.in {
				if ev.wins[winID{e.key, sp}] != nil {
					alive = true
				}
			}
		}
		if alive {
			kept = append(kept, e)
		}
	}
	clear(ev.elems[len(kept):])
	ev.elems = kept
}

func (ev *evaluator) fireDeadlines() {
	type dueWin struct {
		at time.Time
		w  *evWin
	}
	var due []dueWin
	for _, w := range ev.wins {
		if d, ok := ev.deadline(w); ok && !d.After(ev.now) {
			due = append(due, dueWin{d, w})
		}
	}
	slices.SortFunc(due, func(a, b dueWin) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.w.key, b.w.key),
			cmp.Compare(a.w.sp.start, b.w.sp.start), cmp.Compare(a.w.sp.end, b.w.sp.end))
	})
	for _, d := range due {
		ev.fire(d.w, timingOf(d.w), false)
	}
}

// The window arithmetic below restates the Spec's rules independently of
// the operator's, so that a slip in either shows up as a difference.

// windowsOf lists the windows of an element at ts (Unix ms), by start.
func (ev *evaluator) windowsOf(ts int64) []span {
	mod := func(a, b int64) int64 { return ((a % b) + b) % b }
	size, slide := ev.spec.Size.Milliseconds(), ev.spec.Slide.Milliseconds()
	switch ev.spec.Kind {
	case Tumbling:
		return []span{{ts - mod(ts, size), ts - mod(ts, size) + size}}
	case Sliding:
		var out []span
		for start := ts - mod(ts, slide); start+size > ts; start -= slide {
			out = append([]span{{start, start + size}}, out...)
		}
		return out
	case Session:
		return []span{{ts, ts + ev.spec.Gap.Milliseconds()}}
	}
	return []span{{GlobalStart.UnixMilli(), GlobalEnd.UnixMilli()}}
}

// ends is the window's last millisecond; closes is that plus the allowed
// lateness, from when the window is gone.
func (ev *evaluator) ends(sp span) time.Time   { return time.UnixMilli(sp.end).Add(-time.Millisecond) }
func (ev *evaluator) closes(sp span) time.Time { return ev.ends(sp).Add(ev.spec.AllowedLateness) }

// pastEnd reports whether the watermark has reached the window's end.
func (ev *evaluator) pastEnd(sp span) bool {
	return ev.spec.Kind != Global && !ev.wm.IsZero() && ev.wm.Compare(ev.ends(sp)) >= 0
}

// expired reports whether the watermark has reached the window's closing.
func (ev *evaluator) expired(sp span) bool {
	return ev.spec.Kind != Global && !ev.wm.IsZero() && ev.wm.Compare(ev.closes(sp)) >= 0
}
