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
	return b.set(k, nil)
}

// HasTimer reports whether the batch, over the committed store, holds t.
func (b *Batch) HasTimer(t Timer) (bool, error) {
	_, ok, err := b.lookupTimer(t)
	return ok, err
}

// DeleteTimer removes t, typically when it fires; a missing timer is a no-op.
func (b *Batch) DeleteTimer(t Timer) error {
	k, ok, err := b.lookupTimer(t)
	if err != nil || !ok {
		return err
	}
	b.countTimer(t, -1)
	return b.del(k)
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
	if limit <= 0 || upTo.Before(minTime) {
		return nil, nil
	}
	end := int64(math.MaxInt64)
	if !upTo.After(maxTime) {
		end = upTo.UnixNano()
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return nil, ErrClosed
	}
	return dueTimers(s.db.NewIter, d, end, limit)
}

// DueTimers is Store.DueTimers as this batch sees the store: timers set by
// the batch are included, timers it deleted are not. The runtime fires
// event-time timers within the step that advanced the watermark, so a timer
// set earlier in the same step must be visible.
func (b *Batch) DueTimers(d Domain, upTo time.Time, limit int) ([]Timer, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	if limit <= 0 || upTo.Before(minTime) {
		return nil, nil
	}
	end := int64(math.MaxInt64)
	if !upTo.After(maxTime) {
		end = upTo.UnixNano()
	}
	b.s.mu.RLock()
	defer b.s.mu.RUnlock()
	if b.s.mu.closed {
		return nil, ErrClosed
	}
	return dueTimers(b.pb.NewIter, d, end, limit)
}

func dueTimers(newIter func(*pebble.IterOptions) (*pebble.Iterator, error), d Domain, end int64, limit int) ([]Timer, error) {
	it, err := newIter(&pebble.IterOptions{
		LowerBound: []byte{kindTimer},
		UpperBound: []byte{kindTimer + 1},
	})
	if err != nil {
		return nil, fmt.Errorf("state: iterate: %w", err)
	}
	// Each key group's timers of domain d are in time order; merge them,
	// keeping the limit smallest in a max-heap, and leave a key group once
	// its next timer is past upTo or later than everything kept.
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
			return nil, errors.Join(fmt.Errorf("%w: timer key %x", ErrCorrupt, k), it.Close())
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
		if t > end || (best.Len() == limit && fromNanos(t).After((*best)[0].Time)) {
			valid = seek(kg + 1)
			continue
		}
		tm, err := parseTimerKey(k)
		if err != nil {
			return nil, errors.Join(err, it.Close())
		}
		heap.Push(best, tm)
		if best.Len() > limit {
			heap.Pop(best)
		}
		valid = it.Next()
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("state: iterate: %w", err)
	}
	out := []Timer(*best)
	slices.SortFunc(out, compareTimers)
	return out, nil
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
