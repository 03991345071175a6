package window

import (
	"fmt"
	"time"

	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
)

// Operator is the continuous windowed aggregation: it keeps each key's
// windows in one state map family and emits panes as triggers fire. It is
// stateless itself, so one Operator serves every key and goroutine.
type Operator struct {
	spec   Spec
	agg    Aggregator
	family string
	// sliced keeps sliding windows as slices (slices.go).
	sliced bool
}

var (
	_ operator.Horizoned = (*Operator)(nil)
	_ operator.Versioned = (*Operator)(nil)
)

// New returns the operator for spec, aggregating with agg and keeping state
// in the map family named family.
func New(spec Spec, agg Aggregator, family string) (*Operator, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if agg == nil {
		return nil, fmt.Errorf("%w: nil aggregator", ErrInvalidSpec)
	}
	if family == "" {
		return nil, fmt.Errorf("%w: empty state family name", ErrInvalidSpec)
	}
	return &Operator{spec: spec, agg: agg, family: family, sliced: spec.sliced(agg)}, nil
}

// SchemaVersion is the layout of the operator's state: 1 window by window,
// 2 for a key's windows in one entry: sliding windows kept as slices
// (slices.go), and sessions (sessions.go).
func (o *Operator) SchemaVersion() int {
	if o.sliced || o.spec.Kind == Session {
		return 2
	}
	return 1
}

// Spec returns the operator's spec.
func (o *Operator) Spec() Spec { return o.spec }

// StateHorizon is how long, in event time, a window's state must live after
// its first element: the window (a session's gap, at least) plus the
// allowed lateness.
func (o *Operator) StateHorizon() time.Duration {
	span := o.spec.Size
	if o.spec.Kind == Session {
		span = o.spec.Gap
	}
	return span + o.spec.AllowedLateness
}

// Families names the one state family the operator keeps: a map, one entry
// per live window of the key.
func (o *Operator) Families() []string { return []string{o.family} }

// Process adds r to its windows and fires the triggers it completes. A
// record every window of which is expired goes to the side output instead.
// A record whose value the aggregator rejects returns an error wrapping
// ErrValue before anything is written or emitted.
func (o *Operator) Process(env operator.Env, r record.Record) error {
	ts, err := eventMillis(r.Time)
	if err != nil {
		return operator.Poison("event_time", fmt.Errorf("record %s: %w", r.ID, err))
	}
	if _, err := o.agg.Add(nil, r); err != nil {
		return operator.Poison("payload", err)
	}
	c := o.call(env, env.Watermark())
	switch {
	case o.spec.Kind == Session:
		if err := c.processSession(ts, r); err != nil {
			return err
		}
		return c.flushSessions()
	case o.sliced:
		return c.processSliced(ts, r)
	}
	var buf [8]span
	accepted := 0
	for _, sp := range o.spec.assign(buf[:0], ts) {
		if o.spec.expired(sp, c.wm) {
			continue
		}
		accepted++
		ws, err := c.open(sp)
		if err != nil {
			return err
		}
		if err := c.add(sp, &ws, r, false); err != nil {
			return err
		}
	}
	if accepted == 0 {
		return c.drop(r, ts)
	}
	return nil
}

// OnTimer handles one of the operator's timers. An event-time timer
// brings the window up to the watermark: the ON_TIME pane, then garbage
// collection with its final pane. A processing-time timer fires the
// window's interval trigger if its deadline is still the timer's time.
func (o *Operator) OnTimer(env operator.Env, t state.Timer) error {
	sp, _, err := parseTimerName(t.Name)
	if err != nil {
		return err
	}
	wm := env.Watermark()
	if t.Domain == state.EventTime && wm.Before(t.Time) {
		wm = t.Time // a due timer proves the watermark reached it
	}
	c := o.call(env, wm)
	if o.sliced {
		return c.onSliceTimer(sp, t)
	}
	if err := c.onTimer(sp, t); err != nil {
		return err
	}
	return c.flushSessions()
}

// onTimer is OnTimer of windows kept one by one or as sessions.
func (c *call) onTimer(sp span, t state.Timer) error {
	o := c.o
	ws, ok, err := c.load(sp)
	if err != nil || !ok {
		return err // a window gone with its timers, by merge or GC
	}
	cleared, err := c.advance(sp, &ws)
	if err != nil || cleared {
		return err
	}
	if t.Domain == state.ProcessingTime {
		if d, armed := o.spec.deadline(&ws); armed && d.Equal(t.Time) {
			if err := c.fire(sp, &ws, ws.timing(), false); err != nil {
				return err
			}
		}
	}
	return c.store(sp, &ws)
}

// call is one Process or OnTimer invocation.
type call struct {
	o   *Operator
	env operator.Env
	m   state.Map
	key []byte
	now time.Time
	wm  time.Time
	// sess is the key's sessions, once loaded (sessions.go).
	sess sessionSet
}

func (o *Operator) call(env operator.Env, wm time.Time) *call {
	return &call{o: o, env: env, m: env.Map(o.family), key: env.Key(), now: env.Now(), wm: wm}
}

func (c *call) load(sp span) (winState, bool, error) {
	if c.o.spec.Kind == Session {
		return c.loadSession(sp)
	}
	raw, ok, err := c.m.Get(subKey(sp))
	if err != nil || !ok {
		return winState{}, false, err
	}
	ws, err := decodeWinState(raw)
	return ws, err == nil, err
}

// open returns window sp's state, created if the window has none. An
// existing window is first brought up to the watermark, in case its
// event-time timers are due but the runtime has not fired them yet.
func (c *call) open(sp span) (winState, error) {
	ws, ok, err := c.load(sp)
	if err != nil {
		return ws, err
	}
	if ok {
		cleared, err := c.advance(sp, &ws)
		if err != nil || !cleared {
			return ws, err
		}
	}
	return c.create(sp)
}

func (c *call) store(sp span, ws *winState) error {
	if c.o.spec.Kind == Session {
		return c.storeSession(sp, ws)
	}
	return c.m.Put(subKey(sp), ws.encode())
}

// create starts the state of window sp, in the late phase if the watermark
// is past its ON_TIME moment, and sets its event-time timers. A window
// without state has no timer (clear deletes them with it), so they are
// added without a lookup.
func (c *call) create(sp span) (winState, error) {
	ws := winState{late: c.o.spec.late(sp, c.wm)}
	if c.o.spec.Kind == Global {
		return ws, nil
	}
	// With no allowed lateness the GC timer is the ON_TIME timer.
	if !ws.late && c.o.spec.AllowedLateness > 0 {
		if err := c.env.AddTimer(state.EventTime, sp.maxTs(), timerName(sp, purposeOnTime)); err != nil {
			return ws, err
		}
	}
	return ws, c.env.AddTimer(state.EventTime, c.o.spec.gcTime(sp), timerName(sp, purposeGC))
}

// clear deletes window sp's state and timers.
func (c *call) clear(sp span, ws *winState) error {
	if c.o.spec.Kind == Session {
		if err := c.deleteSession(sp); err != nil {
			return err
		}
	} else if err := c.m.Delete(subKey(sp)); err != nil {
		return err
	}
	if d, armed := c.o.spec.deadline(ws); armed {
		if err := c.env.DeleteTimer(state.ProcessingTime, d, timerName(sp, purposeTrigger)); err != nil {
			return err
		}
	}
	if c.o.spec.Kind == Global {
		return nil
	}
	if c.o.spec.AllowedLateness > 0 {
		if err := c.env.DeleteTimer(state.EventTime, sp.maxTs(), timerName(sp, purposeOnTime)); err != nil {
			return err
		}
	}
	return c.env.DeleteTimer(state.EventTime, c.o.spec.gcTime(sp), timerName(sp, purposeGC))
}

// add adds r to window sp, fires the triggers that completes and stores the
// window. rearm says the window's interval timer must be set even if the
// window had elements since its last pane (it was just made by a merge).
func (c *call) add(sp span, ws *winState, r record.Record, rearm bool) error {
	acc, err := c.o.agg.Add(ws.acc, r)
	if err != nil {
		return err
	}
	ws.acc = acc
	ws.count++
	if ws.count == 1 {
		ws.first = c.now.UnixNano()
		rearm = true
	}
	spec := &c.o.spec
	switch d, armed := spec.deadline(ws); {
	case !ws.late && spec.EarlyCount > 0 && ws.count >= uint64(spec.EarlyCount):
		err = c.fire(sp, ws, Early, false)
	case ws.late && spec.LateEach:
		err = c.fire(sp, ws, Late, false)
	case armed && !d.After(c.now):
		err = c.fire(sp, ws, ws.timing(), false) // overdue after a merge
	case armed && rearm:
		err = c.env.SetTimer(state.ProcessingTime, d, timerName(sp, purposeTrigger))
	}
	if err != nil {
		return err
	}
	return c.store(sp, ws)
}

// advance brings window sp up to the watermark: it fires the ON_TIME pane
// once the watermark reaches the maximum timestamp, and once it reaches the
// GC time fires a final pane if elements are pending and clears the
// window. It reports whether the window was cleared; if not, the caller
// stores ws.
func (c *call) advance(sp span, ws *winState) (cleared bool, err error) {
	spec := &c.o.spec
	if spec.Kind == Global || c.wm.IsZero() {
		return false, nil
	}
	gc := spec.expired(sp, c.wm)
	if !ws.late && spec.late(sp, c.wm) {
		if err := c.fire(sp, ws, OnTime, gc); err != nil {
			return false, err
		}
		ws.late = true
	}
	if !gc {
		return false, nil
	}
	if ws.count > 0 {
		if err := c.fire(sp, ws, Late, true); err != nil {
			return false, err
		}
	}
	return true, c.clear(sp, ws)
}

// fire emits a pane of window sp: in retracting mode first the retraction
// of the previous value, then the value. It resets the elements since the
// last pane and disarms the interval trigger.
func (c *call) fire(sp span, ws *winState, timing Timing, final bool) error {
	spec := &c.o.spec
	if d, armed := spec.deadline(ws); armed {
		if err := c.env.DeleteTimer(state.ProcessingTime, d, timerName(sp, purposeTrigger)); err != nil {
			return err
		}
	}
	val, err := c.o.agg.Result(ws.acc)
	if err != nil {
		return err
	}
	info := PaneInfo{Index: ws.index, Timing: timing, Final: final}
	if spec.Accumulation == Retracting && ws.last != nil {
		if err := c.emit(sp, ws, info, Retract, ws.last); err != nil {
			return err
		}
	}
	if err := c.emit(sp, ws, info, Insert, val); err != nil {
		return err
	}
	ws.index++
	if spec.Accumulation == Retracting {
		ws.last = val
	}
	if spec.Accumulation == Discarding {
		ws.acc = nil
	}
	ws.count, ws.first = 0, 0
	return nil
}

// emit sends one emission of window sp with the window's next version.
func (c *call) emit(sp span, ws *winState, info PaneInfo, kind PaneKind, val []byte) error {
	ws.version++
	p := Pane{Window: sp.window(), Key: string(c.key), Info: info, Version: ws.version, Kind: kind, Value: val}
	r, err := p.Record()
	if err != nil {
		return err
	}
	return c.env.Emit(r)
}

// drop side-outputs r, every window of which is expired.
func (c *call) drop(r record.Record, ts int64) error {
	spans := c.o.spec.assign(nil, ts)
	last := spans[len(spans)-1] // the one expiring last
	reason := fmt.Sprintf("window: late beyond allowed lateness %v: event time %s, window %s expired at %s, watermark %s",
		c.o.spec.AllowedLateness, r.Time.UTC().Format(time.RFC3339Nano), last.window(),
		c.o.spec.gcTime(last).Format(time.RFC3339Nano), c.wm.UTC().Format(time.RFC3339Nano))
	return c.env.SideOutput(r, reason)
}

// session is one stored session window of the current key.
type session struct {
	sp span
	ws winState
}

// processSession adds an element at ts to the key's sessions: its own
// window [ts, ts+Gap) merges with every session it overlaps.
func (c *call) processSession(ts int64, r record.Record) error {
	proto := c.o.spec.assign(nil, ts)[0]
	if c.o.spec.expired(proto, c.wm) {
		return c.drop(r, ts)
	}
	overlapping, err := c.overlapping(proto)
	if err != nil {
		return err
	}
	// Sessions whose event-time timers are due but not yet fired are
	// brought up to the watermark first; an expired one is gone.
	live := overlapping[:0]
	for _, s := range overlapping {
		cleared, err := c.advance(s.sp, &s.ws)
		if err != nil {
			return err
		}
		if !cleared {
			live = append(live, s)
		}
	}
	switch {
	case len(live) == 0:
		ws, err := c.create(proto)
		if err != nil {
			return err
		}
		return c.add(proto, &ws, r, false)
	case len(live) == 1 && live[0].sp.covers(proto):
		return c.add(live[0].sp, &live[0].ws, r, false)
	}
	sp, ws, err := c.merge(proto, live)
	if err != nil {
		return err
	}
	return c.add(sp, &ws, r, true)
}

// overlapping returns the key's stored sessions that overlap sp, in start
// order.
func (c *call) overlapping(sp span) ([]session, error) {
	set, err := c.sessions()
	if err != nil {
		return nil, err
	}
	var out []session
	for _, s := range set.list {
		if s.sp.start >= sp.end {
			break // sessions are in start order and disjoint
		}
		if s.sp.overlaps(sp) {
			out = append(out, s)
		}
	}
	return out, nil
}

// merge replaces the sessions olds with one session covering them and
// proto. In retracting mode each old session that has emitted a value first
// retracts it, in a final firing of its own. The merged session continues
// the old ones: it inherits their largest pane index and version, their
// accumulators merged, and their elements since the last pane, timed from
// the earliest of them. It is in the late phase only if the watermark is
// already past its (new) maximum timestamp.
func (c *call) merge(proto span, olds []session) (span, winState, error) {
	spec := &c.o.spec
	u := proto
	for _, s := range olds {
		u = u.union(s.sp)
	}
	var ws winState
	var first int64
	for i := range olds {
		s := &olds[i]
		if spec.Accumulation == Retracting && s.ws.last != nil {
			info := PaneInfo{Index: s.ws.index, Timing: s.ws.timing(), Final: true}
			if err := c.emit(s.sp, &s.ws, info, Retract, s.ws.last); err != nil {
				return u, ws, err
			}
			s.ws.index++
		}
		ws.index = max(ws.index, s.ws.index)
		ws.version = max(ws.version, s.ws.version)
		acc, err := c.o.agg.Merge(ws.acc, s.ws.acc)
		if err != nil {
			return u, ws, err
		}
		ws.acc = acc
		if s.ws.count > 0 {
			if ws.count == 0 || s.ws.first < first {
				first = s.ws.first
			}
			ws.count += s.ws.count
		}
		if err := c.clear(s.sp, &s.ws); err != nil {
			return u, ws, err
		}
	}
	ws.first = first
	fresh, err := c.create(u)
	if err != nil {
		return u, ws, err
	}
	ws.late = fresh.late
	return u, ws, nil
}
