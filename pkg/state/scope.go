package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// Scope is the state of one key within a batch. now is the processing time
// of the step: it decides which entries of TTL families have expired and
// when written entries will.
type Scope struct {
	b   *Batch
	kg  int
	key []byte
	now time.Time
	err error
}

// Scope returns the state of key in keyGroup. An invalid key group is
// reported by every method of the handles the scope returns.
func (b *Batch) Scope(keyGroup int, key []byte, now time.Time) Scope {
	sc := Scope{b: b, kg: keyGroup, key: bytes.Clone(key), now: now}
	if keyGroup < 0 || keyGroup >= b.s.groups {
		sc.err = fmt.Errorf("%w: %d not in [0, %d)", ErrKeyGroup, keyGroup, b.s.groups)
	}
	return sc
}

// Value returns the key's value in family. Its methods return
// ErrUnknownFamily or ErrWrongKind if family is not a declared value family.
func (sc Scope) Value(family string) Value { return Value{sc.handle(family, KindValue)} }

// Map returns the key's map in family. Its methods return ErrUnknownFamily
// or ErrWrongKind if family is not a declared map family.
func (sc Scope) Map(family string) Map { return Map{sc.handle(family, KindMap)} }

// List returns the key's list in family. Its methods return
// ErrUnknownFamily or ErrWrongKind if family is not a declared list family.
func (sc Scope) List(family string) List { return List{sc.handle(family, KindList)} }

// handle is one key's state in one family, within a batch.
type handle struct {
	b      *Batch
	f      *family
	kg     int
	prefix []byte // statePrefix of the key
	now    int64  // processing time, unix nanos
	exp    int64  // expiry of entries written now, when f.TTL > 0
	err    error
}

func (sc Scope) handle(name string, k Kind) handle {
	h := handle{b: sc.b, kg: sc.kg, err: sc.err}
	if h.err != nil {
		return h
	}
	f := sc.b.s.families[name]
	switch {
	case f == nil:
		h.err = fmt.Errorf("%w: %q", ErrUnknownFamily, name)
		return h
	case f.Kind != k:
		h.err = fmt.Errorf("%w: %q is a %s family, used as a %s", ErrWrongKind, name, f.Kind, k)
		return h
	}
	h.f = f
	h.prefix = statePrefix(sc.kg, name, sc.key)
	now, err := nanos(sc.now)
	switch {
	case err == nil:
		h.now = now
		h.exp = expiry(now, f.TTL)
	case f.TTL > 0:
		h.err = fmt.Errorf("state: family %q has a TTL, scope needs a processing time: %w", name, err)
	default:
		h.now = math.MinInt64 // nothing looks expired
	}
	return h
}

// check reports whether the handle and its batch are usable.
func (h *handle) check() error {
	if h.err != nil {
		return h.err
	}
	return h.b.check()
}

// read returns the cell at k, if present.
func (h *handle) read(k []byte) (cell, bool, error) {
	raw, ok, err := h.b.get(k)
	if err != nil || !ok {
		return cell{}, false, err
	}
	c, err := decodeCell(raw)
	return c, err == nil, err
}

// write sets k to a cell holding payload, replacing old (if present) and
// keeping the expiry index in step.
func (h *handle) write(k []byte, old cell, hadOld bool, payload []byte) error {
	if hadOld && old.expiring {
		if err := h.b.del(expiryKey(h.kg, old.exp, k)); err != nil {
			return err
		}
	}
	ttl := h.f.TTL > 0
	if err := h.b.set(k, appendCell(nil, ttl, h.exp, payload)); err != nil {
		return err
	}
	if ttl {
		return h.b.set(expiryKey(h.kg, h.exp, k), nil)
	}
	return nil
}

// errStop ends a scan early without error.
var errStop = errors.New("state: stop")

// Value is a single value per key.
type Value struct{ h handle }

// Get returns the value, and false if there is none or it has expired.
func (v Value) Get() ([]byte, bool, error) {
	if err := v.h.check(); err != nil {
		return nil, false, err
	}
	c, ok, err := v.h.read(v.h.prefix)
	if err != nil || !ok || !c.liveAt(v.h.now) {
		return nil, false, err
	}
	return c.payload, true, nil
}

// Set sets the value. Creating the key fails with a *LimitError when the
// family is full; the batch is then unchanged.
func (v Value) Set(val []byte) error {
	h := &v.h
	if err := h.check(); err != nil {
		return err
	}
	old, ok, err := h.read(h.prefix)
	if err != nil {
		return err
	}
	if !ok {
		if err := h.b.created(h.f, h.kg); err != nil {
			return err
		}
	}
	return h.write(h.prefix, old, ok, val)
}

// Clear deletes the value.
func (v Value) Clear() error {
	h := &v.h
	if err := h.check(); err != nil {
		return err
	}
	old, ok, err := h.read(h.prefix)
	if err != nil || !ok {
		return err
	}
	if err := h.b.deleteCell(h.kg, h.prefix, old); err != nil {
		return err
	}
	h.b.removed(h.f, h.kg)
	return nil
}

// Map is a map of sub-keys to values per key. Each entry expires on its own
// in a TTL family. The key counts as one live key while it has entries.
type Map struct{ h handle }

// Get returns the entry for k, and false if there is none or it has expired.
func (m Map) Get(k []byte) ([]byte, bool, error) {
	if err := m.h.check(); err != nil {
		return nil, false, err
	}
	c, ok, err := m.h.read(mapEntryKey(m.h.prefix, k))
	if err != nil || !ok || !c.liveAt(m.h.now) {
		return nil, false, err
	}
	return c.payload, true, nil
}

// Put sets the entry for k. Creating the key's first entry fails with a
// *LimitError when the family is full; the batch is then unchanged.
func (m Map) Put(k, v []byte) error {
	h := &m.h
	if err := h.check(); err != nil {
		return err
	}
	ek := mapEntryKey(h.prefix, k)
	old, ok, err := h.read(ek)
	if err != nil {
		return err
	}
	if !ok {
		n, err := h.b.mapLen(h.prefix)
		if err != nil {
			return err
		}
		if n == 0 {
			if err := h.b.created(h.f, h.kg); err != nil {
				return err
			}
		}
		if err := h.b.setMapLen(h.prefix, n+1); err != nil {
			return err
		}
	}
	return h.write(ek, old, ok, v)
}

// Delete deletes the entry for k.
func (m Map) Delete(k []byte) error {
	h := &m.h
	if err := h.check(); err != nil {
		return err
	}
	ek := mapEntryKey(h.prefix, k)
	old, ok, err := h.read(ek)
	if err != nil || !ok {
		return err
	}
	if err := h.b.deleteCell(h.kg, ek, old); err != nil {
		return err
	}
	return h.b.mapEntryGone(h.f, h.kg, h.prefix)
}

// Range calls fn for each live entry in sub-key order until fn returns
// false. k and v are valid only during the call. fn may write to the batch;
// the iteration does not see those writes.
func (m Map) Range(fn func(k, v []byte) bool) error {
	h := &m.h
	if err := h.check(); err != nil {
		return err
	}
	lo := append(bytes.Clone(h.prefix), tagEntry)
	err := h.b.scan(lo, prefixEnd(lo), func(k, v []byte) error {
		c, err := decodeCell(v)
		if err != nil {
			return err
		}
		if c.liveAt(h.now) && !fn(k[len(lo):], c.payload) {
			return errStop
		}
		return nil
	})
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

// Clear deletes every entry.
func (m Map) Clear() error {
	h := &m.h
	if err := h.check(); err != nil {
		return err
	}
	n, err := h.b.mapLen(h.prefix)
	if err != nil || n == 0 {
		return err
	}
	lo := append(bytes.Clone(h.prefix), tagEntry)
	err = h.b.deleteRange(lo, prefixEnd(lo), func(k, v []byte) error {
		c, err := decodeCell(v)
		if err != nil || !c.expiring {
			return err
		}
		return h.b.del(expiryKey(h.kg, c.exp, k))
	})
	if err != nil {
		return err
	}
	if err := h.b.del(h.prefix); err != nil {
		return err
	}
	h.b.removed(h.f, h.kg)
	return nil
}

// List is an append-only list of values per key. In a TTL family the whole
// list expires TTL after its last Append.
type List struct{ h handle }

// Append adds v at the end of the list. Creating the list fails with a
// *LimitError when the family is full; the batch is then unchanged.
func (l List) Append(v []byte) error {
	h := &l.h
	if err := h.check(); err != nil {
		return err
	}
	hdr, ok, err := h.read(h.prefix)
	if err != nil {
		return err
	}
	var next uint64
	switch {
	case !ok:
		if err := h.b.created(h.f, h.kg); err != nil {
			return err
		}
	case !hdr.liveAt(h.now):
		// Expired but not yet deleted: start over, keeping the sequence.
		lo := append(bytes.Clone(h.prefix), tagEntry)
		if err := h.b.deleteRange(lo, prefixEnd(lo), nil); err != nil {
			return err
		}
		fallthrough
	default:
		n, w := binary.Uvarint(hdr.payload)
		if w <= 0 {
			return fmt.Errorf("%w: list header %x", ErrCorrupt, h.prefix)
		}
		next = n
	}
	if err := h.b.set(listElemKey(h.prefix, next), v); err != nil {
		return err
	}
	return h.write(h.prefix, hdr, ok, binary.AppendUvarint(nil, next+1))
}

// All returns the list's values in append order; nil if the list is empty
// or has expired.
func (l List) All() ([][]byte, error) {
	h := &l.h
	if err := h.check(); err != nil {
		return nil, err
	}
	hdr, ok, err := h.read(h.prefix)
	if err != nil || !ok || !hdr.liveAt(h.now) {
		return nil, err
	}
	var out [][]byte
	lo := append(bytes.Clone(h.prefix), tagEntry)
	err = h.b.scan(lo, prefixEnd(lo), func(_, v []byte) error {
		out = append(out, bytes.Clone(v))
		return nil
	})
	return out, err
}

// Clear deletes the list.
func (l List) Clear() error {
	h := &l.h
	if err := h.check(); err != nil {
		return err
	}
	hdr, ok, err := h.read(h.prefix)
	if err != nil || !ok {
		return err
	}
	return h.b.deleteList(h.f, h.kg, h.prefix, hdr)
}

// mapLen returns the entry count in the map header at prefix.
func (b *Batch) mapLen(prefix []byte) (uint64, error) {
	raw, ok, err := b.get(prefix)
	if err != nil || !ok {
		return 0, err
	}
	n, w := binary.Uvarint(raw)
	if w <= 0 {
		return 0, fmt.Errorf("%w: map header %x", ErrCorrupt, prefix)
	}
	return n, nil
}

func (b *Batch) setMapLen(prefix []byte, n uint64) error {
	return b.set(prefix, binary.AppendUvarint(nil, n))
}

// mapEntryGone updates the map header at prefix after one entry was deleted.
func (b *Batch) mapEntryGone(f *family, kg int, prefix []byte) error {
	n, err := b.mapLen(prefix)
	if err != nil {
		return err
	}
	if n > 1 {
		return b.setMapLen(prefix, n-1)
	}
	if err := b.del(prefix); err != nil {
		return err
	}
	b.removed(f, kg)
	return nil
}

// deleteList deletes the list at prefix, whose header is hdr.
func (b *Batch) deleteList(f *family, kg int, prefix []byte, hdr cell) error {
	lo := append(bytes.Clone(prefix), tagEntry)
	if err := b.deleteRange(lo, prefixEnd(lo), nil); err != nil {
		return err
	}
	if err := b.deleteCell(kg, prefix, hdr); err != nil {
		return err
	}
	b.removed(f, kg)
	return nil
}

// deleteCell deletes the cell c at k and its expiry index record.
func (b *Batch) deleteCell(kg int, k []byte, c cell) error {
	if c.expiring {
		if err := b.del(expiryKey(kg, c.exp, k)); err != nil {
			return err
		}
	}
	return b.del(k)
}
