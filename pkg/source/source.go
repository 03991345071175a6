package source

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirflow/weir/pkg/record"
)

// traceparent is the W3C trace-context header, lower case as producers
// write it: NATS header lookup is case-sensitive.
const traceparent = "traceparent"

// ErrBadInput is wrapped by every *FieldError.
var ErrBadInput = errors.New("source: bad input")

// Where a field comes from.
const (
	FromJSON   = "json"
	FromHeader = "header"
)

// Time formats of an event-time field.
const (
	UnixMillis = "unix-ms"
	RFC3339    = "rfc3339"
)

// Time domains.
const (
	EventTime      = "event"
	IngestionTime  = "ingestion"
	ProcessingTime = "processing"
)

// What to do with an event whose time is more than FutureSkew ahead.
const (
	FutureDeadLetter = "dead-letter"
	FutureClamp      = "clamp"
	FutureSideOutput = "side-output"
)

// Field says where one envelope field comes from.
type Field struct {
	From     string // FromJSON or FromHeader
	Path     string // dotted JSON path, for FromJSON
	Header   string // header name, for FromHeader
	Format   string // for event time: UnixMillis or RFC3339
	Optional bool
}

func (f Field) String() string {
	if f.From == FromHeader {
		return "header " + f.Header
	}
	return "json " + f.Path
}

// Config declares how to decode one ingress stream.
type Config struct {
	Stream    string
	ID        Field
	Key       Field
	Producer  Field
	EventTime Field
	// Domain is EventTime, IngestionTime or ProcessingTime.
	Domain string
	// FutureSkew bounds how far ahead of the ingestion clock an event time
	// may be; OnFuture says what happens beyond it.
	FutureSkew time.Duration
	OnFuture   string
	// MaxBytes bounds the payload size; larger messages are bad input.
	MaxBytes int
}

// Validate reports whether the config can decode anything.
func (c Config) Validate() error {
	var errs []error
	check := func(name string, f Field, required bool) {
		switch {
		case f.From == "" && !required:
		case f.From == FromJSON && f.Path == "":
			errs = append(errs, fmt.Errorf("source: %s: json field needs a path", name))
		case f.From == FromHeader && f.Header == "":
			errs = append(errs, fmt.Errorf("source: %s: header field needs a header name", name))
		case f.From != FromJSON && f.From != FromHeader:
			errs = append(errs, fmt.Errorf("source: %s: from %q, want json or header", name, f.From))
		}
	}
	check("id", c.ID, true)
	check("key", c.Key, true)
	check("producer", c.Producer, false)
	switch c.Domain {
	case EventTime:
		check("event_time", c.EventTime, true)
		if c.EventTime.Format != UnixMillis && c.EventTime.Format != RFC3339 {
			errs = append(errs, fmt.Errorf("source: event_time format %q, want %s or %s", c.EventTime.Format, UnixMillis, RFC3339))
		}
		switch c.OnFuture {
		case FutureDeadLetter, FutureClamp, FutureSideOutput:
		default:
			errs = append(errs, fmt.Errorf("source: on_future %q, want %s, %s or %s", c.OnFuture, FutureDeadLetter, FutureClamp, FutureSideOutput))
		}
	case IngestionTime, ProcessingTime:
	default:
		errs = append(errs, fmt.Errorf("source: time domain %q, want event, ingestion or processing", c.Domain))
	}
	if c.MaxBytes <= 0 {
		errs = append(errs, errors.New("source: max message bytes must be positive"))
	}
	return errors.Join(errs...)
}

// Message is one ingress message as read from JetStream.
type Message struct {
	Subject string
	Header  nats.Header
	Data    []byte
	// Seq is the stream sequence.
	Seq uint64
	// Stored is when the broker stored the message: the ingestion time.
	Stored time.Time
}

// FieldError is bad input: one field of one message could not be decoded.
type FieldError struct {
	At     record.Coordinate
	Field  string // envelope field: id, key, producer, event_time or payload
	Reason string
	// SideOutput is set when the contract routes this case to the side
	// output rather than the dead-letter stream (future timestamps).
	SideOutput bool
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("source: %s: %s: %s", e.At, e.Field, e.Reason)
}

func (e *FieldError) Unwrap() error { return ErrBadInput }

// Decoder decodes the messages of one ingress stream.
type Decoder struct {
	c Config
}

// NewDecoder returns a decoder for c.
func NewDecoder(c Config) (*Decoder, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &Decoder{c: c}, nil
}

// Decode turns m into a data record. now is the ingestion clock, used for
// the future-skew check and for processing time. A returned error is a
// *FieldError.
func (d *Decoder) Decode(m Message, now time.Time) (record.Record, error) {
	at := record.Coordinate{Stream: d.c.Stream, Subject: m.Subject, Seq: m.Seq}
	bad := func(field, format string, args ...any) (record.Record, error) {
		return record.Record{}, &FieldError{At: at, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if len(m.Data) > d.c.MaxBytes {
		return bad("payload", "%d bytes exceed the declared maximum of %d", len(m.Data), d.c.MaxBytes)
	}
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(m.Data))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return bad("payload", "not a JSON object: %v", err)
	}
	if dec.More() {
		return bad("payload", "trailing data after the JSON object")
	}
	r := record.Record{Kind: record.Data, Source: at, Value: m.Data}
	if tp := m.Header[traceparent]; len(tp) > 0 {
		r.Trace = tp[0]
	}

	id, ok, err := lookupString(d.c.ID, doc, m.Header)
	switch {
	case err != nil:
		return bad("id", "%s: %v", d.c.ID, err)
	case !ok || id == "":
		return bad("id", "%s is missing or empty", d.c.ID)
	}
	r.ID = id

	key, ok, err := lookupString(d.c.Key, doc, m.Header)
	switch {
	case err != nil:
		return bad("key", "%s: %v", d.c.Key, err)
	case !ok && !d.c.Key.Optional:
		return bad("key", "%s is missing", d.c.Key)
	}
	r.Key = []byte(key)

	if d.c.Producer.From != "" {
		p, ok, err := lookupString(d.c.Producer, doc, m.Header)
		switch {
		case err != nil:
			return bad("producer", "%s: %v", d.c.Producer, err)
		case !ok && !d.c.Producer.Optional:
			return bad("producer", "%s is missing", d.c.Producer)
		}
		r.Producer = p
	}

	switch d.c.Domain {
	case ProcessingTime:
		r.Time = now.UTC()
	case IngestionTime:
		r.Time = m.Stored.UTC()
	case EventTime:
		t, err := d.eventTime(doc, m.Header)
		if err != nil {
			return bad("event_time", "%s: %v", d.c.EventTime, err)
		}
		if limit := now.Add(d.c.FutureSkew); t.After(limit) {
			reason := fmt.Sprintf("%s is %s ahead of the ingestion clock, more than the declared skew %s",
				t.Format(time.RFC3339Nano), t.Sub(now).Round(time.Millisecond), d.c.FutureSkew)
			switch d.c.OnFuture {
			case FutureClamp:
				t = limit
			case FutureSideOutput:
				return record.Record{}, &FieldError{At: at, Field: "event_time", Reason: reason, SideOutput: true}
			default:
				return bad("event_time", "%s", reason)
			}
		}
		r.Time = t.UTC()
	}
	return r, nil
}

func (d *Decoder) eventTime(doc map[string]any, h nats.Header) (time.Time, error) {
	f := d.c.EventTime
	var v any
	if f.From == FromHeader {
		s := h.Get(f.Header)
		if s == "" {
			return time.Time{}, errors.New("missing")
		}
		v = s
	} else {
		var ok bool
		if v, ok = lookupJSON(doc, f.Path); !ok || v == nil {
			return time.Time{}, errors.New("missing")
		}
	}
	switch f.Format {
	case UnixMillis:
		var ms int64
		switch x := v.(type) {
		case json.Number:
			n, err := x.Int64()
			if err != nil {
				fl, ferr := x.Float64()
				if ferr != nil || math.IsInf(fl, 0) || fl != math.Trunc(fl) {
					return time.Time{}, fmt.Errorf("%q is not integer milliseconds", x)
				}
				n = int64(fl)
			}
			ms = n
		case string:
			n, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("%q is not integer milliseconds", x)
			}
			ms = n
		default:
			return time.Time{}, fmt.Errorf("%T is not integer milliseconds", v)
		}
		return time.UnixMilli(ms), nil
	default:
		s, ok := v.(string)
		if !ok {
			return time.Time{}, fmt.Errorf("%T is not an RFC 3339 string", v)
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return time.Time{}, fmt.Errorf("%q is not RFC 3339", s)
		}
		return t, nil
	}
}

// lookupString reads a field as a string; numbers keep their JSON text.
func lookupString(f Field, doc map[string]any, h nats.Header) (string, bool, error) {
	if f.From == FromHeader {
		v := h.Get(f.Header)
		return v, v != "", nil
	}
	v, ok := lookupJSON(doc, f.Path)
	if !ok || v == nil {
		return "", false, nil
	}
	switch x := v.(type) {
	case string:
		return x, true, nil
	case json.Number:
		return x.String(), true, nil
	case bool:
		return strconv.FormatBool(x), true, nil
	default:
		return "", false, fmt.Errorf("is a JSON %s, want a string or number", jsonKind(v))
	}
}

func lookupJSON(doc map[string]any, path string) (any, bool) {
	var cur any = doc
	for _, part := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func jsonKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}
