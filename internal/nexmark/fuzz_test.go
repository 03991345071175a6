package nexmark

import (
	"errors"
	"reflect"
	"testing"

	"github.com/go-json-experiment/json"
)

// FuzzDecode: any bytes either fail to decode with ErrInvalidEvent, or
// decode to a well-formed event that encodes and decodes again to the same
// event — identity, kind, key and time unchanged — and, for a bid, re-keys
// to the same bid.
func FuzzDecode(f *testing.F) {
	g, err := NewGenerator(Config{Seed: 3, Partitions: 2, KeyGroups: 16, EventsPerSecond: 100, Events: 60})
	if err != nil {
		f.Fatal(err)
	}
	for {
		m, ok := g.Next()
		if !ok {
			break
		}
		b, _ := m.Event.Encode()
		f.Add(b)
	}
	for _, s := range []string{
		`{"id":"b","kind":"bid","key":"1000","ts":1,"bid":{"auction":1000,"bidder":1,"price":42,"date_time":1}}`,
		`{"id":"b","kind":"bid","key":"1000","ts":1,"bid":{"auction":1000,"price":1e30,"date_time":1}}`,
		`{"id":"b","kind":"bid","key":"01000","ts":1,"bid":{"auction":1000,"date_time":1}}`,
		`{"id":"b","kind":"bid","key":"1000","ts":-9223372036854775808,"bid":{"auction":1000,"date_time":-9223372036854775808}}`,
		`{"id":"p","kind":"person","key":"7","ts":2,"person":{"id":7,"date_time":2},"bid":{}}`,
		`{"id":"a\ud800","kind":"auction","key":"3","ts":2,"auction":{"id":3,"date_time":2}}`,
		"{\"id\":\"a\xff\",\"kind\":\"auction\",\"key\":\"3\",\"ts\":2,\"auction\":{\"id\":3,\"date_time\":2}}",
		`{"id":"x","id":"y","kind":"person","key":"7","ts":2,"person":{"id":7,"date_time":2}}`,
		`null`, `[]`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("error %v does not wrap ErrInvalidEvent", err)
			}
			return
		}
		b, err := e.Encode()
		if err != nil {
			t.Fatalf("decoded event %+v does not encode: %v", e, err)
		}
		if want, err := json.Marshal(e); err != nil || string(b) != string(want) {
			t.Fatalf("Encode gives\n%s\nencoding/json gives\n%s (%v)", b, want, err)
		}
		again, err := Decode(b)
		if err != nil {
			t.Fatalf("re-encoded event %s does not decode: %v", b, err)
		}
		if !reflect.DeepEqual(again, e) {
			t.Fatalf("round trip changed\n%+v\ninto\n%+v", e, again)
		}
		if e.Kind == KindBid {
			key, bid, ok, err := KeyedBid(data, func(b Bid) string { return e.Key })
			if err != nil || !ok || key != e.Key {
				t.Fatalf("KeyedBid of a decodable bid: %q %v %v", key, ok, err)
			}
			key2, bid2, _, _ := KeyedBid(b, func(b Bid) string { return e.Key })
			if key2 != key || string(bid2) != string(bid) {
				t.Fatalf("re-keying differs after a round trip: %s vs %s", bid, bid2)
			}
		}
	})
}
