package ingress

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func nexmarkConfig() Config {
	return Config{
		Stream:     "NEXMARK",
		ID:         Field{From: FromJSON, Path: "id"},
		Key:        Field{From: FromJSON, Path: "key"},
		Producer:   Field{From: FromHeader, Header: "Weir-Producer", Optional: true},
		EventTime:  Field{From: FromJSON, Path: "ts", Format: UnixMillis},
		Domain:     EventTime,
		FutureSkew: 5 * time.Second,
		OnFuture:   FutureDeadLetter,
		MaxBytes:   256,
	}
}

func TestDecode(t *testing.T) {
	ms := now.Add(-time.Minute).UnixMilli()
	good := `{"id":"b-1","key":"1001","ts":` + itoa(ms) + `,"bid":{"price":5}}`
	cases := []struct {
		name      string
		mutate    func(*Config)
		data      string
		header    nats.Header
		wantField string // "" means success
		wantTime  time.Time
		side      bool
	}{
		{name: "good", data: good, header: nats.Header{"Weir-Producer": {"gen-1"}}, wantTime: time.UnixMilli(ms).UTC()},
		{name: "numeric key", data: `{"id":"b-1","key":1001,"ts":` + itoa(ms) + `}`, wantTime: time.UnixMilli(ms).UTC()},
		{name: "malformed", data: `{"id":`, wantField: "payload"},
		{name: "not an object", data: `[1,2]`, wantField: "payload"},
		{name: "trailing", data: good + ` {}`, wantField: "payload"},
		{name: "oversized", data: `{"id":"` + strings.Repeat("x", 300) + `"}`, wantField: "payload"},
		{name: "missing id", data: `{"key":"1","ts":1}`, wantField: "id"},
		{name: "empty id", data: `{"id":"","key":"1","ts":1}`, wantField: "id"},
		{name: "object id", data: `{"id":{},"key":"1","ts":1}`, wantField: "id"},
		{name: "missing key", data: `{"id":"a","ts":1}`, wantField: "key"},
		{name: "missing time", data: `{"id":"a","key":"1"}`, wantField: "event_time"},
		{name: "unparsable time", data: `{"id":"a","key":"1","ts":"yesterday"}`, wantField: "event_time"},
		{name: "fractional time", data: `{"id":"a","key":"1","ts":1.5}`, wantField: "event_time"},
		{name: "future dead-letter", data: `{"id":"a","key":"1","ts":` + itoa(now.Add(time.Hour).UnixMilli()) + `}`, wantField: "event_time"},
		{name: "future side output", mutate: func(c *Config) { c.OnFuture = FutureSideOutput },
			data: `{"id":"a","key":"1","ts":` + itoa(now.Add(time.Hour).UnixMilli()) + `}`, wantField: "event_time", side: true},
		{name: "future clamp", mutate: func(c *Config) { c.OnFuture = FutureClamp },
			data: `{"id":"a","key":"1","ts":` + itoa(now.Add(time.Hour).UnixMilli()) + `}`, wantTime: now.Add(5 * time.Second)},
		{name: "within skew", data: `{"id":"a","key":"1","ts":` + itoa(now.Add(4*time.Second).UnixMilli()) + `}`, wantTime: now.Add(4 * time.Second)},
		{name: "rfc3339", mutate: func(c *Config) { c.EventTime.Format = RFC3339 },
			data: `{"id":"a","key":"1","ts":"2026-11-29T11:00:00.5Z"}`, wantTime: time.Date(2026, 11, 29, 11, 0, 0, 5e8, time.UTC)},
		{name: "nested path", mutate: func(c *Config) { c.Key.Path = "bid.auction" },
			data: `{"id":"a","bid":{"auction":7},"ts":1}`, wantTime: time.UnixMilli(1).UTC()},
		{name: "header id", mutate: func(c *Config) { c.ID = Field{From: FromHeader, Header: "Nats-Msg-Id"} },
			data: `{"key":"1","ts":1}`, header: nats.Header{"Nats-Msg-Id": {"m-1"}}, wantTime: time.UnixMilli(1).UTC()},
		{name: "processing time", mutate: func(c *Config) { c.Domain = ProcessingTime },
			data: `{"id":"a","key":"1"}`, wantTime: now},

		// Hostile input: each of these was lost or changed silently once.
		{name: "584 years ago", data: `{"id":"a","key":"1","ts":` + itoa(time.Date(1442, 3, 1, 0, 0, 0, 0, time.UTC).UnixMilli()) + `}`, wantField: "event_time"},
		{name: "rfc3339 before the domain", mutate: func(c *Config) { c.EventTime.Format = RFC3339 },
			data: `{"id":"a","key":"1","ts":"1600-01-01T00:00:00Z"}`, wantField: "event_time"},
		{name: "year 3000 clamped", mutate: func(c *Config) { c.OnFuture = FutureClamp },
			data: `{"id":"a","key":"1","ts":` + itoa(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()) + `}`, wantTime: now.Add(5 * time.Second)},
		{name: "past int64", data: `{"id":"a","key":"1","ts":9223372036854775808}`, wantField: "event_time"},
		{name: "float past int64", data: `{"id":"a","key":"1","ts":1e19}`, wantField: "event_time"},
		{name: "string past int64", data: `{"id":"a","key":"1","ts":"99999999999999999999"}`, wantField: "event_time"},
		{name: "huge exponent", data: `{"id":"a","key":"1","ts":1e999999999}`, wantField: "event_time"},
		{name: "tiny exponent", data: `{"id":"a","key":"1","ts":1000e-999999999}`, wantField: "event_time"},
		{name: "exponent milliseconds", data: `{"id":"a","key":"1","ts":1.7e12}`, wantTime: time.UnixMilli(17e11).UTC()},
		{name: "boolean time", data: `{"id":"a","key":"1","ts":true}`, wantField: "event_time"},
		{name: "invalid UTF-8 id", data: "{\"id\":\"a\xff\",\"key\":\"1\",\"ts\":1}", wantField: "id"},
		{name: "invalid UTF-8 key", data: "{\"id\":\"a\",\"key\":\"\xc0\xaf\",\"ts\":1}", wantField: "key"},
		{name: "unpaired high surrogate id", data: `{"id":"a\ud800","key":"1","ts":1}`, wantField: "id"},
		{name: "unpaired low surrogate id", data: `{"id":"a\udc00","key":"1","ts":1}`, wantField: "id"},
		{name: "reversed surrogates id", data: `{"id":"\udc00\ud800","key":"1","ts":1}`, wantField: "id"},
		{name: "paired surrogates id", data: `{"id":"\ud83d\ude00","key":"1","ts":1}`, wantTime: time.UnixMilli(1).UTC()},
		{name: "escaped backslash then u", data: `{"id":"a\\ud800","key":"1","ts":1}`, wantTime: time.UnixMilli(1).UTC()},
		{name: "invalid UTF-8 elsewhere", data: "{\"id\":\"a\",\"key\":\"1\",\"ts\":1,\"note\":\"\xff\"}", wantField: "payload"},
		{name: "unpaired surrogate elsewhere", data: `{"id":"a","key":"1","ts":1,"note":"\ud800"}`, wantField: "payload"},
		{name: "id twice", data: `{"id":"a","key":"1","ts":1,"id":"b"}`, wantField: "id"},
		{name: "nested key's object twice", mutate: func(c *Config) { c.Key.Path = "bid.auction" },
			data: `{"id":"a","bid":{"auction":7},"ts":1,"bid":{"auction":8}}`, wantField: "key"},
		{name: "nested key twice", mutate: func(c *Config) { c.Key.Path = "bid.auction" },
			data: `{"id":"a","bid":{"auction":7,"auction":8},"ts":1}`, wantField: "key"},
		{name: "other field twice", data: `{"id":"a","key":"1","ts":1,"x":1,"x":2}`, wantTime: time.UnixMilli(1).UTC()},
		{name: "invalid UTF-8 header id", mutate: func(c *Config) { c.ID = Field{From: FromHeader, Header: "Nats-Msg-Id"} },
			data: `{"key":"1","ts":1}`, header: nats.Header{"Nats-Msg-Id": {"m-\xff"}}, wantField: "id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := nexmarkConfig()
			if tc.mutate != nil {
				tc.mutate(&c)
			}
			d, err := NewDecoder(c)
			if err != nil {
				t.Fatal(err)
			}
			msg := Message{Subject: "nexmark.events.2", Header: tc.header, Data: []byte(tc.data), Seq: 17}
			r, err := d.Decode(msg, now)
			if tc.wantField != "" {
				var fe *FieldError
				if !errors.As(err, &fe) || !errors.Is(err, ErrBadInput) {
					t.Fatalf("err = %v, want a *FieldError", err)
				}
				if fe.Field != tc.wantField || fe.SideOutput != tc.side {
					t.Fatalf("field %q side %v, want %q side %v (%v)", fe.Field, fe.SideOutput, tc.wantField, tc.side, err)
				}
				if !strings.Contains(err.Error(), "NEXMARK/nexmark.events.2#17") {
					t.Fatalf("error %q does not name the source coordinate", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !r.Time.Equal(tc.wantTime) {
				t.Errorf("time %v, want %v", r.Time, tc.wantTime)
			}
			if r.ID == "" || r.At.Seq != 17 || string(r.Value) != tc.data {
				t.Errorf("record %+v lost its identity, coordinate or payload", r)
			}
		})
	}
}

// TestDistinctIDsStayDistinct: IDs that differ only in whitespace stay
// distinct, and IDs whose bytes a decoder would normalise are refused, so
// that no two distinct events share an identity.
func TestDistinctIDsStayDistinct(t *testing.T) {
	d, err := NewDecoder(nexmarkConfig())
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for i, raw := range []string{`"a"`, `"a "`, `" a"`, `"a\t"`, `"a\n"`, `"a\u0000"`, `"\ufffd"`, `"a\ud800"`, "\"\xff\"", "\"\xfe\""} {
		data := `{"id":` + raw + `,"key":"1","ts":1}`
		r, err := d.Decode(Message{Subject: "s", Data: []byte(data), Seq: uint64(i + 1)}, now)
		if err != nil {
			continue
		}
		if prev, ok := ids[r.ID]; ok {
			t.Errorf("%s and %s both decode to ID %q", prev, raw, r.ID)
		}
		ids[r.ID] = raw
	}
	if len(ids) != 7 {
		t.Errorf("%d distinct IDs decoded, want 7: %q", len(ids), ids)
	}
}

// TestFutureReasonNamesTheRealDistance: a year-3000 time is about 973 years
// ahead, not the 292 years a saturated duration would say.
func TestFutureReasonNamesTheRealDistance(t *testing.T) {
	d, _ := NewDecoder(nexmarkConfig())
	ms := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	_, err := d.Decode(Message{Subject: "s", Data: []byte(`{"id":"a","key":"1","ts":` + itoa(ms) + `}`), Seq: 1}, now)
	if err == nil || !strings.Contains(err.Error(), "about 973 years") || strings.Contains(err.Error(), "2562047h") {
		t.Fatalf("err = %v, want the real distance, about 973 years", err)
	}
}

// TestTraceparentIsValidatedBeforeItIsContinued: a producer's traceparent
// is kept only if it is one, in canonical form.
func TestTraceparentIsValidatedBeforeItIsContinued(t *testing.T) {
	const good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	d, _ := NewDecoder(nexmarkConfig())
	for in, want := range map[string]string{
		good: good,
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01": "",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01": "",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01": "",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": "",
		"hello":                             "",
		good + strings.Repeat("-x", 100000): "",
	} {
		r, err := d.Decode(Message{Subject: "s", Header: nats.Header{"traceparent": {in}}, Data: []byte(`{"id":"a","key":"1","ts":1}`), Seq: 1}, now)
		if err != nil {
			t.Fatal(err)
		}
		if r.Trace != want {
			t.Errorf("traceparent %.60q gave trace %q, want %q", in, r.Trace, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []func(*Config){
		func(c *Config) { c.ID = Field{} },
		func(c *Config) { c.Key = Field{From: FromJSON} },
		func(c *Config) { c.Producer = Field{From: FromHeader} },
		func(c *Config) { c.EventTime.Format = "unix" },
		func(c *Config) { c.OnFuture = "ignore" },
		func(c *Config) { c.Domain = "wall" },
		func(c *Config) { c.MaxBytes = 0 },
	}
	for i, m := range bad {
		c := nexmarkConfig()
		m(&c)
		if c.Validate() == nil {
			t.Errorf("case %d: want an error for %+v", i, c)
		}
	}
	if err := nexmarkConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// BenchmarkDecode decodes a Nexmark bid as the ingress delivers it.
func BenchmarkDecode(b *testing.B) {
	d, err := NewDecoder(nexmarkConfig())
	if err != nil {
		b.Fatal(err)
	}
	ms := itoa(now.Add(-time.Minute).UnixMilli())
	data := []byte(`{"id":"b-1029","kind":"bid","key":"1007","ts":` + ms + `,"bid":{"auction":1007,"bidder":2044,"price":18271,"channel":"Google","url":"https://www.nexmark.com/q/cdb/item.htm","date_time":` + ms + `,"extra":""}}`)
	m := Message{Subject: "nexmark.events.1", Seq: 9, Data: data, Stored: now}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Decode(m, now); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDecodeSchemaVersions reads one stream holding three schemas — each
// names its version in a header or, in the second case, in the payload —
// through their own identity fields, and refuses, naming the version, what
// no declared decoder reads.
func TestDecodeSchemaVersions(t *testing.T) {
	ms := now.Add(-time.Minute)
	v1 := `{"event_id":"e-1","user":"ann","time":"` + ms.Format(time.RFC3339Nano) + `"}`
	v2 := `{"id":"e-2","key":"bob","ts":` + itoa(ms.UnixMilli()) + `}`
	v0 := `{"old_id":"e-0","who":"cy","at":` + itoa(ms.UnixMilli()) + `}`
	for _, where := range []Field{{From: FromHeader, Header: "Weir-Schema"}, {From: FromJSON, Path: "meta.schema"}} {
		c := nexmarkConfig()
		c.Schema = Schema{Version: where, Current: "2", Unnamed: "1", Older: []OlderSchema{
			{Version: "1", ID: Field{From: FromJSON, Path: "event_id"}, Key: Field{From: FromJSON, Path: "user"},
				EventTime: Field{From: FromJSON, Path: "time", Format: RFC3339}},
			{Version: "0", ID: Field{From: FromJSON, Path: "old_id"}, Key: Field{From: FromJSON, Path: "who"},
				EventTime: Field{From: FromJSON, Path: "at", Format: UnixMillis}, Dropped: true},
		}}
		d, err := NewDecoder(c)
		if err != nil {
			t.Fatal(err)
		}
		// named returns the message of payload naming version v ("": none).
		named := func(payload, v string) Message {
			m := Message{Subject: "nexmark.events.0", Seq: 7, Data: []byte(payload), Header: nats.Header{}}
			switch {
			case v == "":
			case where.From == FromHeader:
				m.Header.Set("Weir-Schema", v)
			default:
				m.Data = []byte(`{"meta":{"schema":"` + v + `"},` + payload[1:])
			}
			return m
		}
		for _, tc := range []struct {
			name, payload, version string
			id, key                string
		}{
			{"current", v2, "2", "e-2", "bob"},
			{"older", v1, "1", "e-1", "ann"},
			{"unnamed read as 1", v1, "", "e-1", "ann"},
		} {
			r, err := d.Decode(named(tc.payload, tc.version), now)
			if err != nil {
				t.Fatalf("%s %s: %v", where, tc.name, err)
			}
			if r.ID != tc.id || string(r.Key) != tc.key || !r.Time.Equal(ms.Truncate(time.Millisecond)) {
				t.Errorf("%s %s: id %q key %q time %s", where, tc.name, r.ID, r.Key, r.Time)
			}
		}
		for _, tc := range []struct {
			name, payload, version string
			field, schema, reason  string
		}{
			{"dropped", v0, "0", "schema_version", "", `names schema "0", whose decoder the contract dropped`},
			{"undeclared", v2, "3", "schema_version", "", `names schema "3", which the contract does not declare (it reads "1", "2")`},
			{"v2 payload named 1", v2, "1", "id", "1", "json event_id is missing"},
		} {
			_, err := d.Decode(named(tc.payload, tc.version), now)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || fe.Schema != tc.schema || !strings.Contains(fe.Reason, tc.reason) {
				t.Errorf("%s %s: %v (%+v), want field %s, schema %q, reason %q", where, tc.name, err, fe, tc.field, tc.schema, tc.reason)
			}
			if fe != nil && fe.At.Seq != 7 {
				t.Errorf("%s %s: coordinate %s", where, tc.name, fe.At)
			}
		}
		if where.From == FromJSON {
			_, err := d.Decode(Message{Subject: "nexmark.events.0", Seq: 8, Data: []byte(`[1]`)}, now)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != "payload" || !strings.Contains(fe.Reason, "not a JSON object") {
				t.Errorf("%s: a payload that is no object: %v", where, err)
			}
		}
		// Records naming none, once their schema is dropped, say so.
		c.Schema.Unnamed = "0"
		if d, err = NewDecoder(c); err != nil {
			t.Fatal(err)
		}
		_, err = d.Decode(named(v1, ""), now)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "schema_version" || !strings.Contains(fe.Reason, `records that name none are schema "0"`) {
			t.Errorf("%s unnamed and dropped: %v", where, err)
		}
		// Without unnamed, a record naming no schema is bad input.
		c.Schema.Unnamed = ""
		if d, err = NewDecoder(c); err != nil {
			t.Fatal(err)
		}
		_, err = d.Decode(named(v2, ""), now)
		if !errors.As(err, &fe) || fe.Field != "schema_version" || !strings.Contains(fe.Reason, "is missing") {
			t.Errorf("%s unnamed: %v", where, err)
		}
	}
	c := nexmarkConfig()
	c.Schema = Schema{Version: Field{From: FromHeader, Header: "Weir-Schema"}, Current: "2", Unnamed: "5"}
	if _, err := NewDecoder(c); err == nil {
		t.Error("NewDecoder accepted unnamed records read as an undeclared schema")
	}
}

// A declared tenant travels in the record; with tenant-scoped keys the key
// is the pair, and a record without a tenant, or whose tenant or key would
// make the pair ambiguous, is bad input naming the field.
func TestDecodeTenant(t *testing.T) {
	ms := itoa(now.Add(-time.Minute).UnixMilli())
	for _, c := range []struct {
		name      string
		scoped    bool
		data      string
		wantField string
		wantKey   string
	}{
		{"carried", false, `{"id":"a","key":"1","tenant":"acme","ts":` + ms + `}`, "", "1"},
		{"scoped", true, `{"id":"a","key":"1","tenant":"acme","ts":` + ms + `}`, "", "acme\x1e1"},
		{"missing", false, `{"id":"a","key":"1","ts":` + ms + `}`, "tenant", ""},
		{"missing, scoped", true, `{"id":"a","key":"1","tenant":"","ts":` + ms + `}`, "tenant", ""},
		{"separator in the tenant", true, `{"id":"a","key":"1","tenant":"a\u001eb","ts":` + ms + `}`, "tenant", ""},
		{"separator in the key", true, `{"id":"a","key":"1\u001e2","tenant":"acme","ts":` + ms + `}`, "key", ""},
		{"bad time", true, `{"id":"a","key":"1","tenant":"acme","ts":"soon"}`, "event_time", ""},
		{"no key", false, `{"id":"a","tenant":"acme","ts":` + ms + `}`, "key", ""},
	} {
		cfg := nexmarkConfig()
		cfg.Tenant, cfg.TenantScoped = Field{From: FromJSON, Path: "tenant"}, c.scoped
		d, err := NewDecoder(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r, err := d.Decode(Message{Subject: "s", Data: []byte(c.data), Seq: 1}, now)
		var fe *FieldError
		switch {
		case c.wantField != "" && (!errors.As(err, &fe) || fe.Field != c.wantField):
			t.Errorf("%s: %v, want a bad %s", c.name, err, c.wantField)
		case c.wantField != "" && c.wantField != "tenant" && (fe.Tenant != "acme" || fe.ID != "a"):
			// Refused for a field after it, a record is still filed
			// within its tenant, under its ID.
			t.Errorf("%s: refused as of tenant %q, ID %q; want acme's a", c.name, fe.Tenant, fe.ID)
		case c.wantField == "" && (err != nil || string(r.Key) != c.wantKey || r.Tenant != "acme"):
			t.Errorf("%s: key %q tenant %q, %v; want key %q of tenant acme", c.name, r.Key, r.Tenant, err, c.wantKey)
		}
	}
}

// TestABadNameAnywhereKeepsTheEnvelope: a payload with an object name
// that is not valid text — an unpaired surrogate escape, a byte that is
// not UTF-8 — on no path the contract reads is refused for its text, but
// only after its ID and tenant are read, so that its dead letter is filed
// in its tenant; a predicate still reads its field; and a name spelled
// with an escape is the name it spells, for duplicates too.
func TestABadNameAnywhereKeepsTheEnvelope(t *testing.T) {
	c := nexmarkConfig()
	c.Tenant = Field{From: FromJSON, Path: "tenant"}
	d, err := NewDecoder(c)
	if err != nil {
		t.Fatal(err)
	}
	ms := itoa(now.Add(-time.Minute).UnixMilli())
	for _, data := range []string{
		`{"id":"a","tenant":"t1","key":"1","ts":` + ms + `,"x\u0041\ud800":1}`,
		"{\"id\":\"a\",\"tenant\":\"t1\",\"key\":\"1\",\"ts\":" + ms + ",\"x\\u0041\xff\":1}",
		"{\"id\":\"a\",\"tenant\":\"t1\",\"key\":\"1\",\"ts\":" + ms + ",\"x\xff\":1}",
	} {
		_, err := d.Decode(Message{Subject: "s", Seq: 1, Data: []byte(data)}, now)
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Fatalf("%q: %v, want a field error", data, err)
		}
		if fe.ID != "a" || fe.Tenant != "t1" {
			t.Errorf("%q: refused with id %q tenant %q (%s), want them read first", data, fe.ID, fe.Tenant, fe.Reason)
		}
	}
	p := NewPredicate("kind", []string{"opt"})
	for _, s := range []string{`{"kind":"opt","x\u0041\ud800":1}`, "{\"kind\":\"opt\",\"x\\u0041\xff\":1}"} {
		if !p.Match([]byte(s)) {
			t.Errorf("%q: the predicate does not read its field", s)
		}
	}
	_, err = d.Decode(Message{Subject: "s", Seq: 1, Data: []byte(`{"id":"a","i\u0064":"b","tenant":"t1","key":"1","ts":` + ms + `}`)}, now)
	var fe *FieldError
	if !errors.As(err, &fe) || !strings.Contains(fe.Reason, "appears twice") {
		t.Errorf("an id spelled twice, once with an escape: %v, want it refused as twice", err)
	}
}
