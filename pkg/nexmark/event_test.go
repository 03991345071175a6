package nexmark

import (
	"errors"
	"reflect"
	"strings"
	"testing"
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
