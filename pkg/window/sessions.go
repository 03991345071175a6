package window

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
)

// A key's session windows are kept in one state entry (sub-key
// sessionSubKey), not one entry per session: a record must find every
// session it overlaps, and a range over the key's entries opens a Pebble
// iterator, where one entry is one point read (q11: the range was 14% of
// the service's CPU). A call loads the entry once, works on it in memory
// (load, store and clear of a session), and writes it back, or deletes it
// when no session is left, when the call ends (flushSessions). It is the
// operator's state schema version 2 for sessions (SchemaVersion).

// sessionSubKey is the sub-key of a key's sessions: one byte, so that it
// cannot be a window's 16-byte sub-key.
var sessionSubKey = []byte{'w'}

const sessionsFormat = 1

// sessionSet is a key's sessions as one call sees them.
type sessionSet struct {
	loaded, dirty bool
	list          []session // by (start, end); sessions are disjoint
}

func (c *call) sessions() (*sessionSet, error) {
	if c.sess.loaded {
		return &c.sess, nil
	}
	raw, ok, err := c.m.Get(sessionSubKey)
	if err != nil {
		return nil, err
	}
	c.sess.loaded = true
	if ok {
		if c.sess.list, err = decodeSessions(raw); err != nil {
			return nil, err
		}
	}
	return &c.sess, nil
}

// find returns the index of session sp, or where it would go.
func (s *sessionSet) find(sp span) (int, bool) {
	return slices.BinarySearchFunc(s.list, sp, func(e session, t span) int {
		if e.sp.start != t.start {
			return cmp.Compare(e.sp.start, t.start)
		}
		return cmp.Compare(e.sp.end, t.end)
	})
}

func (c *call) loadSession(sp span) (winState, bool, error) {
	set, err := c.sessions()
	if err != nil {
		return winState{}, false, err
	}
	i, ok := set.find(sp)
	if !ok {
		return winState{}, false, nil
	}
	return set.list[i].ws, true, nil
}

func (c *call) storeSession(sp span, ws *winState) error {
	set, err := c.sessions()
	if err != nil {
		return err
	}
	if i, ok := set.find(sp); ok {
		set.list[i].ws = *ws
	} else {
		set.list = slices.Insert(set.list, i, session{sp: sp, ws: *ws})
	}
	set.dirty = true
	return nil
}

func (c *call) deleteSession(sp span) error {
	set, err := c.sessions()
	if err != nil {
		return err
	}
	if i, ok := set.find(sp); ok {
		set.list = slices.Delete(set.list, i, i+1)
		set.dirty = true
	}
	return nil
}

// flushSessions writes back what the call changed of the key's sessions.
func (c *call) flushSessions() error {
	switch {
	case !c.sess.dirty:
		return nil
	case len(c.sess.list) == 0:
		return c.m.Delete(sessionSubKey)
	}
	return c.m.Put(sessionSubKey, encodeSessions(c.sess.list))
}

func encodeSessions(list []session) []byte {
	b := []byte{sessionsFormat}
	b = binary.AppendUvarint(b, uint64(len(list)))
	for _, s := range list {
		b = append(b, subKey(s.sp)...)
		w := s.ws.encode()
		b = binary.AppendUvarint(b, uint64(len(w)))
		b = append(b, w...)
	}
	return b
}

// decodeSessions decodes an entry written by encodeSessions. The result
// does not alias b.
func decodeSessions(b []byte) ([]session, error) {
	fail := func() ([]session, error) { return nil, fmt.Errorf("%w: window sessions %x", ErrCorrupt, b) }
	if len(b) < 1 || b[0] != sessionsFormat {
		return fail()
	}
	r := b[1:]
	n, k := binary.Uvarint(r)
	if k <= 0 || n > uint64(len(r)) {
		return fail()
	}
	r = r[k:]
	list := make([]session, 0, n)
	for range n {
		if len(r) < 16 {
			return fail()
		}
		sp, err := parseSubKey(r[:16])
		if err != nil {
			return nil, err
		}
		r = r[16:]
		l, k := binary.Uvarint(r)
		if k <= 0 || l > uint64(len(r)-k) {
			return fail()
		}
		ws, err := decodeWinState(r[k : k+int(l)])
		if err != nil {
			return nil, err
		}
		r = r[k+int(l):]
		if m := len(list); m > 0 && list[m-1].sp.end > sp.start {
			return fail() // out of order, or overlapping
		}
		list = append(list, session{sp: sp, ws: ws})
	}
	if len(r) != 0 {
		return fail()
	}
	return list, nil
}
