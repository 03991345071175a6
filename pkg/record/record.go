// Package record defines weir's envelope: the identity, time, key, producer
// and source coordinate that every record carries, and the control records
// (watermark, idle, barrier, end of input) that travel in-band with data.
//
// Every data record is traceable to where it entered weir: its coordinate
// (At) names the ingress stream, subject and stream sequence it was read
// from, and dead letters, side outputs and traces report that coordinate.
package record

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Kind says what a record is. Only Data records reach operator code; the
// runtime handles control records.
type Kind uint8

const (
	// Data is an event.
	Data Kind = iota + 1
	// Watermark asserts that no later record on this partition has an event
	// time at or before Time.
	Watermark
	// Idle marks the partition idle: it is excluded from watermark minima
	// until its next record.
	Idle
	// Barrier marks the end of epoch Epoch on this partition.
	Barrier
	// End marks the end of input on this partition.
	End
)

func (k Kind) String() string {
	switch k {
	case Data:
		return "data"
	case Watermark:
		return "watermark"
	case Idle:
		return "idle"
	case Barrier:
		return "barrier"
	case End:
		return "end"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Coordinate is where a record entered weir: the ingress stream, the subject
// it was published to, and its stream sequence.
type Coordinate struct {
	Stream  string
	Subject string
	Seq     uint64
}

func (c Coordinate) String() string {
	return fmt.Sprintf("%s/%s#%d", c.Stream, c.Subject, c.Seq)
}

// ParseCoordinate parses a coordinate as String writes it: a stream name
// holds no '/', and the sequence follows the last '#'.
func ParseCoordinate(s string) (Coordinate, error) {
	slash, hash := strings.IndexByte(s, '/'), strings.LastIndexByte(s, '#')
	if slash <= 0 || hash < slash {
		return Coordinate{}, fmt.Errorf("record: coordinate %q is not <stream>/<subject>#<sequence>", s)
	}
	seq, err := strconv.ParseUint(s[hash+1:], 10, 64)
	if err != nil {
		return Coordinate{}, fmt.Errorf("record: coordinate %q: sequence: %w", s, err)
	}
	return Coordinate{Stream: s[:slash], Subject: s[slash+1 : hash], Seq: seq}, nil
}

// Record is one event or control record.
type Record struct {
	Kind Kind
	// ID is the event's identity, stable across producer retries.
	ID string
	// Key is the business key; it picks the record's key group.
	Key []byte
	// Producer names who produced the event.
	Producer string
	// Time is the event time of a data record, or the watermark time of a
	// Watermark record.
	Time time.Time
	// Epoch is the checkpoint epoch of a Barrier record.
	Epoch uint64
	// At is where the event entered weir: its source coordinate.
	At Coordinate
	// Value is the payload, JSON for ingress events.
	Value []byte
	// Tenant is the record's tenant (identity.tenant), carried through
	// every edge; empty when the contract declares none, and for a record
	// an operator derives from several tenants' under a key that is not
	// tenant-scoped.
	Tenant string
	// Trace is the W3C traceparent of a sampled record's trace, empty for
	// records not traced. It follows the record from operator to operator
	// inside frames.
	Trace string
}

func (r Record) String() string {
	switch r.Kind {
	case Data:
		return fmt.Sprintf("data id=%s key=%q time=%s at %s", r.ID, r.Key, r.Time.UTC().Format(time.RFC3339Nano), r.At)
	case Watermark:
		return "watermark " + r.Time.UTC().Format(time.RFC3339Nano)
	case Barrier:
		return fmt.Sprintf("barrier %d", r.Epoch)
	}
	return r.Kind.String()
}
