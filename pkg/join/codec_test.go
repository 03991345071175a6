package join

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/weirflow/weir/pkg/record"
)

func TestRecordEncodingRoundTrips(t *testing.T) {
	for _, r := range []record.Record{
		{
			Kind: record.Data, ID: "evt-1", Key: []byte("person/7"), Producer: "nexmark-gen",
			Time:  time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC),
			At:    record.Coordinate{Stream: "NEXMARK", Subject: "nexmark.events.3", Seq: 1 << 40},
			Value: []byte(`{"id":7,"name":"Ada"}`),
		},
		{Kind: record.Data, ID: "pre-epoch", Time: time.Date(1901, 1, 1, 0, 0, 0, 1, time.UTC)},
		{Kind: record.Data, ID: "", Key: []byte{0, 1, 0xff}, Time: time.Unix(0, 1).UTC(), Value: []byte{0}},
	} {
		b := encodeRecord(r)
		got, err := decodeRecord(b)
		if err != nil {
			t.Fatalf("%s: %v", r.ID, err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip of %s:\n got  %#v\n want %#v", r.ID, got, r)
		}
		for n := range len(b) - len(r.Value) {
			if _, err := decodeRecord(b[:n]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s truncated to %d bytes: %v, want ErrCorrupt", r.ID, n, err)
			}
		}
	}
}

func TestSubKeysSortByTimeThenSide(t *testing.T) {
	keys := [][]byte{
		subKey(-5, Right, "a"), subKey(-1, Left, "z"), subKey(0, Left, "b"),
		subKey(0, Right, "a"), subKey(1<<40, Left, ""),
	}
	for i := 1; i < len(keys); i++ {
		if string(keys[i-1]) >= string(keys[i]) {
			t.Fatalf("sub-key %d %x does not sort before %d %x", i-1, keys[i-1], i, keys[i])
		}
	}
	ms, s, err := parseSubKey(keys[0])
	if err != nil || ms != -5 || s != Right {
		t.Fatalf("parse %x = %d, %s, %v", keys[0], ms, s, err)
	}
}
