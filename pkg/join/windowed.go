package join

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
)

// Windowed is the tumbling-window join: every left and right record of a
// key in the same event-time window [start, start+size), windows aligned to
// the Unix epoch, is paired once, when the watermark reaches the window's
// maximum timestamp start+size-1ms. It keeps one state map family: per key,
// the records of the key's open windows. It is stateless itself, so one
// Windowed serves every key and goroutine.
type Windowed struct {
	ops
	size int64 // milliseconds
}

var _ operator.Horizoned = (*Windowed)(nil)

// windowTimer prefixes the name of a window's event-time timer; the
// window's start in Unix milliseconds follows.
const windowTimer = "window:"

// NewWindowed returns the join over tumbling windows of size, keeping state
// in the map family named family, assigning records to inputs with side and
// building outputs with combine. size must be a positive whole number of
// milliseconds.
func NewWindowed(size time.Duration, family string, side SideFunc, combine CombineFunc) (*Windowed, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: window size %v must be positive", ErrInvalid, size)
	}
	if err := checkSpan("window size", size); err != nil {
		return nil, err
	}
	o, err := newOps(family, side, combine)
	if err != nil {
		return nil, err
	}
	return &Windowed{ops: o, size: size.Milliseconds()}, nil
}

// Size returns the window size.
func (j *Windowed) Size() time.Duration { return time.Duration(j.size) * time.Millisecond }

// StateHorizon is how long, in event time, a buffered record must be kept:
// its window, which fires when the watermark reaches the window's end (the
// join takes no late records).
func (j *Windowed) StateHorizon() time.Duration { return j.Size() }

// Families names the one state family the join keeps: a map, one entry per
// buffered record.
func (j *Windowed) Families() []string { return []string{j.family} }

// window returns the bounds, in Unix milliseconds, of the window of ts: its
// start and its maximum timestamp.
func (j *Windowed) window(ts int64) (start, last int64) {
	start = floorDiv(ts, j.size) * j.size
	return start, start + j.size - 1
}

// Process buffers r in its window and makes sure the window's timer is
// set. A record whose window has fired (the watermark is at or past its
// maximum timestamp) goes to the side output, with a reason naming the
// window and the watermark. A record of neither side or without a usable
// event time returns a *RecordError and changes nothing. A record stored
// again (same window, side and ID) is stored once.
func (j *Windowed) Process(env operator.Env, r record.Record) error {
	s, ts, err := j.classify(r)
	if err != nil {
		return err
	}
	start, last := j.window(ts)
	if !inRange(start) || !inRange(last) {
		return timeError(r, "window [%d ms, %d ms) out of range", start, start+j.size)
	}
	end := fromMillis(last)
	if wm := env.Watermark(); !wm.Before(end) {
		reason := fmt.Sprintf("join: window [%s, %s) already fired: watermark %s is at or past its max timestamp %s",
			stamp(fromMillis(start)), stamp(end.Add(time.Millisecond)), stamp(wm), stamp(end))
		return env.SideOutput(r, reason)
	}
	if err := env.Map(j.family).Put(subKey(start, s, r.ID), encodeRecord(r)); err != nil {
		return err
	}
	return env.SetTimer(state.EventTime, end, windowTimer+strconv.FormatInt(start, 10))
}

// OnTimer fires the window of an event-time timer: it emits every
// left×right pair of the window's records, ordered by (left time, left ID,
// right time, right ID), each with ID "<left ID>+<right ID>" and the
// window's maximum timestamp as its time, then deletes the window's
// records. A window without a left or a right record emits nothing.
func (j *Windowed) OnTimer(env operator.Env, t state.Timer) error {
	start, err := j.parseTimer(t)
	if err != nil {
		return err
	}
	m := env.Map(j.family)
	var (
		lefts, rights []record.Record
		subs          [][]byte
		bad           error
	)
	want := appendMillis(nil, start)
	err = m.Range(func(k, v []byte) bool {
		if len(k) < 8 {
			bad = fmt.Errorf("%w: map sub-key %x", ErrCorrupt, k)
			return false
		}
		switch c := bytes.Compare(k[:8], want); {
		case c < 0:
			return true // an earlier window, whose own timer clears it
		case c > 0:
			return false
		}
		_, s, err := parseSubKey(k)
		if err != nil {
			bad = err
			return false
		}
		rec, err := decodeRecord(v)
		if err != nil {
			bad = err
			return false
		}
		if s == Left {
			lefts = append(lefts, rec)
		} else {
			rights = append(rights, rec)
		}
		subs = append(subs, bytes.Clone(k))
		return true
	})
	if err != nil {
		return err
	}
	if bad != nil {
		return bad
	}
	sortRecords(lefts)
	sortRecords(rights)
	at := t.Time.UTC() // the window's max timestamp, as set
	for _, l := range lefts {
		for _, r := range rights {
			if err := j.emit(env, l, r, at); err != nil {
				return err
			}
		}
	}
	for _, k := range subs {
		if err := m.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// parseTimer returns the window start a timer names, checking that the
// timer is one of the join's.
func (j *Windowed) parseTimer(t state.Timer) (int64, error) {
	name, ok := strings.CutPrefix(t.Name, windowTimer)
	if t.Domain != state.EventTime || !ok {
		return 0, fmt.Errorf("%w: timer %s %q is not a window timer", ErrCorrupt, t.Domain, t.Name)
	}
	start, err := strconv.ParseInt(name, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: timer %q: %v", ErrCorrupt, t.Name, err)
	}
	return start, nil
}

// stamp formats a time for side-output reasons.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
