package join

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
)

// Sentinel errors. Every error the package returns wraps one of these or an
// error of pkg/state, so callers classify failures with errors.Is.
var (
	// ErrInvalid is returned by the constructors for unusable arguments.
	ErrInvalid = errors.New("join: invalid argument")
	// ErrSide is wrapped by the *RecordError returned for a record that the
	// side function assigns to neither input.
	ErrSide = errors.New("join: record belongs to neither side")
	// ErrEventTime is wrapped by the *RecordError returned for a record
	// without a usable event time.
	ErrEventTime = errors.New("join: event time out of range")
	// ErrCorrupt is returned when stored join state or a timer cannot be
	// decoded.
	ErrCorrupt = errors.New("join: corrupt state")
)

// RecordError reports a record the join cannot take, ever: a property of
// the record, not of the system. Nothing was written or emitted for it.
// The join returns it as poison (operator.Poison(e.Field, e)), so the
// runtime dead-letters the record; retrying cannot help.
type RecordError struct {
	// Field names the part of the record at fault: "side" or "time".
	Field string
	// ID and At identify the record.
	ID string
	At record.Coordinate
	// Err wraps ErrSide or ErrEventTime.
	Err error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("join: record %s at %s: %s: %v", e.ID, e.At, e.Field, e.Err)
}

// Unwrap returns the cause, which wraps ErrSide or ErrEventTime.
func (e *RecordError) Unwrap() error { return e.Err }

// Side is the input of the join a record belongs to.
type Side uint8

const (
	// Left is the first input; its ID comes first in output IDs.
	Left Side = iota + 1
	// Right is the second input.
	Right
)

func (s Side) String() string {
	switch s {
	case Left:
		return "left"
	case Right:
		return "right"
	}
	return fmt.Sprintf("Side(%d)", uint8(s))
}

func (s Side) other() Side {
	if s == Left {
		return Right
	}
	return Left
}

// SideFunc tells which input a record belongs to. Both inputs of a join
// arrive on one operator input; false means the record belongs to neither,
// and the join rejects it with a *RecordError wrapping ErrSide.
type SideFunc func(record.Record) (Side, bool)

// CombineFunc builds the output of one matched pair. It must be a pure
// function of its arguments. It sets the payload and may set Key, Producer
// and Source; the join then sets Kind, ID ("<left ID>+<right ID>") and Time,
// fills an empty Key with the join key and an empty Source with the left
// record's. A pair it rejects is sent to the side output (as the left
// record, with a reason naming both) and the other pairs are unaffected.
type CombineFunc func(l, r record.Record) (record.Record, error)

// ops is what both joins share: the state family, the side and combine
// functions.
type ops struct {
	family  string
	side    SideFunc
	combine CombineFunc
}

func newOps(family string, side SideFunc, combine CombineFunc) (ops, error) {
	switch {
	case family == "":
		return ops{}, fmt.Errorf("%w: empty state family name", ErrInvalid)
	case side == nil:
		return ops{}, fmt.Errorf("%w: nil side function", ErrInvalid)
	case combine == nil:
		return ops{}, fmt.Errorf("%w: nil combine function", ErrInvalid)
	}
	return ops{family: family, side: side, combine: combine}, nil
}

// classify returns r's side and event time in Unix milliseconds, or a
// *RecordError.
func (o ops) classify(r record.Record) (Side, int64, error) {
	s, ok := o.side(r)
	if !ok || (s != Left && s != Right) {
		return 0, 0, operator.Poison("side", &RecordError{Field: "side", ID: r.ID, At: r.At,
			Err: fmt.Errorf("%w (side function returned %s, %t)", ErrSide, s, ok)})
	}
	if r.Time.IsZero() || r.Time.Before(minTime) || r.Time.After(maxTime) {
		return 0, 0, timeError(r, "event time %s is not in [%s, %s]",
			r.Time.UTC().Format(time.RFC3339Nano), minTime.Format(time.RFC3339), maxTime.Format(time.RFC3339))
	}
	return s, r.Time.UnixMilli(), nil
}

func timeError(r record.Record, format string, args ...any) error {
	return operator.Poison("time", &RecordError{Field: "time", ID: r.ID, At: r.At,
		Err: fmt.Errorf("%w: "+format, append([]any{ErrEventTime}, args...)...)})
}

// emit combines l and r and emits the result at time at, or sends the pair
// to the side output if combine rejects it.
func (o ops) emit(env operator.Env, l, r record.Record, at time.Time) error {
	out, err := o.combine(l, r)
	if err != nil {
		return env.SideOutput(l, fmt.Sprintf("join: combine %s+%s (right at %s): %v", l.ID, r.ID, r.At, err))
	}
	out.Kind = record.Data
	out.ID = l.ID + "+" + r.ID
	out.Time = at
	if out.Key == nil {
		out.Key = bytes.Clone(env.Key())
	}
	if out.At == (record.Coordinate{}) {
		out.At = l.At
	}
	return env.Emit(out)
}

// Times. Event time is taken at millisecond precision, truncated toward
// the past. Timers are stored in Unix nanoseconds, so every time the join
// derives must lie in [minMillis, maxMillis].
var (
	minTime = time.Unix(0, math.MinInt64).UTC()
	maxTime = time.Unix(0, math.MaxInt64).UTC()
)

const (
	msNanos   = int64(time.Millisecond)
	minMillis = math.MinInt64/msNanos + 1
	maxMillis = math.MaxInt64 / msNanos
	// maxSpan bounds window sizes and interval bounds: a century, far
	// beyond any useful join, and small enough that no sum overflows.
	maxSpan = 100 * 365 * 24 * time.Hour
)

func inRange(ms int64) bool { return ms >= minMillis && ms <= maxMillis }

func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// checkSpan reports whether d is a whole number of milliseconds within
// ±maxSpan.
func checkSpan(name string, d time.Duration) error {
	if d%time.Millisecond != 0 || d > maxSpan || d < -maxSpan {
		return fmt.Errorf("%w: %s %v must be a whole number of milliseconds within ±%v", ErrInvalid, name, d, maxSpan)
	}
	return nil
}

// floorDiv is a/b rounded toward negative infinity, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// appendMillis appends ms as 8 bytes whose byte order is numeric order.
func appendMillis(dst []byte, ms int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(ms)^(1<<63))
}

func readMillis(b []byte) int64 { return int64(binary.BigEndian.Uint64(b) ^ (1 << 63)) }

// subKey is a stored record's map sub-key: 8 bytes of time (a window start
// or an event time), the side, then the record ID. A record stored twice
// under the same sub-key is stored once.
func subKey(ms int64, s Side, id string) []byte {
	k := make([]byte, 0, 9+len(id))
	k = appendMillis(k, ms)
	k = append(k, byte(s))
	return append(k, id...)
}

// parseSubKey returns the time and side of a sub-key.
func parseSubKey(k []byte) (int64, Side, error) {
	if len(k) < 9 || (Side(k[8]) != Left && Side(k[8]) != Right) {
		return 0, 0, fmt.Errorf("%w: map sub-key %x", ErrCorrupt, k)
	}
	return readMillis(k), Side(k[8]), nil
}

// compareRecords orders records by event time, then ID.
func compareRecords(a, b record.Record) int {
	if c := a.Time.Compare(b.Time); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

func sortRecords(rs []record.Record) { slices.SortFunc(rs, compareRecords) }

// codecVersion is the first byte of every stored record.
const codecVersion = 1

// encodeRecord encodes a data record for state: the version, the event time
// in Unix nanoseconds (varint), ID, key, producer, source stream and subject
// (each length-prefixed), the source sequence (uvarint), then the value.
func encodeRecord(r record.Record) []byte {
	n := 1 + 2*binary.MaxVarintLen64 + 5*binary.MaxVarintLen32 +
		len(r.ID) + len(r.Key) + len(r.Producer) + len(r.At.Stream) + len(r.At.Subject) + len(r.Value)
	b := make([]byte, 0, n)
	b = append(b, codecVersion)
	b = binary.AppendVarint(b, r.Time.UnixNano())
	for _, f := range [...][]byte{[]byte(r.ID), r.Key, []byte(r.Producer), []byte(r.At.Stream), []byte(r.At.Subject)} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	b = binary.AppendUvarint(b, r.At.Seq)
	return append(b, r.Value...)
}

// decodeRecord decodes what encodeRecord encoded. An empty key or value
// decodes as nil.
func decodeRecord(b []byte) (record.Record, error) {
	bad := func(what string) (record.Record, error) {
		return record.Record{}, fmt.Errorf("%w: stored record: %s", ErrCorrupt, what)
	}
	if len(b) == 0 || b[0] != codecVersion {
		return bad("unknown version")
	}
	b = b[1:]
	ns, w := binary.Varint(b)
	if w <= 0 {
		return bad("time")
	}
	b = b[w:]
	var f [5][]byte
	for i := range f {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return bad("field length")
		}
		if n > 0 {
			f[i] = bytes.Clone(b[w : w+int(n)])
		}
		b = b[w+int(n):]
	}
	seq, w := binary.Uvarint(b)
	if w <= 0 {
		return bad("source sequence")
	}
	b = b[w:]
	r := record.Record{
		Kind:     record.Data,
		ID:       string(f[0]),
		Key:      f[1],
		Producer: string(f[2]),
		Time:     time.Unix(0, ns).UTC(),
		At:       record.Coordinate{Stream: string(f[3]), Subject: string(f[4]), Seq: seq},
	}
	if len(b) > 0 {
		r.Value = bytes.Clone(b)
	}
	return r, nil
}
