package nexmark

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

func TestDecodeRoundTrip(t *testing.T) {
	g, err := NewGenerator(Config{Seed: 7, OutOfOrder: 20e6, Hard: HardCases{HotKeyRatio: 0.3}})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for range 200 {
		m, _ := g.Next()
		got, err := Decode(m.Payload)
		if err != nil {
			t.Fatalf("Decode(%s): %v", m.Payload, err)
		}
		if !reflect.DeepEqual(got, m.Event) {
			t.Fatalf("round trip changed event:\n got %+v\nwant %+v", got, m.Event)
		}
		again, err := got.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(m.Payload) {
			t.Fatalf("re-encoding differs:\n got %s\nwant %s", again, m.Payload)
		}
		kinds[got.Kind]++
	}
	for _, k := range []string{KindPerson, KindAuction, KindBid} {
		if kinds[k] == 0 {
			t.Errorf("no %s among 200 events", k)
		}
	}
}

func TestWireFormat(t *testing.T) {
	g, err := NewGenerator(Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	p := string(g.message(0, 0, false).Payload)
	for _, prefix := range []string{`{"id":"1-0","kind":"person","key":"1000","ts":1704067200000,"person":{"id":1000,`} {
		if !strings.HasPrefix(p, prefix) {
			t.Errorf("payload %s\ndoes not start with %s", p, prefix)
		}
	}
	b := string(g.message(0, 10, false).Payload)
	if !strings.Contains(b, `"kind":"bid"`) || !strings.Contains(b, `"bid":{"auction":`) || strings.Contains(b, `"person"`) {
		t.Errorf("bid payload %s", b)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
	}{
		{"not json", `{"id":`, "unexpected EOF"},
		{"wrong type", `{"id":5}`, "JSON number into Go string"},
		{"empty id", `{"kind":"bid","key":"1","ts":1,"bid":{"auction":1,"date_time":1}}`, "field id is empty"},
		{"no payload", `{"id":"a","kind":"bid","key":"1","ts":1}`, "0 payloads"},
		{"two payloads", `{"id":"a","kind":"bid","key":"1","ts":1,"bid":{"auction":1,"date_time":1},"person":{"id":1}}`, "2 payloads"},
		{"kind mismatch", `{"id":"a","kind":"person","key":"1","ts":1,"bid":{"auction":1,"date_time":1}}`, "no field person"},
		{"unknown kind", `{"id":"a","kind":"ask","key":"1","ts":1,"bid":{"auction":1,"date_time":1}}`, `unknown kind "ask"`},
		{"key mismatch", `{"id":"a","kind":"bid","key":"2","ts":1,"bid":{"auction":1,"date_time":1}}`, "field key"},
		{"ts mismatch", `{"id":"a","kind":"auction","key":"1","ts":2,"auction":{"id":1,"date_time":1}}`, "field ts"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(c.in))
			if err == nil {
				t.Fatal("want error")
			}
			if !errors.Is(err, ErrInvalidEvent) {
				t.Errorf("error %v does not wrap ErrInvalidEvent", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
		})
	}
	if _, err := Decode([]byte(`{"id":"a","kind":"person","key":"3","ts":9,"person":{"id":3,"date_time":9}}`)); err != nil {
		t.Errorf("minimal person: %v", err)
	}
}

// TestAppendIsMarshal holds the hand-written encoder to encoding/json's
// bytes: for generated events of every kind, with the hard cases on, and
// for strings that need escaping or are not ASCII.
func TestAppendIsMarshal(t *testing.T) {
	g, err := NewGenerator(Config{Seed: 11, OutOfOrder: 20e6, Hard: HardCases{HotKeyRatio: 0.3, DuplicateEvery: 7, LateEvery: 5, LateBy: 4e9, FutureEvery: 9, FutureBy: 36e11}})
	if err != nil {
		t.Fatal(err)
	}
	var events []Event
	for range 500 {
		m, _ := g.Next()
		events = append(events, m.Event)
	}
	for _, s := range []string{"", `quote " and \\ backslash`, "tab\tnew\nline\x01\x1f", "<html> & 'x'", "caf\u00e9 \u2028 \u2029 \U0001F600", "bad \xff utf-8"} {
		events = append(events,
			Event{ID: s, Kind: s, Key: s, TS: -1, Person: &Person{Name: s, Email: s, CreditCard: s, City: s, State: s}},
			Event{ID: s, Auction: &Auction{ItemName: s, Description: s, InitialBid: -9223372036854775808, Expires: 9223372036854775807}},
			Event{ID: s, Bid: &Bid{Channel: s, URL: s}, Person: &Person{}, Auction: &Auction{}},
		)
	}
	for _, e := range events {
		got, err := e.Encode()
		if err != nil {
			t.Fatalf("Encode(%+v): %v", e, err)
		}
		want, err := json.Marshal(e, jsontext.AllowInvalidUTF8(true))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("Encode gives\n%s\nencoding/json gives\n%s", got, want)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	g, err := NewGenerator(Config{Seed: 11})
	if err != nil {
		b.Fatal(err)
	}
	var events []Event
	for range 1000 {
		m, _ := g.Next()
		events = append(events, m.Event)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := events[i%len(events)].Encode(); err != nil {
			b.Fatal(err)
		}
	}
}
