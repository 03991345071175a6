package edge

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/weirflow/weir/pkg/record"
)

func sampleRecords() []record.Record {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 123456789, time.UTC)
	return []record.Record{
		{Kind: record.Data, ID: "e-1", Key: []byte("k1"), Producer: "gen", Time: t0,
			Source: record.Coordinate{Stream: "NEXMARK", Subject: "nexmark.events.0", Seq: 7}, Value: []byte(`{"a":1}`),
			Trace: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{Kind: record.Watermark, Time: t0.Add(-time.Second)},
		{Kind: record.Data, ID: "e-2", Key: []byte("k2"), Time: time.Unix(-5, 0).UTC(), Value: []byte("x")},
		{Kind: record.Data, ID: "e-3"}, // zero time, nil key and value
		{Kind: record.Idle},
		{Kind: record.Barrier, Epoch: 42},
		{Kind: record.End},
	}
}

func TestFrameRoundTrip(t *testing.T) {
	for _, recs := range [][]record.Record{nil, sampleRecords(), sampleRecords()[:1]} {
		got, err := DecodeFrame(EncodeFrame(recs))
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 && len(got) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, recs) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, recs)
		}
	}
}

func TestEncodedSizeIsAnUpperBound(t *testing.T) {
	for _, r := range sampleRecords() {
		if n := len(AppendRecord(nil, r)); n > EncodedSize(r) {
			t.Errorf("%v: encoded %d bytes > EncodedSize %d", r, n, EncodedSize(r))
		}
	}
}

func TestDecodeFrameRejectsCorruption(t *testing.T) {
	good := EncodeFrame(sampleRecords())
	cases := map[string][]byte{
		"empty":     nil,
		"bad magic": append([]byte("XX"), good[2:]...),
		"version":   append([]byte{'W', 'F', 9}, good[3:]...),
		"truncated": good[:len(good)-3],
		"trailing":  append(append([]byte{}, good...), 0),
		"bad kind":  {'W', 'F', 2, 1, 99},
		"huge len":  {'W', 'F', 2, 1, byte(record.Data), 0xff, 0xff, 0xff, 0x7f},
	}
	for name, data := range cases {
		if _, err := DecodeFrame(data); !errors.Is(err, ErrCorruptFrame) {
			t.Errorf("%s: err = %v, want ErrCorruptFrame", name, err)
		}
	}
}

func FuzzDecodeFrame(f *testing.F) {
	f.Add(EncodeFrame(sampleRecords()))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := DecodeFrame(data)
		if err != nil {
			return
		}
		again, err := DecodeFrame(EncodeFrame(recs))
		if err != nil || len(again) != len(recs) {
			t.Fatalf("re-encode of a decodable frame failed: %v", err)
		}
	})
}
