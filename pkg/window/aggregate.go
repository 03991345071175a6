package window

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/weirflow/weir/pkg/record"
)

// Aggregator folds the records of a window into an accumulator kept as bytes
// in state, and renders it as a pane's value.
//
// An empty accumulator is nil (or zero-length). Add and Merge must not
// modify their arguments. Merge must be associative and commutative with
// Add, so that merging the accumulators of two sessions equals adding all
// their records to one: the reference evaluator checks operators against
// that property, since it only ever calls Add.
type Aggregator interface {
	// Name names the aggregation in errors and contracts.
	Name() string
	// Add returns acc with r added. An error wrapping ErrValue means the
	// record's value cannot be aggregated (poison).
	Add(acc []byte, r record.Record) ([]byte, error)
	// Merge returns the accumulator of the union of a's and b's records.
	Merge(a, b []byte) ([]byte, error)
	// Result renders acc as a pane's value, a JSON document.
	Result(acc []byte) (json.RawMessage, error)
}

// Count counts records. Its result is {"count":N}.
func Count() Aggregator { return countAgg{} }

type countAgg struct{}

func (countAgg) Name() string { return "count" }

func (countAgg) Add(acc []byte, _ record.Record) ([]byte, error) {
	n, err := readCount(acc)
	if err != nil {
		return nil, err
	}
	return binary.AppendUvarint(nil, n+1), nil
}

func (countAgg) Merge(a, b []byte) ([]byte, error) {
	x, err := readCount(a)
	if err != nil {
		return nil, err
	}
	y, err := readCount(b)
	if err != nil {
		return nil, err
	}
	return binary.AppendUvarint(nil, x+y), nil
}

func (countAgg) Result(acc []byte) (json.RawMessage, error) {
	n, err := readCount(acc)
	if err != nil {
		return nil, err
	}
	return json.RawMessage(`{"count":` + strconv.FormatUint(n, 10) + `}`), nil
}

func readCount(acc []byte) (uint64, error) {
	if len(acc) == 0 {
		return 0, nil
	}
	n, w := binary.Uvarint(acc)
	if w != len(acc) {
		return 0, fmt.Errorf("%w: count accumulator %x", ErrCorrupt, acc)
	}
	return n, nil
}

// Sum adds up the integer JSON field of each record's value. Its result is
// {"sum":S,"count":C}. A record whose value lacks the field, or holds
// something other than an integer in it, is poison (ErrValue); so is a sum
// that overflows an int64.
func Sum(field string) Aggregator { return intAgg{field: field, max: false} }

// MaxBy keeps the largest integer JSON field of the records' values. Its
// result is {"max":M,"count":C}, with "max":null for an empty pane. A record
// whose value lacks the field, or holds something other than an integer in
// it, is poison (ErrValue).
func MaxBy(field string) Aggregator { return intAgg{field: field, max: true} }

// intAgg is Sum or MaxBy of an integer field. Its accumulator is the count
// (uvarint) followed by the sum or maximum (varint); empty when the count
// is zero.
type intAgg struct {
	field string
	max   bool
}

func (a intAgg) Name() string {
	if a.max {
		return "max(" + a.field + ")"
	}
	return "sum(" + a.field + ")"
}

func (a intAgg) Add(acc []byte, r record.Record) ([]byte, error) {
	v, err := intField(r.Value, a.field)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: record %s: %v", ErrValue, a.Name(), r.ID, err)
	}
	return a.Merge(acc, encodeIntAcc(1, v))
}

func (a intAgg) Merge(x, y []byte) ([]byte, error) {
	cx, vx, err := decodeIntAcc(x)
	if err != nil {
		return nil, err
	}
	cy, vy, err := decodeIntAcc(y)
	if err != nil {
		return nil, err
	}
	switch {
	case cx == 0:
		return bytes.Clone(y), nil
	case cy == 0:
		return bytes.Clone(x), nil
	case a.max:
		return encodeIntAcc(cx+cy, max(vx, vy)), nil
	case (vy > 0 && vx > math.MaxInt64-vy) || (vy < 0 && vx < math.MinInt64-vy):
		return nil, fmt.Errorf("%w: %s overflows int64", ErrValue, a.Name())
	}
	return encodeIntAcc(cx+cy, vx+vy), nil
}

func (a intAgg) Result(acc []byte) (json.RawMessage, error) {
	c, v, err := decodeIntAcc(acc)
	if err != nil {
		return nil, err
	}
	name, val := "sum", "0"
	if a.max {
		name, val = "max", "null"
	}
	if c > 0 {
		val = strconv.FormatInt(v, 10)
	}
	return json.RawMessage(`{"` + name + `":` + val + `,"count":` + strconv.FormatUint(c, 10) + `}`), nil
}

func encodeIntAcc(count uint64, v int64) []byte {
	return binary.AppendVarint(binary.AppendUvarint(nil, count), v)
}

func decodeIntAcc(acc []byte) (count uint64, v int64, err error) {
	if len(acc) == 0 {
		return 0, 0, nil
	}
	count, n := binary.Uvarint(acc)
	if n > 0 {
		var m int
		v, m = binary.Varint(acc[n:])
		if m > 0 && n+m == len(acc) {
			return count, v, nil
		}
	}
	return 0, 0, fmt.Errorf("%w: integer accumulator %x", ErrCorrupt, acc)
}

// intField reads the integer at the top-level field of a JSON object,
// skipping the other fields without decoding them (jsontext). Where the
// object repeats the field, the last one counts, as with encoding/json.
func intField(value []byte, field string) (int64, error) {
	dec := jsontext.NewDecoder(bytes.NewBuffer(value), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return 0, fmt.Errorf("value is not a JSON object: %v", cmp.Or(err, fmt.Errorf("starts with %v", tok)))
	}
	var raw jsontext.Value
	for dec.PeekKind() != '}' {
		name, err := dec.ReadToken()
		if err != nil {
			return 0, fmt.Errorf("value is not a JSON object: %v", err)
		}
		if name.String() != field {
			if err := dec.SkipValue(); err != nil {
				return 0, fmt.Errorf("value is not a JSON object: %v", err)
			}
			continue
		}
		v, err := dec.ReadValue()
		if err != nil {
			return 0, fmt.Errorf("value is not a JSON object: %v", err)
		}
		raw = bytes.Clone(v)
	}
	if _, err := dec.ReadToken(); err != nil {
		return 0, fmt.Errorf("value is not a JSON object: %v", err)
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return 0, fmt.Errorf("value is not a JSON object: trailing data after it")
	}
	if raw == nil {
		return 0, fmt.Errorf("field %q missing", field)
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("field %q: %s is not an int64", field, raw)
	}
	return n, nil
}
