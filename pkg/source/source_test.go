package source

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
			if r.ID == "" || r.Source.Seq != 17 || string(r.Value) != tc.data {
				t.Errorf("record %+v lost its identity, coordinate or payload", r)
			}
		})
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
