package state

import (
	"bytes"
	"fmt"
	"maps"

	"github.com/cockroachdb/pebble/v2"
)

// Sweep measures the bytes each family's live state takes — keys and
// values, map entries and list elements included, expired entries until
// they are deleted — by walking the store's state in slices, so that a
// large store is measured without a long pause: each call to
// Store.SweepFamilies reads at most its budget of keys and goes on where
// the last one stopped. A measure is complete when a walk reaches the
// end; until the first one does, Bytes is nil.
type Sweep struct {
	cursor []byte
	acc    map[string]int64
	last   map[string]int64
}

// Bytes is the last complete measure, by family name.
func (w *Sweep) Bytes() map[string]int64 { return w.last }

// SweepFamilies reads up to budget keys of w's walk and reports whether
// the walk completed a measure.
func (s *Store) SweepFamilies(w *Sweep, budget int) (done bool, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return false, ErrClosed
	}
	lo := w.cursor
	if lo == nil {
		lo = []byte{kindState}
		w.acc = make(map[string]int64, len(s.fams))
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: []byte{kindState + 1}})
	if err != nil {
		return false, fmt.Errorf("state: sweep: %w", err)
	}
	defer it.Close()
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		if n == budget {
			w.cursor = bytes.Clone(it.Key())
			return false, nil
		}
		n++
		k := it.Key()
		if len(k) < 3 {
			continue
		}
		name, _, ok := readBytes(k[3:])
		if !ok {
			continue
		}
		w.acc[string(name)] += int64(len(k) + len(it.Value()))
	}
	if err := it.Error(); err != nil {
		return false, fmt.Errorf("state: sweep: %w", err)
	}
	for _, f := range s.fams {
		if _, ok := w.acc[f.Name]; !ok {
			w.acc[f.Name] = 0
		}
	}
	w.last, w.cursor = maps.Clone(w.acc), nil
	return true, nil
}
