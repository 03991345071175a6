package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Batch is one step's writes: state, timers, input positions, metadata and
// staged output, committed atomically by Commit or discarded by Close. Reads
// through the batch see its own uncommitted writes. A Batch is used by one
// goroutine.
type Batch struct {
	s    *Store
	pb   *pebble.Batch
	err  error // set when the batch could not start
	done bool

	counts     map[countRef]int64 // per key group counter deltas
	famDelta   []int64            // per family live-key deltas, by family.idx
	timerDelta int64
	// floor is, per timer domain, a time no timer of the domain the batch
	// sees is before: the store's when the batch started, lowered by the
	// timers it sets and raised by its scans (timer.go).
	floor [2]int64
	// noting says, per timer domain, that the timers the batch sets are
	// noted in noted, for Merge (timer.go).
	noting [2]bool
	noted  [2][]Timer
	warned []bool // limit already logged in this batch, by family.idx
	// writes are the batch's writes to cacheable keys, for the read
	// cache once it commits (cache.go).
	writes map[string]cached
}

// countRef names one persisted counter: a family's live keys in a key group,
// or (fam < 0) the key group's timers.
type countRef struct {
	kg  int
	fam int
}

// NewBatch starts a batch. It waits while another batch is open: a store has
// one writer at a time, and every batch must end with Commit or Close.
func (s *Store) NewBatch() *Batch {
	b := &Batch{s: s}
	s.writer.Lock()
	s.mu.RLock()
	closed := s.mu.closed
	if !closed {
		b.pb = s.db.NewIndexedBatch()
	}
	s.mu.RUnlock()
	if closed {
		s.writer.Unlock()
		b.err = ErrClosed
		b.done = true
		return b
	}
	b.counts = make(map[countRef]int64)
	for d := range b.floor {
		b.floor[d] = s.floor[d].Load()
	}
	b.famDelta = make([]int64, len(s.fams))
	b.warned = make([]bool, len(s.fams))
	return b
}

func (b *Batch) check() error {
	if b.err != nil {
		return b.err
	}
	if b.done {
		return ErrBatchDone
	}
	return nil
}

// Commit applies the batch atomically, synced to disk unless the store was
// opened with NoSync. The batch cannot be used afterwards, whether or not
// Commit succeeded.
func (b *Batch) Commit() error {
	if err := b.check(); err != nil {
		return err
	}
	defer b.finish()
	for ref, d := range b.counts {
		if d == 0 {
			continue
		}
		if err := b.addCounter(ref, d); err != nil {
			return err
		}
	}
	b.s.mu.RLock()
	err := ErrClosed
	if !b.s.mu.closed {
		err = b.s.apply(b.pb)
	}
	b.s.mu.RUnlock()
	if err != nil {
		// Whether any of it applied is not known: read afresh.
		b.s.cache.clear()
		b.s.forgetFloors()
		if errors.Is(err, ErrClosed) || errors.Is(err, ErrDisk) {
			return err
		}
		return fmt.Errorf("state: commit: %w", err)
	}
	for k, e := range b.writes {
		b.s.cache.put(k, e)
	}
	b.s.writesHint = len(b.writes)
	for i, d := range b.famDelta {
		b.s.fams[i].keys.Add(d)
	}
	b.s.timers.Add(b.timerDelta)
	for d, f := range b.floor {
		b.s.floor[d].Store(f)
	}
	return nil
}

// addCounter adds d to a persisted counter, deleting it at zero.
func (b *Batch) addCounter(ref countRef, d int64) error {
	k := countKey(ref.kg, countTimers, "")
	if ref.fam >= 0 {
		k = countKey(ref.kg, countFamily, b.s.fams[ref.fam].Name)
	}
	v, ok, err := b.get(k)
	if err != nil {
		return err
	}
	var cur int64
	if ok {
		n, w := binary.Varint(v)
		if w <= 0 {
			return fmt.Errorf("%w: counter %x", ErrCorrupt, k)
		}
		cur = n
	}
	switch n := cur + d; {
	case n < 0:
		return fmt.Errorf("%w: counter %x would become %d", ErrCorrupt, k, n)
	case n == 0:
		return b.del(k)
	default:
		return b.set(k, binary.AppendVarint(nil, n))
	}
}

// Close discards the batch if it was not committed. It is safe to call
// after Commit and more than once.
func (b *Batch) Close() {
	if b.done {
		return
	}
	b.finish()
}

func (b *Batch) finish() {
	b.done = true
	_ = b.pb.Close() // only fails for a batch already closed
	b.pb = nil
	b.s.writer.Unlock()
}

// SetPosition records how far input has been processed.
func (b *Batch) SetPosition(input string, p Position) error {
	if err := b.check(); err != nil {
		return err
	}
	return b.set(metaKey(metaPosition, input), encodePosition(p))
}

// PutMeta sets an operator-level record, such as the generation.
func (b *Batch) PutMeta(name string, v []byte) error {
	if err := b.check(); err != nil {
		return err
	}
	return b.set(metaKey(metaUser, name), v)
}

// DeleteMeta deletes an operator-level record.
func (b *Batch) DeleteMeta(name string) error {
	if err := b.check(); err != nil {
		return err
	}
	return b.del(metaKey(metaUser, name))
}

// StageOutput stages a frame for publishing after the commit. Staged frames
// are listed in id order, so ids should sort in the order they are staged
// (for example zero-padded sequence numbers).
func (b *Batch) StageOutput(id string, data []byte) error {
	if err := b.check(); err != nil {
		return err
	}
	return b.set(metaKey(metaOutput, id), data)
}

// DeleteOutput removes a staged frame once it has been published.
func (b *Batch) DeleteOutput(id string) error {
	if err := b.check(); err != nil {
		return err
	}
	return b.del(metaKey(metaOutput, id))
}

// HoldOutput holds output seq — a transactional sink's result, released
// only once the checkpoint covering it completes. Held output is listed in
// sequence order.
func (b *Batch) HoldOutput(seq uint64, data []byte) error {
	if err := b.check(); err != nil {
		return err
	}
	return b.set(heldKey(seq), data)
}

// ReleaseOutput removes held output seq once it has been published.
func (b *Batch) ReleaseOutput(seq uint64) error {
	if err := b.check(); err != nil {
		return err
	}
	return b.del(heldKey(seq))
}

// get reads through the batch; the result is a copy. A cacheable key is
// read from the batch's own writes, then from the read cache, and only
// then from Pebble (cache.go).
func (b *Batch) get(k []byte) ([]byte, bool, error) {
	b.s.mu.RLock()
	defer b.s.mu.RUnlock()
	if b.s.mu.closed {
		return nil, false, ErrClosed
	}
	c := cacheable(k)
	if c {
		if e, ok := b.writes[string(k)]; ok {
			return e.value()
		}
		if e, ok := b.s.cache.get(k); ok {
			return e.value()
		}
	}
	var r reader = b.pb
	if c {
		// The batch has not written k — it notes every write to a
		// cacheable key — so Pebble's committed value is the answer:
		// read it without the iterator over the batch a read through
		// the batch makes.
		r = b.s.db
	}
	v, ok, err := getFrom(r, k)
	if err == nil && c {
		b.s.cache.put(string(k), cached{v: bytes.Clone(v), ok: ok})
	}
	return v, ok, err
}

// scan iterates [lo, hi) through the batch. The iteration does not see
// writes fn makes.
func (b *Batch) scan(lo, hi []byte, fn func(k, v []byte) error) error {
	b.s.mu.RLock()
	defer b.s.mu.RUnlock()
	if b.s.mu.closed {
		return ErrClosed
	}
	return scanIn(b.pb, lo, hi, fn)
}

// deleteRange deletes every record in [lo, hi) point by point, so that no
// range tombstones accumulate, calling fn (if not nil) with each deleted
// record first.
func (b *Batch) deleteRange(lo, hi []byte, fn func(k, v []byte) error) error {
	var keys, vals [][]byte
	err := b.scan(lo, hi, func(k, v []byte) error {
		keys = append(keys, append([]byte(nil), k...))
		vals = append(vals, append([]byte(nil), v...))
		return nil
	})
	if err != nil {
		return err
	}
	for i, k := range keys {
		if fn != nil {
			if err := fn(k, vals[i]); err != nil {
				return err
			}
		}
		if err := b.del(k); err != nil {
			return err
		}
	}
	return nil
}

// created records a new live key of f in key group kg, or refuses it with
// a *LimitError when the family is full.
func (b *Batch) created(f *family, kg int) error {
	if f.keys.Load()+b.famDelta[f.idx] >= f.MaxKeys {
		f.limitHits.Add(1)
		if !b.warned[f.idx] {
			b.warned[f.idx] = true
			b.s.log.Warn("state: family reached its key limit",
				"family", f.Name, "max_keys", f.MaxKeys, "action", f.OnLimit.String())
		}
		return &LimitError{Family: f.Name, MaxKeys: f.MaxKeys, Action: f.OnLimit}
	}
	b.famDelta[f.idx]++
	b.counts[countRef{kg: kg, fam: f.idx}]++
	return nil
}

// removed records that a live key of f in key group kg is gone.
func (b *Batch) removed(f *family, kg int) {
	b.famDelta[f.idx]--
	b.counts[countRef{kg: kg, fam: f.idx}]--
}
