package state

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// A cell is the stored form of a value, a map entry or a list header:
// a flag byte, the expiry when the flag is cellExpiring, then the payload.
// Entries carry their own expiry so that a read hides an expired entry
// before Expire deletes it, and so that Expire can tell a current expiry
// index record from a stale one.
const (
	cellPlain    byte = 0
	cellExpiring byte = 1
)

type cell struct {
	expiring bool
	exp      int64 // unix nanos; the entry is dead at and after exp
	payload  []byte
}

func (c cell) liveAt(now int64) bool { return !c.expiring || now < c.exp }

func appendCell(dst []byte, expiring bool, exp int64, payload []byte) []byte {
	if !expiring {
		return append(append(dst, cellPlain), payload...)
	}
	return append(appendTime(append(dst, cellExpiring), exp), payload...)
}

func decodeCell(v []byte) (cell, error) {
	switch {
	case len(v) >= 1 && v[0] == cellPlain:
		return cell{payload: v[1:]}, nil
	case len(v) >= 9 && v[0] == cellExpiring:
		return cell{expiring: true, exp: readTime(v[1:9]), payload: v[9:]}, nil
	}
	return cell{}, fmt.Errorf("%w: cell %x", ErrCorrupt, v)
}

// expiry returns now+ttl, saturating at the largest storable time.
func expiry(now int64, ttl time.Duration) int64 {
	if int64(ttl) > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + int64(ttl)
}

// Expire deletes entries of TTL families that have expired at now: up to
// limit expiry records, in one committed batch. Each record either deletes
// its entry (a value, a map entry or a whole list) and lowers the family's
// live-key count, or is found stale (its entry was since rewritten with a
// later expiry, or deleted) and is dropped. Expire returns the number of
// records processed, so a result below limit means nothing more is due at
// now. Like NewBatch, it waits for the open batch.
func (s *Store) Expire(now time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	n, err := nanos(now)
	if err != nil {
		return 0, err
	}
	b := s.NewBatch()
	defer b.Close()
	if err := b.check(); err != nil {
		return 0, err
	}
	due, err := s.dueExpiries(n, limit)
	if err != nil {
		return 0, err
	}
	for _, k := range due {
		if err := b.expire(k); err != nil {
			return 0, err
		}
	}
	if len(due) == 0 {
		return 0, nil
	}
	if err := b.Commit(); err != nil {
		return 0, err
	}
	return len(due), nil
}

// dueExpiries returns up to limit committed expiry records with expiry at
// or before now, visiting key groups in order and within each the earliest
// expiries first.
func (s *Store) dueExpiries(now int64, limit int) ([][]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return nil, ErrClosed
	}
	it, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte{kindExpiry},
		UpperBound: []byte{kindExpiry + 1},
	})
	if err != nil {
		return nil, fmt.Errorf("state: iterate: %w", err)
	}
	var due [][]byte
	for valid := it.First(); valid && len(due) < limit; {
		k := it.Key()
		kg, exp, _, err := parseExpiryKey(k)
		if err != nil {
			return nil, errors.Join(err, it.Close())
		}
		if exp > now {
			if kg == math.MaxUint16 {
				break
			}
			valid = it.SeekGE(appendGroup(nil, kindExpiry, kg+1))
			continue
		}
		due = append(due, append([]byte(nil), k...))
		valid = it.Next()
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("state: iterate: %w", err)
	}
	return due, nil
}

// expire processes one expiry record.
func (b *Batch) expire(rec []byte) error {
	kg, exp, sk, err := parseExpiryKey(rec)
	if err != nil {
		return err
	}
	if err := b.del(rec); err != nil {
		return err
	}
	key, err := parseStateKey(sk)
	if err != nil {
		return err
	}
	f := b.s.families[key.family]
	if f == nil {
		b.s.log.Warn("state: expiry record of an undeclared family dropped", "family", key.family)
		return nil
	}
	raw, ok, err := b.get(sk)
	if err != nil || !ok {
		return err // a deleted entry leaves nothing to do
	}
	c, err := decodeCell(raw)
	if err != nil {
		return err
	}
	if !c.expiring || c.exp != exp {
		return nil // stale: the entry was rewritten since
	}
	switch {
	case f.Kind == KindValue && len(key.sub) == 0:
		if err := b.del(sk); err != nil {
			return err
		}
		b.removed(f, kg)
		return nil
	case f.Kind == KindMap && len(key.sub) > 0:
		if err := b.del(sk); err != nil {
			return err
		}
		return b.mapEntryGone(f, kg, key.prefix)
	case f.Kind == KindList && len(key.sub) == 0:
		// deleteList also deletes rec, already deleted above.
		return b.deleteList(f, kg, key.prefix, c)
	}
	return fmt.Errorf("%w: expiry record %x does not fit family %q (%s)", ErrCorrupt, rec, f.Name, f.Kind)
}
