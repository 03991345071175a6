package ingress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/telemetry"
)

// traceparent is the W3C trace-context header, lower case as producers
// write it: NATS header lookup is case-sensitive.
const traceparent = "traceparent"

// ErrBadInput is wrapped by every *FieldError.
var ErrBadInput = errors.New("ingress: bad input")

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
			errs = append(errs, fmt.Errorf("ingress: %s: json field needs a path", name))
		case f.From == FromHeader && f.Header == "":
			errs = append(errs, fmt.Errorf("ingress: %s: header field needs a header name", name))
		case f.From != FromJSON && f.From != FromHeader:
			errs = append(errs, fmt.Errorf("ingress: %s: from %q, want json or header", name, f.From))
		}
	}
	check("id", c.ID, true)
	check("key", c.Key, true)
	check("producer", c.Producer, false)
	switch c.Domain {
	case EventTime:
		check("event_time", c.EventTime, true)
		if c.EventTime.Format != UnixMillis && c.EventTime.Format != RFC3339 {
			errs = append(errs, fmt.Errorf("ingress: event_time format %q, want %s or %s", c.EventTime.Format, UnixMillis, RFC3339))
		}
		switch c.OnFuture {
		case FutureDeadLetter, FutureClamp, FutureSideOutput:
		default:
			errs = append(errs, fmt.Errorf("ingress: on_future %q, want %s, %s or %s", c.OnFuture, FutureDeadLetter, FutureClamp, FutureSideOutput))
		}
	case IngestionTime, ProcessingTime:
	default:
		errs = append(errs, fmt.Errorf("ingress: time domain %q, want event, ingestion or processing", c.Domain))
	}
	if c.MaxBytes <= 0 {
		errs = append(errs, errors.New("ingress: max message bytes must be positive"))
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
	return fmt.Sprintf("ingress: %s: %s: %s", e.At, e.Field, e.Reason)
}

func (e *FieldError) Unwrap() error { return ErrBadInput }

// Decoder decodes the messages of one ingress stream.
type Decoder struct {
	c     Config
	paths *pathTree // the JSON paths the envelope reads
}

// NewDecoder returns a decoder for c.
func NewDecoder(c Config) (*Decoder, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var paths []string
	for _, f := range c.envelope() {
		if f.From == FromJSON {
			paths = append(paths, f.Path)
		}
	}
	return &Decoder{c: c, paths: newPathTree(paths...)}, nil
}

// envelope lists the envelope fields by name, the event time only where the
// domain reads it.
func (c Config) envelope() map[string]Field {
	m := map[string]Field{"id": c.ID, "key": c.Key}
	if c.Producer.From != "" {
		m["producer"] = c.Producer
	}
	if c.Domain == EventTime {
		m["event_time"] = c.EventTime
	}
	return m
}

// Decode turns m into a data record. now is the ingestion clock, used for
// the future-skew check and for processing time. A returned error is a
// *FieldError.
//
// What Decode refuses, besides missing and mistyped fields: payloads that
// are not UTF-8 JSON text every parser reads alike (invalid UTF-8, unpaired
// surrogate escapes) — in an identity field they would make distinct IDs
// equal; a key repeated on the way to an envelope field; and event times
// outside the event-time domain (record.CheckTime), which would wrap.
func (d *Decoder) Decode(m Message, now time.Time) (record.Record, error) {
	at := record.Coordinate{Stream: d.c.Stream, Subject: m.Subject, Seq: m.Seq}
	bad := func(field, format string, args ...any) (record.Record, error) {
		return record.Record{}, &FieldError{At: at, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if len(m.Data) > d.c.MaxBytes {
		return bad("payload", "%d bytes exceed the declared maximum of %d", len(m.Data), d.c.MaxBytes)
	}
	doc, err := readFields(m.Data, d.paths)
	var dup *DuplicateError
	switch {
	case errors.As(err, &dup):
		name, f := d.fieldAt(dup.Path)
		return bad(name, "%s: %v: which one counts is up to each parser", f, err)
	case err != nil:
		return bad("payload", "not a JSON object: %v", err)
	}
	r := record.Record{Kind: record.Data, At: at, Value: m.Data}
	if tp := m.Header[traceparent]; len(tp) > 0 {
		// Continued only if it is a valid W3C traceparent, in its
		// canonical form: a producer's header is not trusted as it is.
		r.Trace = telemetry.ValidTraceparent(tp[0])
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
	if err := checkText(m.Data); err != nil {
		return bad("payload", "%v: JSON text must be UTF-8 with paired surrogates (RFC 8259)", err)
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
				record.FormatTime(t), record.Distance(now, t), d.c.FutureSkew)
			switch d.c.OnFuture {
			case FutureClamp:
				t = limit
			case FutureSideOutput:
				return record.Record{}, &FieldError{At: at, Field: "event_time", Reason: reason, SideOutput: true}
			default:
				return bad("event_time", "%s", reason)
			}
		}
		if err := record.CheckTime(t); err != nil {
			return bad("event_time", "%s: %v", d.c.EventTime, err)
		}
		r.Time = t.UTC()
	}
	return r, nil
}

// fieldAt names the envelope field whose JSON path runs through path.
func (d *Decoder) fieldAt(path string) (string, Field) {
	for _, name := range []string{"id", "key", "producer", "event_time"} {
		f, ok := d.c.envelope()[name]
		if ok && f.From == FromJSON && (f.Path == path || strings.HasPrefix(f.Path, path+".")) {
			return name, f
		}
	}
	return "payload", Field{From: FromJSON, Path: path}
}

func (d *Decoder) eventTime(doc fields, h nats.Header) (time.Time, error) {
	f := d.c.EventTime
	var text string
	quoted := true
	if f.From == FromHeader {
		if text = h.Get(f.Header); text == "" {
			return time.Time{}, errors.New("missing")
		}
	} else {
		raw, ok := doc[f.Path]
		switch kind := jsonKind(raw); {
		case !ok || kind == "null":
			return time.Time{}, errors.New("missing")
		case kind == "string":
			if err := checkText(raw); err != nil {
				return time.Time{}, err
			}
			var err error
			if text, err = unquote(raw); err != nil {
				return time.Time{}, err
			}
		case kind == "number" && f.Format == UnixMillis:
			text, quoted = string(raw), false
		default:
			return time.Time{}, fmt.Errorf("is a JSON %s, want %s", kind, map[string]string{
				UnixMillis: "integer milliseconds", RFC3339: "an RFC 3339 string"}[f.Format])
		}
	}
	switch f.Format {
	case UnixMillis:
		parse := parseMillis
		if quoted {
			parse = parseMillisString
		}
		ms, err := parse(text)
		if err != nil {
			return time.Time{}, err
		}
		return time.UnixMilli(ms).UTC(), nil
	default:
		t, err := time.Parse(time.RFC3339Nano, text)
		if err != nil {
			return time.Time{}, fmt.Errorf("%q is not RFC 3339", text)
		}
		return t, nil
	}
}

// lookupString reads an identity field as a string; numbers keep their
// JSON text. A string that is not valid UTF-8 — or, in JSON, holds an
// unpaired surrogate escape — is refused: decoding would replace its bad
// bytes with U+FFFD and make it equal to another.
func lookupString(f Field, doc fields, h nats.Header) (string, bool, error) {
	if f.From == FromHeader {
		v := h.Get(f.Header)
		if !utf8.ValidString(v) {
			return "", false, errors.New("is not valid UTF-8")
		}
		return v, v != "", nil
	}
	raw, ok := doc[f.Path]
	switch kind := jsonKind(raw); {
	case !ok || kind == "null":
		return "", false, nil
	case kind == "string":
		if err := checkText(raw); err != nil {
			return "", false, fmt.Errorf("%v in its value", err)
		}
		s, err := unquote(raw)
		if err != nil {
			return "", false, err
		}
		return s, true, nil
	case kind == "number", kind == "boolean":
		return string(raw), true, nil
	default:
		return "", false, fmt.Errorf("is a JSON %s, want a string or number", kind)
	}
}

// unquote decodes a JSON string that checkText accepted. Most identities
// hold no escape, and then the string is its text between the quotes.
func unquote(raw json.RawMessage) (string, error) {
	if len(raw) >= 2 && bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), nil
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}
