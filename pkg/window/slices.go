package window

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
)

// Sliced sliding windows. A sliding window of Size every Slide is k =
// Size/Slide consecutive slices of Slide, and each slice lies in k windows.
// Kept window by window, every element costs k state reads and writes; kept
// as slices (as Flink and Arroyo do), it costs one, and a window's value is
// the merge of its k slices when it fires. The operator keeps sliding
// windows as slices when nothing but the one ON_TIME pane can fire and the
// aggregator's Merge cannot fail (Spec.sliced, mergesExactly):
//
//   - no early trigger, and no allowed lateness, so a window's only pane is
//     its final ON_TIME pane (a late trigger needs allowed lateness);
//   - Count or MaxBy (or a hot key's Partial of them), whose Merge of the
//     slices gives the accumulator Add gives over the window's records,
//     byte for byte. Sum is left per
//     window: a sum that overflows must fail on the record that made it
//     overflow, not later, at the merge.
//
// Each key has one state entry (sub-key sliceSubKey) holding its live
// slices in start order and fired, the end of the last window it fired:
// windows of a key fire in end order, so every window ending at or before
// fired is done. The timers are those the window-by-window operator sets
// (one, at the GC time, named by the window), so panes come out in the
// same order, and a key's window timers are set when the first slice of
// the window becomes live. A slice is dropped once every window holding
// it has fired. A record first fires the windows its key has past the
// watermark whose timers have not fired (the runtime fires timers late
// sometimes); after that, every window past the watermark is done, so fired
// moves up to the last of them.
//
// The layout is state schema version 2 of the operator (SchemaVersion): a
// snapshot kept window by window does not restore into it.

// sliceSubKey is the sub-key of a key's slices: one byte, so that it
// cannot be a window's 16-byte sub-key.
var sliceSubKey = []byte{'s'}

const sliceFormat = 1

// sliced says whether the spec's windows are kept as slices.
func (s Spec) sliced(agg Aggregator) bool {
	return s.Kind == Sliding && s.Size > s.Slide && s.AllowedLateness == 0 &&
		s.EarlyCount == 0 && s.EarlyEvery == 0 && mergesExactly(agg)
}

// mergesExactly says whether the merge of accumulators of any split of a
// window's records equals, byte for byte, the accumulator of adding them
// one by one, and never fails.
func mergesExactly(agg Aggregator) bool {
	switch a := agg.(type) {
	case countAgg:
		return true
	case intAgg:
		return a.max
	case partialAgg: // a hot key's part: its accumulator, as is
		return mergesExactly(a.Aggregator)
	}
	return false
}

// slice is the accumulator of the records of one key in [start,
// start+Slide).
type slice struct {
	start int64
	acc   []byte
}

// keySlices is the state entry of one key.
type keySlices struct {
	fired    int64 // the end of the last window fired; see hasFired
	hasFired bool
	slices   []slice // by start
}

func (ks *keySlices) encode() []byte {
	n := 2 + 2*binary.MaxVarintLen64
	for _, s := range ks.slices {
		n += 2*binary.MaxVarintLen64 + len(s.acc)
	}
	b := make([]byte, 0, n)
	var flags byte
	if ks.hasFired {
		flags = 1
	}
	b = append(b, sliceFormat, flags)
	b = binary.AppendVarint(b, ks.fired)
	b = binary.AppendUvarint(b, uint64(len(ks.slices)))
	for _, s := range ks.slices {
		b = binary.AppendVarint(b, s.start)
		b = binary.AppendUvarint(b, uint64(len(s.acc)))
		b = append(b, s.acc...)
	}
	return b
}

// decodeKeySlices decodes an entry written by encode. The result does not
// alias b.
func decodeKeySlices(b []byte) (keySlices, error) {
	fail := func() (keySlices, error) { return keySlices{}, fmt.Errorf("%w: window slices %x", ErrCorrupt, b) }
	if len(b) < 2 || b[0] != sliceFormat || b[1] > 1 {
		return fail()
	}
	ks := keySlices{hasFired: b[1] == 1}
	r := b[2:]
	var n int
	ks.fired, n = binary.Varint(r)
	if n <= 0 {
		return fail()
	}
	r = r[n:]
	count, n := binary.Uvarint(r)
	if n <= 0 || count > uint64(len(r)) {
		return fail()
	}
	r = r[n:]
	ks.slices = make([]slice, 0, count+1)
	for range count {
		start, n := binary.Varint(r)
		if n <= 0 {
			return fail()
		}
		r = r[n:]
		l, n := binary.Uvarint(r)
		if n <= 0 || l > uint64(len(r)-n) {
			return fail()
		}
		r = r[n:]
		if k := len(ks.slices); k > 0 && ks.slices[k-1].start >= start {
			return fail()
		}
		ks.slices = append(ks.slices, slice{start: start, acc: append([]byte(nil), r[:l]...)})
		r = r[l:]
	}
	if len(r) != 0 {
		return fail()
	}
	return ks, nil
}

func (c *call) loadSlices() (keySlices, bool, error) {
	raw, ok, err := c.m.Get(sliceSubKey)
	if err != nil || !ok {
		return keySlices{}, false, err
	}
	ks, err := decodeKeySlices(raw)
	return ks, err == nil, err
}

// storeSlices writes the key's entry, or deletes it once no slice is left:
// then no window of the key is pending, and a new entry starts from the
// watermark (catchUp).
func (c *call) storeSlices(ks *keySlices) error {
	if len(ks.slices) == 0 {
		return c.m.Delete(sliceSubKey)
	}
	return c.m.Put(sliceSubKey, ks.encode())
}

// processSliced adds an element at ts to its slice.
func (c *call) processSliced(ts int64, r record.Record) error {
	spec := &c.o.spec
	var buf [8]span
	windows := spec.assign(buf[:0], ts)
	if spec.expired(windows[len(windows)-1], c.wm) {
		return c.drop(r, ts) // the last window holding it is expired, so all are
	}
	ks, _, err := c.loadSlices()
	if err != nil {
		return err
	}
	if err := c.catchUp(&ks, c.wm, span{}); err != nil {
		return err
	}
	slide := int64(spec.Slide / time.Millisecond)
	start := floorDiv(ts, slide) * slide
	i, found := slices.BinarySearchFunc(ks.slices, start, func(s slice, t int64) int { return cmp.Compare(s.start, t) })
	if !found {
		// The windows holding the new slice and neither live neighbour
		// (nor so any other live slice) are new: set their timers. A
		// window past the watermark is done.
		for _, w := range windows {
			switch {
			case i > 0 && w.start <= ks.slices[i-1].start, i < len(ks.slices) && ks.slices[i].start < w.end, spec.expired(w, c.wm):
				continue
			}
			if err := c.env.AddTimer(state.EventTime, spec.gcTime(w), timerName(w, purposeGC)); err != nil {
				return err
			}
		}
		ks.slices = slices.Insert(ks.slices, i, slice{start: start})
	}
	acc, err := c.o.agg.Add(ks.slices[i].acc, r)
	if err != nil {
		return err
	}
	ks.slices[i].acc = acc
	return c.storeSlices(&ks)
}

// onSliceTimer fires window sp's pane, and before it any pane of the key
// due earlier that has not fired.
func (c *call) onSliceTimer(sp span, t state.Timer) error {
	if t.Domain != state.EventTime {
		return nil // sliced windows set no processing-time timer
	}
	ks, ok, err := c.loadSlices()
	if err != nil || !ok {
		return err // every window of the key fired
	}
	// Only up to the timer's time, not the watermark: the runtime fires the
	// timers of other keys due before this key's next window first.
	if err := c.catchUp(&ks, t.Time, sp); err != nil {
		return err
	}
	return c.storeSlices(&ks)
}

// catchUp fires, in end order, every window of the key that holds a live
// slice, has not fired and is expired under watermark wm, deleting its
// timer unless it is timer's (the timer firing now, already deleted), and
// drops the slices no window still to fire holds. A key's windows end on
// multiples of Slide, and the one expired under wm that ends last ends at
// the last of them at or before wm+1ms: there is no allowed lateness.
func (c *call) catchUp(ks *keySlices, wm time.Time, timer span) error {
	if wm.IsZero() {
		return nil
	}
	spec := &c.o.spec
	size, slide := int64(spec.Size/time.Millisecond), int64(spec.Slide/time.Millisecond)
	done := floorDiv(wm.UnixMilli()+1, slide) * slide
	if ks.hasFired && done <= ks.fired {
		return nil
	}
	if n := len(ks.slices); n > 0 {
		lo, hi := ks.slices[0].start+slide, min(done, ks.slices[n-1].start+size)
		if ks.hasFired {
			lo = max(lo, ks.fired+slide)
		}
		j := 0 // the first slice at or after the window's start
		for end := lo; end <= hi; end += slide {
			w := span{end - size, end}
			for j < n && ks.slices[j].start < w.start {
				j++
			}
			if j == n || ks.slices[j].start >= w.end {
				continue // a window without records, which never was
			}
			if err := c.fireSliced(ks, w); err != nil {
				return err
			}
			if w != timer {
				if err := c.env.DeleteTimer(state.EventTime, spec.gcTime(w), timerName(w, purposeGC)); err != nil {
					return err
				}
			}
		}
	}
	ks.fired, ks.hasFired = done, true
	live := ks.slices[:0]
	for _, s := range ks.slices {
		if s.start+size > ks.fired {
			live = append(live, s)
		}
	}
	ks.slices = live
	return nil
}

// fireSliced emits window w's one pane: ON_TIME and final, the merge of
// its slices.
func (c *call) fireSliced(ks *keySlices, w span) error {
	var acc []byte
	for _, s := range ks.slices {
		if w.start <= s.start && s.start < w.end {
			m, err := c.o.agg.Merge(acc, s.acc)
			if err != nil {
				return err
			}
			acc = m
		}
	}
	val, err := c.o.agg.Result(acc)
	if err != nil {
		return err
	}
	p := Pane{Window: w.window(), Key: string(c.key), Info: PaneInfo{Index: 0, Timing: OnTime, Final: true}, Version: 1, Kind: Insert, Value: val}
	r, err := p.Record()
	if err != nil {
		return err
	}
	return c.env.Emit(r)
}
