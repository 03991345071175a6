package ingress

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/pkg/record"
)

// fuzzConfigs are the contract settings the decoder fuzz target runs under:
// identity from JSON or headers, nested paths, both time formats, every
// future-time policy and every time domain.
var fuzzConfigs = []func(*Config){
	func(*Config) {},
	func(c *Config) { c.EventTime.Format = RFC3339; c.OnFuture = FutureClamp },
	func(c *Config) { c.Key.Path = "bid.auction"; c.OnFuture = FutureSideOutput },
	func(c *Config) { c.ID = Field{From: FromHeader, Header: "Nats-Msg-Id"} },
	func(c *Config) { c.EventTime = Field{From: FromHeader, Header: "Weir-Time", Format: UnixMillis} },
	func(c *Config) { c.Domain = IngestionTime; c.Key.Optional = true },
}

// FuzzDecode: whatever an ingress message holds, decoding either fails with
// a *FieldError naming an envelope field and the source coordinate, or
// yields a record whose identity is valid UTF-8 and agrees with what
// encoding/json reads from the same bytes, whose time lies in the
// event-time domain, and which survives a frame round trip unchanged.
func FuzzDecode(f *testing.F) {
	ms := itoa(now.Add(-time.Minute).UnixMilli())
	for _, s := range []string{
		`{"id":"b-1","key":"1001","ts":` + ms + `,"bid":{"auction":1001,"price":5}}`,
		`{"id":"a","key":"1","ts":` + itoa(time.Date(1442, 3, 1, 0, 0, 0, 0, time.UTC).UnixMilli()) + `}`,
		`{"id":"a","key":"1","ts":` + itoa(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()) + `}`,
		`{"id":"a","key":"1","ts":9223372036854775808}`,
		`{"id":"a","key":"1","ts":1e19}`,
		`{"id":"a","key":"1","ts":1.7e12}`,
		`{"id":"a ","key":"1","ts":` + ms + `}`,
		"{\"id\":\"a\xff\",\"key\":\"1\",\"ts\":" + ms + "}",
		`{"id":"a\ud800","key":"1","ts":` + ms + `}`,
		`{"id":"\ud83d\ude00","key":"1","ts":` + ms + `}`,
		`{"id":"a","id":"b","key":"1","ts":` + ms + `}`,
		`{"id":"a","key":"1","ts":"2026-11-29T11:00:00.5Z","bid":{"auction":7}}`,
		`{"id":"a","key":"1","ts":"1600-01-01T00:00:00Z"}`,
		`{"id":1e3,"key":true,"ts":` + ms + `}`,
		`[1,2]`, `{"id":`, `{"id":"a"} {}`,
	} {
		for v := range fuzzConfigs {
			f.Add([]byte(s), "m-1", ms, uint8(v))
		}
	}
	f.Add([]byte(`{"key":"1","ts":1}`), "m-\xff", "1", uint8(3))
	f.Add([]byte(`{"id":"a","key":"1"}`), "m", "1e30", uint8(4))
	f.Fuzz(func(t *testing.T, data []byte, hdr, hdrTime string, variant uint8) {
		c := nexmarkConfig()
		c.MaxBytes = 4096
		fuzzConfigs[int(variant)%len(fuzzConfigs)](&c)
		d, err := NewDecoder(c)
		if err != nil {
			t.Fatal(err)
		}
		m := Message{Subject: "nexmark.events.1", Seq: 9, Data: data, Stored: now.Add(-time.Second),
			Header: nats.Header{"Nats-Msg-Id": {hdr}, "Weir-Time": {hdrTime}}}
		r, err := d.Decode(m, now)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FieldError", err)
			}
			switch fe.Field {
			case "id", "key", "producer", "event_time", "payload":
			default:
				t.Fatalf("error names field %q, not an envelope field", fe.Field)
			}
			if fe.Reason == "" || fe.At.Seq != 9 || !strings.Contains(err.Error(), "nexmark.events.1#9") {
				t.Fatalf("error %v lacks its reason or coordinate", err)
			}
			return
		}
		if r.ID == "" || !utf8.ValidString(r.ID) || !utf8.Valid(r.Key) || !utf8.ValidString(r.Producer) {
			t.Fatalf("identity %q %q %q is empty or not UTF-8", r.ID, r.Key, r.Producer)
		}
		if err := record.CheckTime(r.Time); err != nil {
			t.Fatalf("decoded a time outside the domain: %v", err)
		}
		if !bytes.Equal(r.Value, data) {
			t.Fatal("payload changed")
		}
		// encoding/json reads the same identity from the same bytes.
		var doc map[string]any
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("weir accepted what encoding/json refuses: %v", err)
		}
		if c.ID.From == FromJSON {
			if s, ok := doc["id"].(string); ok && s != r.ID {
				t.Fatalf("id %q, encoding/json reads %q", r.ID, s)
			}
		}
		// The identity and time survive a frame round trip.
		back, err := edge.DecodeFrame(edge.EncodeFrame([]record.Record{r}))
		if err != nil || len(back) != 1 {
			t.Fatalf("frame round trip: %v", err)
		}
		if g := back[0]; g.ID != r.ID || !bytes.Equal(g.Key, r.Key) || g.Producer != r.Producer || !g.Time.Equal(r.Time) || g.At != r.At {
			t.Fatalf("frame round trip changed %+v into %+v", r, g)
		}
		// Re-encoded as a fresh event, it decodes to the same identity
		// and time.
		if c.ID.From == FromJSON && c.Key.Path == "key" && c.EventTime.From == FromJSON && c.Domain == EventTime && c.EventTime.Format == UnixMillis {
			again, _ := json.Marshal(map[string]any{"id": r.ID, "key": string(r.Key), "ts": r.Time.UnixMilli()})
			r2, err := d.Decode(Message{Subject: m.Subject, Seq: 9, Data: again, Header: m.Header}, now)
			if err != nil {
				t.Fatalf("re-encoded %s does not decode: %v", again, err)
			}
			if r2.ID != r.ID || !bytes.Equal(r2.Key, r.Key) || !r2.Time.Equal(r.Time.Truncate(time.Millisecond)) {
				t.Fatalf("re-encoded record %+v differs from %+v", r2, r)
			}
		}
	})
}

// FuzzParseMillis checks the exact number reader against math/big on every
// JSON number whose exponent big can afford to expand.
func FuzzParseMillis(f *testing.F) {
	for _, s := range []string{"0", "-0", "1", "1.5", "1.7e12", "1E+3", "1000e-3", "1000e-4", "9223372036854775807",
		"9223372036854775808", "-9223372036854775808", "-9223372036854775809", "1e19", "0.0e999", "1e999999999", "12.3400e1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !json.Valid([]byte(s)) || s == "" || s != strings.TrimSpace(s) || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
			return
		}
		got, err := parseMillis(s)
		if i := strings.IndexAny(s, "eE"); i >= 0 && len(s)-i > 5 {
			return // an exponent big would spend too long on; covered by the seeds
		}
		r, ok := new(big.Rat).SetString(s)
		if !ok {
			t.Fatalf("math/big cannot read JSON number %q", s)
		}
		if r.IsInt() && r.Num().IsInt64() {
			if err != nil || got != r.Num().Int64() {
				t.Fatalf("parseMillis(%q) = %d, %v; want %s", s, got, err, r.Num())
			}
		} else if err == nil {
			t.Fatalf("parseMillis(%q) = %d, want an error (%s)", s, got, r.RatString())
		}
	})
}
