package ingress

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/weirflow/weir/internal/keygroup"
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
	// Tenant is where a record's tenant is, in every schema; From ""
	// when the contract declares none. With TenantScoped the record's
	// key is keygroup.Scoped(tenant, key).
	Tenant       Field
	TenantScoped bool
	// Domain is EventTime, IngestionTime or ProcessingTime.
	Domain string
	// FutureSkew bounds how far ahead of the ingestion clock an event time
	// may be; OnFuture says what happens beyond it.
	FutureSkew time.Duration
	OnFuture   string
	// MaxBytes bounds the payload size; larger messages are bad input.
	MaxBytes int
	// Schema, when Schema.Version is set, lets records of several schemas
	// share the stream: ID, Key, Producer and EventTime read the current
	// one, Schema.Older the ones before it.
	Schema Schema
}

// Schema declares versioned decoders.
type Schema struct {
	// Version is where a record names its schema.
	Version Field
	Current string
	// Unnamed is the version of a record that names none; empty: such a
	// record is bad input.
	Unnamed string
	Older   []OlderSchema
}

// OlderSchema reads the identity of a schema before the current one.
type OlderSchema struct {
	Version                      string
	ID, Key, Producer, EventTime Field
	// Dropped: the schema's records are bad input.
	Dropped bool
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
	identity := func(prefix string, id, key, producer, eventTime Field) {
		check(prefix+"id", id, true)
		check(prefix+"key", key, true)
		check(prefix+"producer", producer, false)
		if c.Domain == EventTime {
			check(prefix+"event_time", eventTime, true)
			if eventTime.Format != UnixMillis && eventTime.Format != RFC3339 {
				errs = append(errs, fmt.Errorf("ingress: %sevent_time format %q, want %s or %s", prefix, eventTime.Format, UnixMillis, RFC3339))
			}
		}
	}
	identity("", c.ID, c.Key, c.Producer, c.EventTime)
	check("tenant", c.Tenant, c.TenantScoped)
	if c.Schema.Version.From != "" {
		check("schema version", c.Schema.Version, true)
		versions := map[string]bool{c.Schema.Current: true}
		if c.Schema.Current == "" {
			errs = append(errs, errors.New("ingress: the current schema has no version"))
		}
		for _, o := range c.Schema.Older {
			if versions[o.Version] {
				errs = append(errs, fmt.Errorf("ingress: schema version %q declared twice", o.Version))
			}
			versions[o.Version] = true
			identity("schema "+strconv.Quote(o.Version)+": ", o.ID, o.Key, o.Producer, o.EventTime)
		}
		if u := c.Schema.Unnamed; u != "" && !versions[u] {
			errs = append(errs, fmt.Errorf("ingress: records naming no schema are read as %q, which is not declared", u))
		}
	}
	switch c.Domain {
	case EventTime:
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
	// Stream is the ingress stream the message is in; empty is the
	// contract's (Config.Stream), as it is when the ingress is one stream.
	Stream  string
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
	At record.Coordinate
	// Schema is the version of the schema the message was read as, where
	// the contract declares versioned decoders and the version was found.
	Schema string
	// ID and Tenant are the record's, where they decoded before the
	// field that failed.
	ID     string
	Tenant string
	Field  string // envelope field: id, key, producer, tenant, event_time, schema_version or payload
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
	c       Config
	current *fieldSet
	// Versioned decoders: the sets by version (a dropped one nil), and the
	// path tree that finds a version in a payload.
	versions     map[string]*fieldSet
	versionPaths *pathTree
}

// fieldSet is one schema's identity fields and the JSON paths they read.
type fieldSet struct {
	version                              string
	id, key, producer, eventTime, tenant Field
	paths                                *pathTree
}

// NewDecoder returns a decoder for c.
func NewDecoder(c Config) (*Decoder, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	d := &Decoder{c: c, current: c.fieldSet(c.Schema.Current, c.ID, c.Key, c.Producer, c.EventTime)}
	if c.Schema.Version.From != "" {
		d.versions = map[string]*fieldSet{c.Schema.Current: d.current}
		for _, o := range c.Schema.Older {
			d.versions[o.Version] = nil
			if !o.Dropped {
				d.versions[o.Version] = c.fieldSet(o.Version, o.ID, o.Key, o.Producer, o.EventTime)
			}
		}
		if c.Schema.Version.From == FromJSON {
			d.versionPaths = newPathTree(c.Schema.Version.Path)
		}
	}
	return d, nil
}

func (c Config) fieldSet(version string, id, key, producer, eventTime Field) *fieldSet {
	fs := &fieldSet{version: version, id: id, key: key, producer: producer, eventTime: eventTime, tenant: c.Tenant}
	var paths []string
	for _, f := range fs.envelope(c.Domain) {
		if f.From == FromJSON {
			paths = append(paths, f.Path)
		}
	}
	fs.paths = newPathTree(paths...)
	return fs
}

// envelope lists the envelope fields by name, the event time only where the
// domain reads it.
func (fs *fieldSet) envelope(domain string) map[string]Field {
	m := map[string]Field{"id": fs.id, "key": fs.key}
	if fs.producer.From != "" {
		m["producer"] = fs.producer
	}
	if fs.tenant.From != "" {
		m["tenant"] = fs.tenant
	}
	if domain == EventTime {
		m["event_time"] = fs.eventTime
	}
	return m
}

// schema finds the field set of m's schema: the current one, unless the
// contract declares versions. A returned error is a *FieldError's field
// and reason: schema_version, or payload for a payload that is no JSON
// object at all.
func (d *Decoder) schema(m Message) (fs *fieldSet, field string, err error) {
	if d.versions == nil {
		return d.current, "", nil
	}
	vf := d.c.Schema.Version
	var doc fields
	if vf.From == FromJSON {
		var dup *DuplicateError
		switch doc, err = readFields(m.Data, d.versionPaths); {
		case errors.As(err, &dup):
			return nil, "schema_version", fmt.Errorf("%s: %v: which one counts is up to each parser", vf, err)
		case err != nil:
			return nil, "payload", fmt.Errorf("not a JSON object: %v", err)
		}
	}
	v, named, err := lookupString(vf, doc, m.Header)
	switch {
	case err != nil:
		return nil, "schema_version", fmt.Errorf("%s: %v", vf, err)
	case !named && d.c.Schema.Unnamed == "":
		return nil, "schema_version", fmt.Errorf("%s is missing, and the contract reads no schema for records that name none (identity.schema.unnamed)", vf)
	case !named:
		v = d.c.Schema.Unnamed
	}
	fs, declared := d.versions[v]
	switch {
	case !declared:
		var read []string
		for _, k := range slices.Sorted(maps.Keys(d.versions)) {
			if d.versions[k] != nil {
				read = append(read, strconv.Quote(k))
			}
		}
		return nil, "schema_version", fmt.Errorf("%s names schema %q, which the contract does not declare (it reads %s)", vf, v, strings.Join(read, ", "))
	case fs == nil && !named:
		return nil, "schema_version", fmt.Errorf("%s is missing, and records that name none are schema %q (identity.schema.unnamed), whose decoder the contract dropped", vf, v)
	case fs == nil:
		return nil, "schema_version", fmt.Errorf("%s names schema %q, whose decoder the contract dropped (identity.schema.older[].dropped)", vf, v)
	}
	return fs, "", nil
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
	at := record.Coordinate{Stream: cmp.Or(m.Stream, d.c.Stream), Subject: m.Subject, Seq: m.Seq}
	var schema string // the version the record was read as, once known
	var id, tenant string
	bad := func(field, format string, args ...any) (record.Record, error) {
		return record.Record{}, &FieldError{At: at, Schema: schema, ID: id, Tenant: tenant, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if len(m.Data) > d.c.MaxBytes {
		return bad("payload", "%d bytes exceed the declared maximum of %d", len(m.Data), d.c.MaxBytes)
	}
	fs, field, err := d.schema(m)
	if err != nil {
		return bad(field, "%v", err)
	}
	if d.versions != nil {
		schema = fs.version
	}
	doc, err := readFields(m.Data, fs.paths)
	var dup *DuplicateError
	switch {
	case errors.As(err, &dup):
		name, f := fs.fieldAt(d.c.Domain, dup.Path)
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

	rid, ok, err := lookupString(fs.id, doc, m.Header)
	switch {
	case err != nil:
		return bad("id", "%s: %v", fs.id, err)
	case !ok || rid == "":
		return bad("id", "%s is missing or empty", fs.id)
	}
	r.ID, id = rid, rid

	// The tenant comes before the other fields, so that a record refused
	// for any of them is filed within its tenant.
	if fs.tenant.From != "" {
		t, ok, err := lookupString(fs.tenant, doc, m.Header)
		switch {
		case err != nil:
			return bad("tenant", "%s: %v", fs.tenant, err)
		case !ok || t == "":
			return bad("tenant", "%s is missing or empty", fs.tenant)
		case d.c.TenantScoped && !keygroup.ValidTenant([]byte(t)):
			return bad("tenant", "%s holds the byte 0x1e, which separates the tenant from the key in a tenant-scoped key", fs.tenant)
		}
		r.Tenant, tenant = t, t
	}

	key, ok, err := lookupString(fs.key, doc, m.Header)
	switch {
	case err != nil:
		return bad("key", "%s: %v", fs.key, err)
	case !ok && !fs.key.Optional:
		return bad("key", "%s is missing", fs.key)
	case d.c.TenantScoped && !keygroup.ValidTenant([]byte(key)):
		return bad("key", "%s holds the byte 0x1e, which separates the tenant from the key in a tenant-scoped key", fs.key)
	}
	r.Key = []byte(key)
	if d.c.TenantScoped && tenant != "" {
		r.Key = keygroup.Scoped(tenant, r.Key)
	}

	if fs.producer.From != "" {
		p, ok, err := lookupString(fs.producer, doc, m.Header)
		switch {
		case err != nil:
			return bad("producer", "%s: %v", fs.producer, err)
		case !ok && !fs.producer.Optional:
			return bad("producer", "%s is missing", fs.producer)
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
		t, err := eventTime(fs.eventTime, doc, m.Header)
		if err != nil {
			return bad("event_time", "%s: %v", fs.eventTime, err)
		}
		if limit := now.Add(d.c.FutureSkew); t.After(limit) {
			reason := fmt.Sprintf("%s is %s ahead of the ingestion clock, more than the declared skew %s",
				record.FormatTime(t), record.Distance(now, t), d.c.FutureSkew)
			switch d.c.OnFuture {
			case FutureClamp:
				t = limit
			case FutureSideOutput:
				return record.Record{}, &FieldError{At: at, Schema: schema, Field: "event_time", Reason: reason, SideOutput: true}
			default:
				return bad("event_time", "%s", reason)
			}
		}
		if err := record.CheckTime(t); err != nil {
			return bad("event_time", "%s: %v", fs.eventTime, err)
		}
		r.Time = t.UTC()
	}
	return r, nil
}

// fieldAt names the envelope field whose JSON path runs through path.
func (fs *fieldSet) fieldAt(domain, path string) (string, Field) {
	for _, name := range []string{"id", "key", "producer", "tenant", "event_time"} {
		f, ok := fs.envelope(domain)[name]
		if ok && f.From == FromJSON && (f.Path == path || strings.HasPrefix(f.Path, path+".")) {
			return name, f
		}
	}
	return "payload", Field{From: FromJSON, Path: path}
}

func eventTime(f Field, doc fields, h nats.Header) (time.Time, error) {
	var text string
	quoted := true
	if f.From == FromHeader {
		if text = h.Get(f.Header); text == "" {
			return time.Time{}, errors.New("missing")
		}
	} else {
		raw, ok := doc.get(f.Path)
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
	raw, ok := doc.get(f.Path)
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
