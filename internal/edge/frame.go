package edge

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/weirflow/weir/pkg/record"
)

// Frame format, version 4:
//
//	magic   "WF"
//	version 1 byte
//	count   uvarint
//	records count times:
//	  kind  1 byte
//	  data:      id, key, producer (uvarint length + bytes), time,
//	             source stream, source subject (length + bytes), source seq (uvarint),
//	             value, trace, tenant (uvarint length + bytes each)
//	  watermark: time
//	  barrier:   epoch (uvarint)
//	  idle, end: nothing
//
// A time is Unix seconds (varint) then nanoseconds (uvarint, below 1e9):
// exact for every time.Time, the zero time included. Version 2 wrote Unix
// nanoseconds (varint), which wraps outside 1677–2262; frames of version 2
// still decode, so an edge written before an upgrade is read after it.
// Version 3 has no tenant: its records decode with none, and a frame none
// of whose records has a tenant is still written as version 3, so that a
// pipeline without tenants can roll back past the build that added them.
const (
	frameMagic0  = 'W'
	frameMagic1  = 'F'
	frameVersion = 4
	// frameVersionNoTenant is the previous version, without tenants.
	frameVersionNoTenant = 3
	// frameVersionNanos is the one before, times in Unix nanoseconds.
	frameVersionNanos = 2
)

// ErrCorruptFrame reports a frame that cannot be decoded. Frames are written
// only by weir, so a corrupt frame is a bug or disk damage, never bad user input.
var ErrCorruptFrame = errors.New("edge: corrupt frame")

// noTime encodes the zero time.Time in version 2, whose Unix nanoseconds
// cannot represent it.
const noTime = math.MinInt64

func nanosTime(n int64) time.Time {
	if n == noTime {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// maxUnixSeconds is the latest Unix second a time.Time holds: it counts
// seconds from year 1 in an int64.
const maxUnixSeconds = math.MaxInt64 - 62135596800

// appendTime appends t exactly: Unix seconds, then nanoseconds.
func appendTime(buf []byte, t time.Time) []byte {
	buf = binary.AppendVarint(buf, t.Unix())
	return binary.AppendUvarint(buf, uint64(t.Nanosecond()))
}

// AppendRecord appends the encoding of r to buf, as version 4 writes it.
func AppendRecord(buf []byte, r record.Record) []byte { return appendRecord(buf, r, true) }

// appendRecord appends the encoding of r, with its tenant if tenants (a
// version 4 frame).
func appendRecord(buf []byte, r record.Record, tenants bool) []byte {
	buf = append(buf, byte(r.Kind))
	switch r.Kind {
	case record.Data:
		buf = appendString(buf, r.ID)
		buf = appendBytes(buf, r.Key)
		buf = appendString(buf, r.Producer)
		buf = appendTime(buf, r.Time)
		buf = appendString(buf, r.At.Stream)
		buf = appendString(buf, r.At.Subject)
		buf = binary.AppendUvarint(buf, r.At.Seq)
		buf = appendBytes(buf, r.Value)
		buf = appendString(buf, r.Trace)
		if tenants {
			buf = appendString(buf, r.Tenant)
		}
	case record.Watermark:
		buf = appendTime(buf, r.Time)
	case record.Barrier:
		buf = binary.AppendUvarint(buf, r.Epoch)
	}
	return buf
}

// EncodedSize is the number of bytes r adds to a frame.
func EncodedSize(r record.Record) int {
	const maxVarint = binary.MaxVarintLen64
	return 1 + 8*maxVarint + len(r.ID) + len(r.Key) + len(r.Producer) +
		len(r.At.Stream) + len(r.At.Subject) + len(r.Value) + len(r.Trace) + len(r.Tenant) + 3*maxVarint
}

// EncodeFrame encodes records as one frame: version 4 if a record has a
// tenant, version 3 otherwise.
func EncodeFrame(records []record.Record) []byte {
	size := 3 + binary.MaxVarintLen64
	tenants := false
	for _, r := range records {
		size += EncodedSize(r)
		tenants = tenants || r.Tenant != ""
	}
	version := byte(frameVersionNoTenant)
	if tenants {
		version = frameVersion
	}
	buf := make([]byte, 0, size)
	buf = append(buf, frameMagic0, frameMagic1, version)
	buf = binary.AppendUvarint(buf, uint64(len(records)))
	for _, r := range records {
		buf = appendRecord(buf, r, tenants)
	}
	return buf
}

// DecodeFrame decodes a frame. Byte slices of the records (Key, Value) alias
// data.
func DecodeFrame(data []byte) ([]record.Record, error) {
	if len(data) < 3 || data[0] != frameMagic0 || data[1] != frameMagic1 {
		return nil, fmt.Errorf("%w: bad magic", ErrCorruptFrame)
	}
	if data[2] != frameVersion && data[2] != frameVersionNoTenant && data[2] != frameVersionNanos {
		return nil, fmt.Errorf("%w: unknown version %d", ErrCorruptFrame, data[2])
	}
	d := decoder{buf: data[3:], nanos: data[2] == frameVersionNanos, tenants: data[2] == frameVersion}
	n := d.uvarint()
	if d.err != nil || n > uint64(len(data)) {
		return nil, fmt.Errorf("%w: bad record count", ErrCorruptFrame)
	}
	out := make([]record.Record, 0, n)
	for i := uint64(0); i < n; i++ {
		r := d.record()
		if d.err != nil {
			return nil, fmt.Errorf("%w: record %d: %v", ErrCorruptFrame, i, d.err)
		}
		out = append(out, r)
	}
	if len(d.buf) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorruptFrame, len(d.buf))
	}
	return out, nil
}

func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

func appendBytes(buf []byte, b []byte) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(b)))
	return append(buf, b...)
}

type decoder struct {
	buf []byte
	err error
	// nanos reads times as version 2 wrote them; tenants reads the
	// tenant version 4 added.
	nanos, tenants bool
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = errors.New(what)
	}
}

func (d *decoder) uvarint() uint64 { return readVarint(d, binary.Uvarint, "bad uvarint") }

func (d *decoder) varint() int64 { return readVarint(d, binary.Varint, "bad varint") }

// readVarint reads one varint with read (binary.Uvarint or binary.Varint),
// failing d with what when there is none.
func readVarint[T uint64 | int64](d *decoder, read func([]byte) (T, int), what string) T {
	if d.err != nil {
		return 0
	}
	v, n := read(d.buf)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// time reads a time as appendTime wrote it (or, for version 2 frames, as
// Unix nanoseconds).
func (d *decoder) time() time.Time {
	if d.nanos {
		return nanosTime(d.varint())
	}
	sec := d.varint()
	nsec := d.uvarint()
	if d.err != nil {
		return time.Time{}
	}
	if nsec >= 1e9 {
		d.fail("nanoseconds out of range")
		return time.Time{}
	}
	if sec > maxUnixSeconds {
		d.fail("seconds out of range")
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.buf)) {
		d.fail("length past end of frame")
		return nil
	}
	b := d.buf[:n:n]
	d.buf = d.buf[n:]
	if n == 0 {
		return nil
	}
	return b
}

func (d *decoder) record() record.Record {
	if len(d.buf) == 0 {
		d.fail("missing record")
		return record.Record{}
	}
	r := record.Record{Kind: record.Kind(d.buf[0])}
	d.buf = d.buf[1:]
	switch r.Kind {
	case record.Data:
		r.ID = string(d.bytes())
		r.Key = d.bytes()
		r.Producer = string(d.bytes())
		r.Time = d.time()
		r.At.Stream = string(d.bytes())
		r.At.Subject = string(d.bytes())
		r.At.Seq = d.uvarint()
		r.Value = d.bytes()
		r.Trace = string(d.bytes())
		if d.tenants {
			r.Tenant = string(d.bytes())
		}
	case record.Watermark:
		r.Time = d.time()
	case record.Barrier:
		r.Epoch = d.uvarint()
	case record.Idle, record.End:
	default:
		d.fail(fmt.Sprintf("unknown record kind %d", r.Kind))
	}
	return r
}
