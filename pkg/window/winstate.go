package window

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"time"
)

// winState is everything the operator keeps for one window of one key, in
// one entry of the state map under the window's sub-key.
type winState struct {
	// late is set once the window is past its ON_TIME moment: its ON_TIME
	// pane fired, or it was created with the watermark already there.
	late bool
	// index is the next pane index; version the last version emitted.
	index, version uint64
	// count is the number of elements since the last pane, which the count
	// trigger reads, and first the processing time (Unix ns) of the first of
	// them, from which interval triggers are timed. first is 0 when count is.
	count uint64
	first int64
	// acc is the accumulator: of the elements since the last pane when
	// discarding, of all the window's elements otherwise.
	acc []byte
	// last is the value of the last insert, kept in retracting mode only so
	// the next firing can retract it; nil before the first pane.
	last []byte
}

const (
	winFormat   = 1
	flagLate    = 1 << 0
	flagHasLast = 1 << 1
)

func (w *winState) encode() []byte {
	b := make([]byte, 0, 2+4*binary.MaxVarintLen64+len(w.acc)+len(w.last)+2*binary.MaxVarintLen32)
	var flags byte
	if w.late {
		flags |= flagLate
	}
	if w.last != nil {
		flags |= flagHasLast
	}
	b = append(b, winFormat, flags)
	b = binary.AppendUvarint(b, w.index)
	b = binary.AppendUvarint(b, w.version)
	b = binary.AppendUvarint(b, w.count)
	b = binary.AppendVarint(b, w.first)
	b = binary.AppendUvarint(b, uint64(len(w.acc)))
	b = append(b, w.acc...)
	if w.last != nil {
		b = binary.AppendUvarint(b, uint64(len(w.last)))
		b = append(b, w.last...)
	}
	return b
}

// decodeWinState decodes an entry written by encode. The result does not
// alias b.
func decodeWinState(b []byte) (winState, error) {
	var w winState
	fail := func() (winState, error) { return winState{}, fmt.Errorf("%w: window state %x", ErrCorrupt, b) }
	if len(b) < 2 || b[0] != winFormat {
		return fail()
	}
	flags := b[1]
	r := b[2:]
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(r)
		if n <= 0 {
			return 0, false
		}
		r = r[n:]
		return v, true
	}
	bytesField := func() ([]byte, bool) {
		n, ok := uv()
		if !ok || n > uint64(len(r)) {
			return nil, false
		}
		v := r[:n:n]
		r = r[n:]
		return v, true
	}
	var ok1, ok2, ok3, ok4 bool
	w.late = flags&flagLate != 0
	w.index, ok1 = uv()
	w.version, ok2 = uv()
	w.count, ok3 = uv()
	first, n := binary.Varint(r)
	if n <= 0 || !ok1 || !ok2 || !ok3 {
		return fail()
	}
	w.first = first
	r = r[n:]
	if w.acc, ok4 = bytesField(); !ok4 {
		return fail()
	}
	if len(w.acc) == 0 {
		w.acc = nil
	} else {
		w.acc = append([]byte(nil), w.acc...) // b may be a Range buffer, reused after the call
	}
	if flags&flagHasLast != 0 {
		last, ok := bytesField()
		if !ok {
			return fail()
		}
		w.last = append([]byte{}, last...)
	}
	if len(r) != 0 {
		return fail()
	}
	return w, nil
}

// subKey is the state map sub-key of a window: start and end as big-endian
// Unix milliseconds with the sign bit flipped, so that the map iterates
// windows in (start, end) order.
func subKey(sp span) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, uint64(sp.start)^(1<<63))
	binary.BigEndian.PutUint64(b[8:], uint64(sp.end)^(1<<63))
	return b
}

func parseSubKey(b []byte) (span, error) {
	if len(b) != 16 {
		return span{}, fmt.Errorf("%w: window sub-key %x", ErrCorrupt, b)
	}
	return span{
		start: int64(binary.BigEndian.Uint64(b) ^ (1 << 63)),
		end:   int64(binary.BigEndian.Uint64(b[8:]) ^ (1 << 63)),
	}, nil
}

// Timer purposes, the last byte of a timer name.
const (
	purposeOnTime  = 'e' // event time, at the window's maximum timestamp
	purposeGC      = 'g' // event time, at the window's GC time
	purposeTrigger = 'p' // processing time, an interval trigger's deadline
)

// timerName names a window's timer: the hex sub-key and the purpose. The
// runtime fires due timers of one key in name order at equal times, which
// is therefore window (start, end) order.
func timerName(sp span, purpose byte) string {
	return hex.EncodeToString(subKey(sp)) + string(purpose)
}

func parseTimerName(name string) (span, byte, error) {
	if len(name) != 33 {
		return span{}, 0, fmt.Errorf("%w: timer name %q", ErrCorrupt, name)
	}
	k, err := hex.DecodeString(name[:32])
	if err != nil {
		return span{}, 0, fmt.Errorf("%w: timer name %q", ErrCorrupt, name)
	}
	sp, err := parseSubKey(k)
	switch p := name[32]; {
	case err != nil:
		return span{}, 0, err
	case p != purposeOnTime && p != purposeGC && p != purposeTrigger:
		return span{}, 0, fmt.Errorf("%w: timer name %q", ErrCorrupt, name)
	default:
		return sp, p, nil
	}
}

// deadline is when the window's interval trigger fires, if it is armed: the
// window has elements since its last pane and its phase has an interval.
func (s Spec) deadline(w *winState) (time.Time, bool) {
	iv := s.interval(w.late)
	if w.count == 0 || iv <= 0 {
		return time.Time{}, false
	}
	return time.Unix(0, w.first).UTC().Add(iv), true
}

// timing is the timing of a firing other than the ON_TIME one.
func (w *winState) timing() Timing {
	if w.late {
		return Late
	}
	return Early
}
