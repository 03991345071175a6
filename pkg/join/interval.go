package join

import (
	"fmt"
	"time"

	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
)

// Interval is the interval join: a left record l and a right record r of
// the same key match when lower <= r.Time-l.Time <= upper, both bounds
// inclusive, and each match is emitted once, as soon as its second record
// arrives. It keeps one state map family: per key, the records that can
// still match a record to come, each removed by an event-time timer once
// the watermark rules that out. It is stateless itself, so one Interval
// serves every key and goroutine.
type Interval struct {
	ops
	lower, upper int64 // milliseconds
}

// gcTimer names the event-time timers that remove buffered records; a
// key has one per distinct last-match time.
const gcTimer = "gc"

// NewInterval returns the join matching right records from lower to upper
// after left ones (negative bounds reach before), keeping state in the map
// family named family, assigning records to inputs with side and building
// outputs with combine. lower <= upper, both whole numbers of milliseconds.
func NewInterval(lower, upper time.Duration, family string, side SideFunc, combine CombineFunc) (*Interval, error) {
	if err := checkSpan("lower bound", lower); err != nil {
		return nil, err
	}
	if err := checkSpan("upper bound", upper); err != nil {
		return nil, err
	}
	if lower > upper {
		return nil, fmt.Errorf("%w: lower bound %v is above upper bound %v", ErrInvalid, lower, upper)
	}
	o, err := newOps(family, side, combine)
	if err != nil {
		return nil, err
	}
	return &Interval{ops: o, lower: lower.Milliseconds(), upper: upper.Milliseconds()}, nil
}

// Bounds returns the interval: a right record matches a left one when
// lower <= r.Time-l.Time <= upper.
func (j *Interval) Bounds() (lower, upper time.Duration) {
	return time.Duration(j.lower) * time.Millisecond, time.Duration(j.upper) * time.Millisecond
}

// Families names the one state family the join keeps: a map, one entry per
// buffered record.
func (j *Interval) Families() []string { return []string{j.family} }

// last returns the latest event time (Unix ms) of a partner a record of
// side s at ts can match: l.Time+upper for a left record, r.Time-lower for
// a right one. Once the watermark is at or past it, every such partner has
// arrived or is late, and the record is dropped from state.
func (j *Interval) last(s Side, ts int64) int64 {
	if s == Left {
		return ts + j.upper
	}
	return ts - j.lower
}

// partners returns the range of partner event times (Unix ms) a record of
// side s at ts matches.
func (j *Interval) partners(s Side, ts int64) (lo, hi int64) {
	if s == Left {
		return ts + j.lower, ts + j.upper
	}
	return ts - j.upper, ts - j.lower
}

// Process matches r against the buffered records of the other side and
// emits each match, in the partners' (time, ID) order, with ID
// "<left ID>+<right ID>" and the later of the two event times; then it
// buffers r if a record to come could still match it. A record that can
// match nothing, neither buffered nor to come, goes to the side output
// with a reason naming its last partner time and the watermark. A record
// already buffered (same time, side and ID) is a redelivery and is
// ignored. A record of neither side or without a usable event time returns
// a *RecordError and changes nothing.
func (j *Interval) Process(env operator.Env, r record.Record) error {
	s, ts, err := j.classify(r)
	if err != nil {
		return err
	}
	last := j.last(s, ts)
	if !inRange(last) {
		return timeError(r, "last partner time %d ms out of range", last)
	}
	m := env.Map(j.family)
	sub := subKey(ts, s, r.ID)
	if _, dup, err := m.Get(sub); err != nil || dup {
		return err
	}
	wm := env.Watermark()
	found, err := j.match(m, s, ts, wm)
	if err != nil {
		return err
	}
	for _, p := range found {
		l, rr := r, p
		if s == Right {
			l, rr = p, r
		}
		at := l.Time
		if rr.Time.After(at) {
			at = rr.Time
		}
		if err := j.emit(env, l, rr, at.UTC()); err != nil {
			return err
		}
	}
	until := fromMillis(last)
	if wm.Before(until) {
		if err := m.Put(sub, encodeRecord(r)); err != nil {
			return err
		}
		return env.SetTimer(state.EventTime, until, gcTimer)
	}
	if len(found) > 0 {
		return nil
	}
	return env.SideOutput(r, fmt.Sprintf("join: late %s record: it can only match %s records at or before %s, the watermark is %s, and none is buffered",
		s, s.other(), stamp(until), stamp(wm)))
}

// match returns the buffered records of the other side that r (of side s
// at ts) matches, in (time, ID) order, skipping those the watermark has
// retired but whose timer has not fired yet.
func (j *Interval) match(m state.Map, s Side, ts int64, wm time.Time) ([]record.Record, error) {
	lo, hi := j.partners(s, ts)
	other := s.other()
	var (
		found []record.Record
		bad   error
	)
	err := m.Range(func(k, v []byte) bool {
		pt, ps, err := parseSubKey(k)
		switch {
		case err != nil:
			bad = err
			return false
		case pt > hi:
			return false
		case pt < lo || ps != other || !wm.Before(fromMillis(j.last(ps, pt))):
			return true
		}
		p, err := decodeRecord(v)
		if err != nil {
			bad = err
			return false
		}
		found = append(found, p)
		return true
	})
	if err != nil {
		return nil, err
	}
	return found, bad
}

// OnTimer removes from state every buffered record of the key whose last
// partner time is at or before the timer's time or the watermark,
// whichever is later: no record to come can match it.
func (j *Interval) OnTimer(env operator.Env, t state.Timer) error {
	if t.Domain != state.EventTime || t.Name != gcTimer {
		return fmt.Errorf("%w: timer %s %q is not an interval join timer", ErrCorrupt, t.Domain, t.Name)
	}
	upTo := t.Time
	if wm := env.Watermark(); wm.After(upTo) {
		upTo = wm
	}
	now := upTo.UnixMilli() // floor: last <= now iff fromMillis(last) <= upTo
	// A left record at ts is done when ts+upper <= now, a right one when
	// ts-lower <= now; no record later than both can be.
	stop := max(now-j.upper, now+j.lower)
	m := env.Map(j.family)
	var (
		done [][]byte
		bad  error
	)
	err := m.Range(func(k, _ []byte) bool {
		pt, ps, err := parseSubKey(k)
		switch {
		case err != nil:
			bad = err
			return false
		case pt > stop:
			return false
		case j.last(ps, pt) <= now:
			done = append(done, append([]byte(nil), k...))
		}
		return true
	})
	if err != nil {
		return err
	}
	if bad != nil {
		return bad
	}
	for _, k := range done {
		if err := m.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
