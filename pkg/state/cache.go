package state

import "bytes"

// readCache keeps the committed values of the keys steps read and write —
// state cells, timers, counters — so that a key touched in every step (a
// window's accumulator, a session, a key group's counter) is read from
// Pebble once rather than once per step. A point read through an indexed
// batch walks the batch, the memtables and every level's table that may
// hold the key: it was a quarter of a windowed operator's CPU.
//
// The cache is written through: a batch notes each write it makes to a
// cacheable key (Batch.set, Batch.del), reads its own writes from those
// notes, and hands them to the cache only when it commits, so a step that
// is discarded leaves the cache as it found it. A read the cache misses
// goes to Pebble and is kept, present or absent: the batch has not written
// the key, so Pebble holds its committed value. Every write to a cacheable
// key goes through a batch, except Import, which empties the cache.
//
// Only the open batch uses the cache, so the store's writer lock guards it.
// It holds at most max bytes of keys and values (with an allowance per
// entry), dropping entries in the map's order — effectively at random —
// when it is full.
type readCache struct {
	max, bytes int64
	m          map[string]cached
}

// cached is a key's committed value, or its absence (ok false).
type cached struct {
	v  []byte
	ok bool
}

// entryOverhead approximates an entry's bytes beyond its key and value.
const entryOverhead = 64

// cacheable reports whether k's kind is one the cache holds. Operator
// metadata — positions, staged frames, held results — is written once and
// read rarely, and frames are large: it stays out.
func cacheable(k []byte) bool {
	return len(k) > 0 && (k[0] == kindState || k[0] == kindTimer || k[0] == kindCount)
}

func newReadCache(max int64) *readCache {
	return &readCache{max: max, m: map[string]cached{}}
}

func (c *readCache) get(k []byte) (cached, bool) {
	e, ok := c.m[string(k)]
	return e, ok
}

func (c *readCache) put(k string, e cached) {
	if old, ok := c.m[k]; ok {
		c.bytes -= int64(len(k) + len(old.v) + entryOverhead)
	}
	c.m[k] = e
	c.bytes += int64(len(k) + len(e.v) + entryOverhead)
	if c.bytes <= c.max {
		return
	}
	for k, e := range c.m {
		delete(c.m, k)
		c.bytes -= int64(len(k) + len(e.v) + entryOverhead)
		if c.bytes <= c.max*3/4 {
			break
		}
	}
}

func (c *readCache) clear() {
	clear(c.m)
	c.bytes = 0
}

// value is a copy of the cached value, as a read returns.
func (e cached) value() ([]byte, bool, error) {
	if !e.ok {
		return nil, false, nil
	}
	return bytes.Clone(e.v), true, nil
}

// set writes k = v in the batch, noting it for the cache.
func (b *Batch) set(k, v []byte) error {
	if err := b.pb.Set(k, v, nil); err != nil {
		return err
	}
	if cacheable(k) {
		b.note(k, cached{v: bytes.Clone(v), ok: true})
	}
	return nil
}

// del deletes k in the batch, noting it for the cache.
func (b *Batch) del(k []byte) error {
	if err := b.pb.Delete(k, nil); err != nil {
		return err
	}
	if cacheable(k) {
		b.note(k, cached{})
	}
	return nil
}

func (b *Batch) note(k []byte, e cached) {
	if e.v == nil && e.ok {
		e.v = []byte{}
	}
	if b.writes == nil {
		b.writes = make(map[string]cached, b.s.writesHint)
	}
	b.writes[string(k)] = e
}
