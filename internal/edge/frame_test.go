package edge

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/weirflow/weir/pkg/record"
)

func sampleRecords() []record.Record {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 123456789, time.UTC)
	return []record.Record{
		{Kind: record.Data, ID: "e-1", Key: []byte("k1"), Producer: "gen", Time: t0,
			At: record.Coordinate{Stream: "NEXMARK", Subject: "nexmark.events.0", Seq: 7}, Value: []byte(`{"a":1}`),
			Trace: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Tenant: "acme"},
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

// TestAFrameWithoutTenantsIsVersion3: a frame none of whose records has a
// tenant is written as the build before tenants wrote it, so that build
// reads it after a rollback; one with a tenant is version 4.
func TestAFrameWithoutTenantsIsVersion3(t *testing.T) {
	recs := sampleRecords()
	if v := EncodeFrame(recs)[2]; v != frameVersion {
		t.Errorf("a frame with a tenant is version %d, want %d", v, frameVersion)
	}
	recs[0].Tenant = ""
	frame := EncodeFrame(recs)
	if frame[2] != frameVersionNoTenant {
		t.Fatalf("a frame without tenants is version %d, want %d", frame[2], frameVersionNoTenant)
	}
	got, err := DecodeFrame(frame)
	if err != nil || !reflect.DeepEqual(got, recs) {
		t.Fatalf("round trip of version 3: %v\n got %+v\nwant %+v", err, got, recs)
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

// FuzzDecodeFrame: any bytes either fail to decode with ErrCorruptFrame or
// decode to records that encode and decode again to the same records —
// identity, time, coordinate, value and trace unchanged.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(EncodeFrame(sampleRecords()))
	f.Add(EncodeFrame([]record.Record{
		{Kind: record.Data, ID: "old", Time: time.Date(1442, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Kind: record.Watermark, Time: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Kind: record.Data, ID: "a\xff ", Key: []byte{0, 0xff}},
	}))
	f.Add([]byte{'W', 'F', 2, 1, byte(record.Watermark), 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01})
	f.Add([]byte{'W', 'F', 3, 1, byte(record.Watermark), 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := DecodeFrame(data)
		if err != nil {
			if !errors.Is(err, ErrCorruptFrame) {
				t.Fatalf("error %v does not wrap ErrCorruptFrame", err)
			}
			return
		}
		again, err := DecodeFrame(EncodeFrame(recs))
		if err != nil || len(again) != len(recs) {
			t.Fatalf("re-encode of a decodable frame failed: %v", err)
		}
		for i := range recs {
			if d := recordDiff(recs[i], again[i]); d != "" {
				t.Fatalf("record %d changed in a round trip: %s", i, d)
			}
		}
	})
}

// recordDiff names the first field in which two records differ.
func recordDiff(a, b record.Record) string {
	switch {
	case a.Kind != b.Kind:
		return "kind"
	case a.ID != b.ID:
		return "id"
	case !bytes.Equal(a.Key, b.Key):
		return "key"
	case a.Producer != b.Producer:
		return "producer"
	case !a.Time.Equal(b.Time) || a.Time.IsZero() != b.Time.IsZero():
		return "time " + record.FormatTime(a.Time) + " vs " + record.FormatTime(b.Time)
	case a.Epoch != b.Epoch:
		return "epoch"
	case a.At != b.At:
		return "source"
	case !bytes.Equal(a.Value, b.Value):
		return "value"
	case a.Trace != b.Trace:
		return "trace"
	}
	return ""
}

// TestFrameTimesAreExact is the regression test of times that Unix
// nanoseconds cannot hold: an event 584 years in the past used to wrap
// into the present, and one of year 3000 into 1970-something.
func TestFrameTimesAreExact(t *testing.T) {
	times := []time.Time{
		{},
		time.Date(1442, 3, 1, 12, 0, 0, 0, time.UTC),
		time.Date(1677, 9, 21, 0, 12, 43, 145224191, time.UTC),  // one ns before int64 nanoseconds begin
		time.Date(2262, 4, 11, 23, 47, 16, 854775808, time.UTC), // one ns after they end
		time.Date(3000, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(2026, 12, 1, 12, 0, 0, 123456789, time.UTC),
	}
	var recs []record.Record
	for i, tm := range times {
		recs = append(recs,
			record.Record{Kind: record.Data, ID: strconv.Itoa(i), Time: tm},
			record.Record{Kind: record.Watermark, Time: tm})
	}
	got, err := DecodeFrame(EncodeFrame(recs))
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		if !got[i].Time.Equal(recs[i].Time) || got[i].Time.IsZero() != recs[i].Time.IsZero() {
			t.Errorf("record %d: time %s came back as %s", i, record.FormatTime(recs[i].Time), record.FormatTime(got[i].Time))
		}
	}
}

// TestVersion2FramesStillDecode: an edge written before frame version 3
// (times in Unix nanoseconds) is read after an upgrade.
func TestVersion2FramesStillDecode(t *testing.T) {
	tm := time.Date(2026, 12, 1, 12, 0, 0, 5, time.UTC)
	// version 2, one data record: id "a", no key or producer, time, no
	// source, seq 0, no value or trace; then a watermark with the zero time.
	v2 := []byte{'W', 'F', 2, 2, byte(record.Data), 1, 'a', 0, 0}
	v2 = binary.AppendVarint(v2, tm.UnixNano())
	v2 = append(v2, 0, 0, 0, 0, 0, byte(record.Watermark))
	v2 = binary.AppendVarint(v2, math.MinInt64)
	got, err := DecodeFrame(v2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "a" || !got[0].Time.Equal(tm) || !got[1].Time.IsZero() {
		t.Fatalf("decoded %+v", got)
	}
}

// TestVersion3FramesStillDecode: an edge written before frame version 4
// (no tenant) is read after an upgrade, its records without a tenant.
func TestVersion3FramesStillDecode(t *testing.T) {
	// version 3, one data record: id "a", no key or producer, time 0 s
	// 0 ns, no source, seq 0, no value or trace.
	v3 := []byte{'W', 'F', 3, 1, byte(record.Data), 1, 'a', 0, 0, 0, 0, 0, 0, 0, 0, 0}
	got, err := DecodeFrame(v3)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != "a" || got[0].Tenant != "" || !got[0].Time.Equal(time.Unix(0, 0)) {
		t.Fatalf("decoded %+v", got)
	}
}

func TestEscapeHeaderIsInjective(t *testing.T) {
	ids := []string{"a", "a ", " a", "a\t", "a\r\n", "a\n", "a%20", "a%", "a\xff", "a\xfe", "a\ufffd", "café", "x/y.z", ""}
	seen := map[string]string{}
	for _, id := range ids {
		v := EscapeHeader(id)
		if prev, ok := seen[v]; ok {
			t.Errorf("%q and %q both escape to %q", prev, id, v)
		}
		seen[v] = id
		if v != strings.TrimSpace(v) || strings.ContainsAny(v, "\r\n") {
			t.Errorf("%q escapes to %q, which a header would change", id, v)
		}
		back, err := UnescapeHeader(v)
		if err != nil || back != id {
			t.Errorf("%q: unescape of %q gave %q, %v", id, v, back, err)
		}
	}
	if EscapeHeader("nexmark-gen/0-17") != "nexmark-gen/0-17" || EscapeHeader("café") != "café" {
		t.Error("ordinary IDs must read as they are")
	}
}

func TestIDPartIsBoundedAndDistinct(t *testing.T) {
	long := strings.Repeat("é", 300)
	forged := IDPart(long)
	short := forged // a producer who computed the long ID's part and sent it as an ID
	parts := map[string]string{}
	for _, id := range []string{long, long + "x", long[:len(long)-2] + "e", short, "a", strings.Repeat("%", 70), strings.Repeat("%", 71)} {
		p := IDPart(id)
		if len(p) > maxIDPart || !utf8.ValidString(p) || p != strings.TrimSpace(p) {
			t.Errorf("part of %.20q is %d bytes, valid UTF-8 %v", id, len(p), utf8.ValidString(p))
		}
		if prev, ok := parts[p]; ok {
			t.Errorf("%.30q and %.30q share the part %q", prev, id, p)
		}
		parts[p] = id
	}
}

func FuzzEscapeHeader(f *testing.F) {
	for _, s := range []string{"a", "a ", "a\r\n", "%", "%2", "\xff", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := EscapeHeader(s)
		if v != strings.TrimSpace(v) || strings.ContainsAny(v, "\r\n") || !utf8.ValidString(v) {
			t.Fatalf("%q escapes to %q, which a header would change", s, v)
		}
		back, err := UnescapeHeader(v)
		if err != nil || back != s {
			t.Fatalf("%q: round trip gave %q, %v", s, back, err)
		}
		if p := IDPart(s); len(p) > maxIDPart || (len(v) <= maxIDPart && p != v) || !utf8.ValidString(p) {
			t.Fatalf("IDPart(%q) = %q", s, p)
		}
	})
}

// FuzzStagedMessage: a staged output message read back from the state store
// either fails with ErrCorruptFrame or encodes and decodes again to the
// same message, its key and time unchanged.
func FuzzStagedMessage(f *testing.F) {
	for _, m := range []Message{
		{Subject: "weir.p.e.0", ID: "p.op/0.g1.e.0.1", Producer: "op/0", Generation: 1, Epoch: 2, Seq: 1, Records: 2, Data: EncodeFrame(sampleRecords())},
		{Subject: "weir.p.r.0", ID: "p.r.a%20", Producer: "op/0", Seq: 3, Records: 1, Data: []byte(`{}`), JSON: true, Key: []byte("k"),
			Time: time.Date(1442, 1, 1, 0, 0, 0, 0, time.UTC), Trace: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Erased: 7},
		{Subject: "weir.p.e.1", ID: "p.op/0.g1.e.1.1", Producer: "op/0", Generation: 1, Seq: 1, Records: 7, Data: EncodeFrame(sampleRecords()), Erased: 1 << 40},
		{Subject: "weir.p.r.0", ID: "p.r.b", Producer: "op/0", Seq: 4, Records: 1, Data: []byte(`{}`), JSON: true, Key: []byte("k"), Erasable: []string{"key.aa", "tenant.bb"}},
	} {
		b, _ := m.MarshalBinary()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Message
		if err := m.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, ErrCorruptFrame) {
				t.Fatalf("error %v does not wrap ErrCorruptFrame", err)
			}
			return
		}
		b, _ := m.MarshalBinary()
		var again Message
		if err := again.UnmarshalBinary(b); err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
		if !again.Time.Equal(m.Time) {
			t.Fatalf("time %s came back as %s", record.FormatTime(m.Time), record.FormatTime(again.Time))
		}
		again.Time, m.Time = time.Time{}, time.Time{}
		if !reflect.DeepEqual(again, m) {
			t.Fatalf("round trip changed %+v into %+v", m, again)
		}
	})
}
