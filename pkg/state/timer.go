package state

import (
	"bytes"
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Domain is the time domain of a timer.
type Domain uint8

const (
	// EventTime timers fire when the operator's watermark passes them.
	EventTime Domain = iota
	// ProcessingTime timers fire when the injected clock passes them.
	ProcessingTime
)

func (d Domain) String() string {
	switch d {
	case EventTime:
		return "event-time"
	case ProcessingTime:
		return "processing-time"
	}
	return fmt.Sprintf("Domain(%d)", uint8(d))
}

// Timer is a callback registered for a key at a time. A timer is identified
// by all its fields: setting the same timer twice registers it once.
type Timer struct {
	Domain   Domain
	Time     time.Time
	KeyGroup int
	Key      []byte
	Name     string
}

// compareTimers orders timers by time, then key group, key and name.
func compareTimers(a, b Timer) int {
	if c := a.Time.Compare(b.Time); c != 0 {
		return c
	}
	if c := cmp.Compare(a.KeyGroup, b.KeyGroup); c != 0 {
		return c
	}
	if c := bytes.Compare(a.Key, b.Key); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

func (b *Batch) timerKey(t Timer) ([]byte, error) {
	if t.Domain > ProcessingTime {
		return nil, fmt.Errorf("state: timer %q: invalid domain %d", t.Name, t.Domain)
	}
	if t.KeyGroup < 0 || t.KeyGroup >= b.s.groups {
		return nil, fmt.Errorf("%w: timer %q: %d not in [0, %d)", ErrKeyGroup, t.Name, t.KeyGroup, b.s.groups)
	}
	n, err := nanos(t.Time)
	if err != nil {
		return nil, fmt.Errorf("state: timer %q: %w", t.Name, err)
	}
	return timerKey(t.KeyGroup, t.Domain, n, t.Key, t.Name), nil
}

// SetTimer registers t; registering an existing timer again is a no-op.
func (b *Batch) SetTimer(t Timer) error {
	k, ok, err := b.lookupTimer(t)
	if err != nil || ok {
		return err
	}
	b.countTimer(t, +1)
	b.lowerFloor(t)
	return b.set(k, nil)
}

// AddTimer registers t, which the caller knows is not registered: it was
// never set, or was deleted or fired since. It skips the read SetTimer
// makes to tell, a read that for a new timer finds nothing after looking
// everywhere. Adding a timer that is registered counts it twice.
func (b *Batch) AddTimer(t Timer) error {
	if err := b.check(); err != nil {
		return err
	}
	k, err := b.timerKey(t)
	if err != nil {
		return err
	}
	b.countTimer(t, +1)
	b.lowerFloor(t)
	return b.set(k, nil)
}

// HasTimer reports whether the batch, over the committed store, holds t.
func (b *Batch) HasTimer(t Timer) (bool, error) {
	_, ok, err := b.lookupTimer(t)
	return ok, err
}

// DeleteTimer removes t, typically when it fires; a missing timer is a no-op.
func (b *Batch) DeleteTimer(t Timer) error {
	_, err := b.TakeTimer(t)
	return err
}

// TakeTimer removes t and reports whether it was registered: a loop firing
// the timers one DueTimers call returned takes each before firing it, and
// skips one that an earlier callback cancelled.
func (b *Batch) TakeTimer(t Timer) (bool, error) {
	k, ok, err := b.lookupTimer(t)
	if err != nil || !ok {
		return false, err
	}
	b.countTimer(t, -1)
	return true, b.del(k)
}

// lookupTimer checks the batch and t, and returns t's key and whether the
// batch, over the committed store, holds it.
func (b *Batch) lookupTimer(t Timer) (k []byte, ok bool, err error) {
	if err := b.check(); err != nil {
		return nil, false, err
	}
	if k, err = b.timerKey(t); err != nil {
		return nil, false, err
	}
	_, ok, err = b.get(k)
	return k, ok, err
}

// countTimer adds d to the batch's timer counts, overall and of t's key
// group.
func (b *Batch) countTimer(t Timer, d int64) {
	b.timerDelta += d
	b.counts[countRef{kg: t.KeyGroup, fam: -1}] += d
}

// DueTimers returns up to limit committed timers of domain d with Time at or
// before upTo, across all key groups, ordered by time, then key group, key
// and name. The timers stay registered until a batch deletes them.
func (s *Store) DueTimers(d Domain, upTo time.Time, limit int) ([]Timer, error) {
	if limit <= 0 || upTo.Before(minTime) || d > ProcessingTime {
		return nil, nil
	}
	end := int64(math.MaxInt64)
	if !upTo.After(maxTime) {
		end = upTo.UnixNano()
	}
	if end < s.floor[d].Load() {
		return nil, nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return nil, ErrClosed
	}
	due, _, err := dueTimers(s.db.NewIter, d, end, limit)
	return due, err
}

// DueTimers is Store.DueTimers as this batch sees the store: timers set by
// the batch are included, timers it deleted are not. The runtime fires
// event-time timers within the step that advanced the watermark, so a timer
// set earlier in the same step must be visible.
func (b *Batch) DueTimers(d Domain, upTo time.Time, limit int) ([]Timer, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	if limit <= 0 || upTo.Before(minTime) || d > ProcessingTime {
		return nil, nil
	}
	end := int64(math.MaxInt64)
	if !upTo.After(maxTime) {
		end = upTo.UnixNano()
	}
	b.noted[d] = b.noted[d][:0]
	if end < b.floor[d] {
		return nil, nil
	}
	b.s.mu.RLock()
	defer b.s.mu.RUnlock()
	if b.s.mu.closed {
		return nil, ErrClosed
	}
	due, floor, err := dueTimers(b.pb.NewIter, d, end, limit)
	if err == nil {
		b.floor[d] = floor
	}
	return due, err
}

// The floors. Between the watermark's steps no timer is due, and telling
// so by a scan costs a seek per key group in every step; a floor — a time
// no timer of the domain is before — tells it without one. A scan sets the
// batch's floor to the earliest timer it met, which is the earliest of
// all: it leaves a key group only for a later timer of the same group.
// Setting a timer lowers it. A committed batch hands its floors to the
// store, one whose commit failed, an Import or an Open leaves them unknown
// (math.MinInt64), and an aborted batch's floors die with it: the store's
// hold for what it holds, since its one writer is the open batch. Deleting
// a timer leaves the floor where it was, still below every timer.

// lowerFloor makes the batch's floor of t's domain no later than t, and
// notes t while the batch notes its domain.
func (b *Batch) lowerFloor(t Timer) {
	b.floor[t.Domain] = min(b.floor[t.Domain], t.Time.UnixNano())
	if b.noting[t.Domain] {
		t.Key = bytes.Clone(t.Key)
		b.noted[t.Domain] = append(b.noted[t.Domain], t)
	}
}

// Firing a list of due timers in order. A callback may set a timer that
// belongs in the part of the list still to fire; fetching the list again
// after each such callback would read it again for every timer fired,
// so the batch notes the timers it sets instead, and Merge puts them in.

// Note starts (on) or stops noting the timers of domain d the batch sets,
// for Merge. DueTimers forgets those noted before it: its list has them.
func (b *Batch) Note(d Domain, on bool) {
	if d <= ProcessingTime {
		b.noting[d], b.noted[d] = on, b.noted[d][:0]
	}
}

// Merge returns rest — what is left to fire, in order, of a list DueTimers
// gave for d and upTo — with the timers of d noted since DueTimers or the
// last Merge put where they order, those due by upTo and, when the list
// stopped at its limit, ordering before last, its last timer: timers the
// list did not reach may come before the others, which a later DueTimers
// finds. last is nil when the list held every due timer. It forgets the
// noted timers.
func (b *Batch) Merge(d Domain, rest []Timer, upTo time.Time, last *Timer) []Timer {
	if d > ProcessingTime || len(b.noted[d]) == 0 {
		return rest
	}
	for _, t := range b.noted[d] {
		if t.Time.After(upTo) || (last != nil && compareTimers(t, *last) >= 0) {
			continue
		}
		i, found := slices.BinarySearchFunc(rest, t, compareTimers)
		if !found {
			rest = slices.Insert(rest, i, t)
		}
	}
	b.noted[d] = b.noted[d][:0]
	return rest
}

// forgetFloors marks the store's floors unknown.
func (s *Store) forgetFloors() {
	for d := range s.floor {
		s.floor[d].Store(math.MinInt64)
	}
}

// dueTimers returns the due timers and the earliest timer of domain d it
// met (math.MaxInt64 if none), which no timer of d is before.
func dueTimers(newIter func(*pebble.IterOptions) (*pebble.Iterator, error), d Domain, end int64, limit int) ([]Timer, int64, error) {
	it, err := newIter(&pebble.IterOptions{
		LowerBound: []byte{kindTimer},
		UpperBound: []byte{kindTimer + 1},
	})
	if err != nil {
		return nil, 0, fmt.Errorf("state: iterate: %w", err)
	}
	floor := int64(math.MaxInt64)
	// Each key group's timers of domain d are in time order; merge them,
	// keeping the limit smallest in a max-heap, and leave a key group once
	// its next timer is past upTo or after everything kept: later than
	// it, or at the same time in a later key group — a window's timers
	// share one time, and without the second rule every call would read
	// all of them to keep the first limit.
	best := &timerHeap{}
	seek := func(kg int) bool {
		if kg > math.MaxUint16 {
			return false
		}
		return it.SeekGE(append(appendGroup(nil, kindTimer, kg), byte(d)))
	}
	for valid := seek(0); valid; {
		k := it.Key()
		if len(k) < 12 {
			return nil, 0, errors.Join(fmt.Errorf("%w: timer key %x", ErrCorrupt, k), it.Close())
		}
		kg := int(k[1])<<8 | int(k[2])
		switch dom := Domain(k[3]); {
		case dom < d:
			valid = seek(kg)
			continue
		case dom > d:
			valid = seek(kg + 1)
			continue
		}
		t := readTime(k[4:12])
		floor = min(floor, t)
		if t > end || (best.Len() == limit && after(t, kg, (*best)[0])) {
			valid = seek(kg + 1)
			continue
		}
		tm, err := parseTimerKey(k)
		if err != nil {
			return nil, 0, errors.Join(err, it.Close())
		}
		heap.Push(best, tm)
		if best.Len() > limit {
			heap.Pop(best)
		}
		valid = it.Next()
	}
	if err := it.Close(); err != nil {
		return nil, 0, fmt.Errorf("state: iterate: %w", err)
	}
	out := []Timer(*best)
	slices.SortFunc(out, compareTimers)
	return out, floor, nil
}

// after reports whether every timer of key group kg at time t or later
// orders after last under compareTimers.
func after(t int64, kg int, last Timer) bool {
	lt := last.Time.UnixNano()
	return t > lt || (t == lt && kg > last.KeyGroup)
}

// timerHeap is a max-heap of timers under compareTimers.
type timerHeap []Timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return compareTimers(h[i], h[j]) > 0 }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(Timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}
