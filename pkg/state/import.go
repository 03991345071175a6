package state

import "fmt"

// importChunk bounds the bytes of one write batch of Import.
const importChunk = 4 << 20

// Import copies the key groups that keep accepts from src into s: their
// state entries, timers, expiry index and counters (KeyGroupSpan), and
// nothing else. Rescaling builds the state of an instance this way from the
// snapshots of the instances that owned its key groups before; positions
// and metadata are the caller's to take from src, since only it knows
// which inputs the new instance reads. s must hold nothing of those key
// groups; src is only read. It returns the number of keys copied.
func (s *Store) Import(src *Store, keep func(kg int) bool) (int64, error) {
	if src.groups != s.groups {
		return 0, fmt.Errorf("%w: importing %d key groups into a store of %d", ErrIncompatible, src.groups, s.groups)
	}
	s.writer.Lock()
	defer s.writer.Unlock()
	s.cache.clear()  // written here without a batch
	s.forgetFloors() // and timers with it
	n, err := s.importGroups(src, keep)
	if err != nil {
		return n, err
	}
	// The counters moved with their key groups: sum them again.
	s.timers.Store(0)
	for _, f := range s.fams {
		f.keys.Store(0)
	}
	return n, s.loadCounters()
}

func (s *Store) importGroups(src *Store, keep func(kg int) bool) (int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return 0, ErrClosed
	}
	src.mu.RLock()
	defer src.mu.RUnlock()
	if src.mu.closed {
		return 0, ErrClosed
	}
	var n int64
	b := s.db.NewBatch()
	flush := func() error {
		if b.Empty() {
			return nil
		}
		err := s.apply(b)
		b.Close()
		b = s.db.NewBatch()
		return err
	}
	for kg := 0; kg < s.groups; kg++ {
		if !keep(kg) {
			continue
		}
		for _, sp := range KeyGroupSpan(kg) {
			err := scanIn(src.db, sp.Start, sp.End, func(k, v []byte) error {
				n++
				if err := b.Set(k, v, nil); err != nil {
					return err
				}
				if b.Len() >= importChunk {
					return flush()
				}
				return nil
			})
			if err != nil {
				b.Close()
				return n, fmt.Errorf("state: import key group %d: %w", kg, err)
			}
		}
	}
	if err := flush(); err != nil {
		b.Close()
		return n, fmt.Errorf("state: import: %w", err)
	}
	b.Close()
	return n, nil
}
