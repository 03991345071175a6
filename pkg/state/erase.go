package state

import (
	"bytes"
	"context"
	"fmt"
	"time"
)

// Erased is what EraseKey removed.
type Erased struct {
	// Families are the families that held the key.
	Families []string
	// Timers is how many of the key's timers were deleted.
	Timers int
}

// EraseKey deletes everything the store keeps for key in keyGroup, as a
// legal erasure must: its value, map or list in every family, their TTL
// index entries, and its timers of both domains — so that no timer fires
// later on state that is gone, and no key count is left behind. now is the
// step's processing time. Erasing a key the store does not hold changes
// nothing.
func (b *Batch) EraseKey(keyGroup int, key []byte, now time.Time) (Erased, error) {
	var out Erased
	if err := b.check(); err != nil {
		return out, err
	}
	sc := b.Scope(keyGroup, key, now)
	if sc.err != nil {
		return out, sc.err
	}
	for _, f := range b.s.fams {
		name := f.Name
		if _, ok, err := b.get(statePrefix(keyGroup, name, key)); err != nil {
			return out, err
		} else if !ok {
			continue
		}
		var err error
		switch f.Kind {
		case KindValue:
			err = sc.Value(name).Clear()
		case KindMap:
			err = sc.Map(name).Clear()
		case KindList:
			err = sc.List(name).Clear()
		}
		if err != nil {
			return out, err
		}
		out.Families = append(out.Families, name)
	}
	lo := appendGroup(nil, kindTimer, keyGroup)
	var gone []Timer
	err := b.scan(lo, prefixEnd(lo), func(k, _ []byte) error {
		t, err := parseTimerKey(k)
		if err == nil && bytes.Equal(t.Key, key) {
			gone = append(gone, t)
		}
		return err
	})
	if err != nil {
		return out, err
	}
	for _, t := range gone {
		if err := b.DeleteTimer(t); err != nil {
			return out, err
		}
	}
	out.Timers = len(gone)
	return out, nil
}

// Purge rewrites the table files holding key group kg's state, so that
// what a batch erased from it (EraseKey) is gone from disk, not only
// hidden by tombstones: until a compaction reaches them, the old values
// stay in table files that later snapshots — and the checkpoints made of
// them — go on sharing. It flushes the memtable and compacts the key
// group's ranges through every level. Call it after the erasing batch
// committed; it costs a rewrite of the files that overlap the key group.
func (s *Store) Purge(ctx context.Context, kg int) error {
	if err := s.Flush(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return ErrClosed
	}
	for _, sp := range KeyGroupSpan(kg) {
		if err := s.db.Compact(ctx, sp.Start, sp.End, false); err != nil {
			return fmt.Errorf("state: purge key group %d: %w", kg, err)
		}
	}
	return nil
}

// KeysOf returns the distinct keys of key group kg, in any family or
// timer, that match reports: what an erasure of a part of every key — a
// tenant's, under tenant-scoped keys — must erase one by one.
func (s *Store) KeysOf(kg int, match func(key []byte) bool) ([][]byte, error) {
	seen := map[string]bool{}
	var out [][]byte
	add := func(key []byte) {
		if !seen[string(key)] && match(key) {
			seen[string(key)] = true
			out = append(out, bytes.Clone(key))
		}
	}
	lo := appendGroup(nil, kindState, kg)
	err := s.scan(lo, prefixEnd(lo), func(k, _ []byte) error {
		_, rest, ok := readBytes(k[3:])
		if ok {
			var key []byte
			if key, _, ok = readBytes(rest); ok {
				add(key)
			}
		}
		if !ok {
			return fmt.Errorf("%w: state key %x", ErrCorrupt, k)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	lo = appendGroup(nil, kindTimer, kg)
	err = s.scan(lo, prefixEnd(lo), func(k, _ []byte) error {
		t, err := parseTimerKey(k)
		if err == nil {
			add(t.Key)
		}
		return err
	})
	return out, err
}
