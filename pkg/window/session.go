package window

import "github.com/weirflow/weir/pkg/record"

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
	var out []session
	var ferr error
	err := c.m.Range(func(k, v []byte) bool {
		s, err := parseSubKey(k)
		if err != nil {
			ferr = err
			return false
		}
		if s.start >= sp.end {
			return false // sessions are in start order and disjoint
		}
		if !s.overlaps(sp) {
			return true
		}
		ws, err := decodeWinState(v)
		if err != nil {
			ferr = err
			return false
		}
		out = append(out, session{sp: s, ws: ws})
		return true
	})
	if err != nil {
		return nil, err
	}
	return out, ferr
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
