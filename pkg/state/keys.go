package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// Key kinds: the first byte of every key. Kinds other than kindMeta are
// followed by the key group as two big-endian bytes, so each key group's
// records of one kind form one contiguous range.
const (
	kindMeta   byte = 0x00 // operator-level records
	kindState  byte = 0x01 // user state
	kindTimer  byte = 0x02 // timers, ordered by domain then time
	kindExpiry byte = 0x03 // TTL expiry index, ordered by expiry
	kindCount  byte = 0x04 // live-key and timer counters
	kindLimit  byte = 0x05 // first byte past every key-group kind
)

// Operator-level records: [kindMeta][sub-kind][name].
const (
	metaFormat   byte = 0x00 // store layout version
	metaPosition byte = 0x01 // input positions, by input name
	metaUser     byte = 0x02 // PutMeta records, by name
	metaOutput   byte = 0x03 // staged output frames, by id
	metaHeld     byte = 0x04 // output held until a checkpoint completes, by sequence
)

// Counters: [kindCount][kg][sub-kind][family name].
const (
	countFamily byte = 0x01
	countTimers byte = 0x02
)

// tagEntry follows a state key's prefix for a map entry or list element; the
// prefix alone holds the value, the map header or the list header.
const tagEntry byte = 0x01

// formatVersion is written at the first Open and checked at every later one.
const formatVersion = 1

// Span is a half-open key range [Start, End) of the store.
type Span struct {
	Start, End []byte
}

// Contains reports whether key lies in the span.
func (s Span) Contains(key []byte) bool {
	return bytes.Compare(key, s.Start) >= 0 && bytes.Compare(key, s.End) < 0
}

// KeyGroupSpan returns the key ranges that hold all state of key group kg:
// state entries, timers, expiry index and counters. Moving these ranges
// moves the key group. kg must be in [0, 65535].
func KeyGroupSpan(kg int) []Span {
	if kg < 0 || kg > math.MaxUint16 {
		panic(fmt.Sprintf("state: key group %d out of range", kg))
	}
	spans := make([]Span, 0, kindLimit-kindState)
	for k := kindState; k < kindLimit; k++ {
		start := appendGroup(nil, k, kg)
		spans = append(spans, Span{Start: start, End: prefixEnd(start)})
	}
	return spans
}

func appendGroup(dst []byte, kind byte, kg int) []byte {
	return binary.BigEndian.AppendUint16(append(dst, kind), uint16(kg))
}

func appendBytes(dst, b []byte) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(b))), b...)
}

func appendString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

// readBytes reads a length-prefixed byte string, returning it and the rest.
func readBytes(b []byte) (v, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return nil, nil, false
	}
	return b[w : w+int(n)], b[w+int(n):], true
}

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil // every byte is 0xff: no upper bound
}

// statePrefix returns [kindState][kg][family][key]: the key of a value, map
// header or list header, and the prefix of all of the key's map entries or
// list elements.
func statePrefix(kg int, family string, key []byte) []byte {
	b := make([]byte, 0, 3+2+len(family)+2+len(key)+1+8)
	b = appendGroup(b, kindState, kg)
	b = appendString(b, family)
	return appendBytes(b, key)
}

func mapEntryKey(prefix, sub []byte) []byte {
	k := make([]byte, 0, len(prefix)+1+len(sub))
	return append(append(append(k, prefix...), tagEntry), sub...)
}

func listElemKey(prefix []byte, seq uint64) []byte {
	k := make([]byte, 0, len(prefix)+1+8)
	return binary.BigEndian.AppendUint64(append(append(k, prefix...), tagEntry), seq)
}

// stateKey is a decoded user-state key.
type stateKey struct {
	kg     int
	family string
	prefix []byte // through the user key
	sub    []byte // after the user key: empty, or tagEntry + map key / list seq
}

func parseStateKey(k []byte) (stateKey, error) {
	if len(k) < 3 || k[0] != kindState {
		return stateKey{}, fmt.Errorf("%w: state key %x", ErrCorrupt, k)
	}
	fam, rest, ok := readBytes(k[3:])
	if !ok {
		return stateKey{}, fmt.Errorf("%w: state key %x", ErrCorrupt, k)
	}
	_, rest, ok = readBytes(rest)
	if !ok || (len(rest) > 0 && rest[0] != tagEntry) {
		return stateKey{}, fmt.Errorf("%w: state key %x", ErrCorrupt, k)
	}
	n := len(k) - len(rest)
	return stateKey{
		kg:     int(binary.BigEndian.Uint16(k[1:3])),
		family: string(fam),
		prefix: k[:n:n],
		sub:    rest,
	}, nil
}

// Times are stored as Unix nanoseconds with the sign bit flipped, big-endian,
// so byte order is time order across negative and positive times.

var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

func nanos(t time.Time) (int64, error) {
	if t.Before(minTime) || t.After(maxTime) {
		return 0, fmt.Errorf("%w: %v", ErrTimeRange, t)
	}
	return t.UnixNano(), nil
}

func appendTime(dst []byte, n int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(n)^(1<<63))
}

func readTime(b []byte) int64 {
	return int64(binary.BigEndian.Uint64(b) ^ (1 << 63))
}

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

// expiryKey returns [kindExpiry][kg][expiry][state key].
func expiryKey(kg int, exp int64, stateKey []byte) []byte {
	b := make([]byte, 0, 3+8+len(stateKey))
	return append(appendTime(appendGroup(b, kindExpiry, kg), exp), stateKey...)
}

func parseExpiryKey(k []byte) (kg int, exp int64, stateKey []byte, err error) {
	if len(k) < 3+8+1 || k[0] != kindExpiry {
		return 0, 0, nil, fmt.Errorf("%w: expiry key %x", ErrCorrupt, k)
	}
	return int(binary.BigEndian.Uint16(k[1:3])), readTime(k[3:11]), k[11:], nil
}

// timerKey returns [kindTimer][kg][domain][time][key][name].
func timerKey(kg int, d Domain, t int64, key []byte, name string) []byte {
	b := make([]byte, 0, 3+1+8+2+len(key)+len(name))
	b = appendTime(append(appendGroup(b, kindTimer, kg), byte(d)), t)
	return append(appendBytes(b, key), name...)
}

func parseTimerKey(k []byte) (Timer, error) {
	if len(k) < 3+1+8+1 || k[0] != kindTimer {
		return Timer{}, fmt.Errorf("%w: timer key %x", ErrCorrupt, k)
	}
	key, name, ok := readBytes(k[12:])
	if !ok {
		return Timer{}, fmt.Errorf("%w: timer key %x", ErrCorrupt, k)
	}
	return Timer{
		Domain:   Domain(k[3]),
		Time:     fromNanos(readTime(k[4:12])),
		KeyGroup: int(binary.BigEndian.Uint16(k[1:3])),
		Key:      bytes.Clone(key),
		Name:     string(name),
	}, nil
}

// countKey returns [kindCount][kg][countFamily][family], or the key group's
// timer counter for family "" with sub-kind countTimers.
func countKey(kg int, sub byte, family string) []byte {
	b := make([]byte, 0, 4+len(family))
	return append(append(appendGroup(b, kindCount, kg), sub), family...)
}

// heldKey is the key of held output seq: big-endian, so key order is
// sequence order.
func heldKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{kindMeta, metaHeld}, seq)
}

func metaKey(sub byte, name string) []byte {
	b := make([]byte, 0, 2+len(name))
	return append(append(b, kindMeta, sub), name...)
}
