package window

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/weirflow/weir/pkg/record"
)

func valued(v string) record.Record { return record.Record{ID: "x", Value: []byte(v)} }

// fold adds the values in order, then renders the result.
func fold(t *testing.T, a Aggregator, values ...string) []byte {
	t.Helper()
	var acc []byte
	for _, v := range values {
		var err error
		if acc, err = a.Add(acc, valued(v)); err != nil {
			t.Fatalf("%s.Add(%s): %v", a.Name(), v, err)
		}
	}
	return acc
}

func result(t *testing.T, a Aggregator, acc []byte) string {
	t.Helper()
	r, err := a.Result(acc)
	if err != nil {
		t.Fatalf("%s.Result: %v", a.Name(), err)
	}
	return string(r)
}

func TestAggregators(t *testing.T) {
	values := []string{`{"n":3}`, `{"n":-7}`, `{"n": 12 , "m":"x"}`, `{"n":0}`}
	for _, tc := range []struct {
		agg        Aggregator
		name       string
		empty, all string
	}{
		{Count(), "count", `{"count":0}`, `{"count":4}`},
		{Sum("n"), "sum(n)", `{"sum":0,"count":0}`, `{"sum":8,"count":4}`},
		{MaxBy("n"), "max(n)", `{"max":null,"count":0}`, `{"max":12,"count":4}`},
	} {
		a := tc.agg
		if a.Name() != tc.name {
			t.Errorf("Name() = %s, want %s", a.Name(), tc.name)
		}
		if got := result(t, a, nil); got != tc.empty {
			t.Errorf("%s of nothing = %s, want %s", a.Name(), got, tc.empty)
		}
		if got := result(t, a, fold(t, a, values...)); got != tc.all {
			t.Errorf("%s = %s, want %s", a.Name(), got, tc.all)
		}
		// Merge agrees with Add over every split, and nil is its identity.
		for i := 0; i <= len(values); i++ {
			x, y := fold(t, a, values[:i]...), fold(t, a, values[i:]...)
			m, err := a.Merge(x, y)
			if err != nil {
				t.Fatal(err)
			}
			if got := result(t, a, m); got != tc.all {
				t.Errorf("%s: Merge of split %d = %s, want %s", a.Name(), i, got, tc.all)
			}
			if m2, _ := a.Merge(y, x); result(t, a, m2) != tc.all {
				t.Errorf("%s: Merge is not commutative at split %d", a.Name(), i)
			}
		}
	}
}

func TestAggregatorsRejectBadValues(t *testing.T) {
	for _, v := range []string{`not json`, `[1]`, `{"m":1}`, `{"n":"7"}`, `{"n":1.5}`, `{"n":null}`, `{"n":99999999999999999999}`} {
		for _, a := range []Aggregator{Sum("n"), MaxBy("n")} {
			if _, err := a.Add(nil, valued(v)); !errors.Is(err, ErrValue) {
				t.Errorf("%s.Add(%s) = %v, want ErrValue", a.Name(), v, err)
			}
		}
	}
	// Count reads no field: any value counts.
	if _, err := Count().Add(nil, valued(`not json`)); err != nil {
		t.Errorf("Count rejected a value: %v", err)
	}
	s := Sum("n")
	acc := fold(t, s, `{"n":9223372036854775807}`)
	if _, err := s.Add(acc, valued(`{"n":1}`)); !errors.Is(err, ErrValue) {
		t.Errorf("overflowing sum: %v, want ErrValue", err)
	}
}

func TestAggregatorsRejectCorruptAccumulators(t *testing.T) {
	for _, a := range []Aggregator{Count(), Sum("n"), MaxBy("n")} {
		if _, err := a.Result([]byte{0xff}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s.Result(corrupt) = %v, want ErrCorrupt", a.Name(), err)
		}
		if _, err := a.Merge([]byte{0x01, 0x02, 0x03, 0x04}, nil); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s.Merge(corrupt) = %v, want ErrCorrupt", a.Name(), err)
		}
	}
}

func TestPaneEncoding(t *testing.T) {
	p := Pane{
		Window:  span{60_000, 120_000}.window(),
		Key:     "user-7",
		Info:    PaneInfo{Index: 2, Timing: OnTime, Final: true},
		Version: 4,
		Kind:    Retract,
		Value:   []byte(`{"count":3}`),
	}
	b, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"window":{"start":"1970-01-01T00:01:00.000Z","end":"1970-01-01T00:02:00.000Z"},"key":"user-7",` +
		`"pane":{"index":2,"timing":"ON_TIME","final":true},"version":4,"kind":"retract","value":{"count":3}}`
	if string(b) != want {
		t.Errorf("Encode:\n got %s\nwant %s", b, want)
	}
	got, err := DecodePane(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p) {
		t.Errorf("round trip: %+v, want %+v", got, p)
	}
	if id, want := p.ID(), "user-7|1970-01-01T00:01:00.000Z|1970-01-01T00:02:00.000Z|v4|retract"; id != want {
		t.Errorf("ID = %s, want %s", id, want)
	}
	r, err := p.Record()
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != record.Data || r.ID != p.ID() || string(r.Key) != "user-7" || !r.Time.Equal(time.UnixMilli(119_999)) || !bytes.Equal(r.Value, b) {
		t.Errorf("Record = %+v", r)
	}
	for _, bad := range []string{
		`{"window":{"start":"x","end":"1970-01-01T00:02:00.000Z"}}`,
		`{"pane":{"timing":"SOON"}}`,
		`{"kind":"upsert"}`,
		`{"extra":1}`,
		`[]`,
	} {
		if _, err := DecodePane([]byte(bad)); err == nil {
			t.Errorf("DecodePane(%s) succeeded", bad)
		}
	}
	if _, err := (Pane{Info: PaneInfo{Timing: 9}}).Encode(); err == nil {
		t.Error("Encode of an invalid timing succeeded")
	}
}

// TestPaneCodecAgreesWithEncodingJSON checks the hand-written codec against
// encoding/json: what Encode writes, encoding/json reads as the same pane,
// and what encoding/json writes, DecodePane reads as the same pane — keys
// with quotes, escapes, markup and bytes that are not UTF-8 included.
func TestPaneCodecAgreesWithEncodingJSON(t *testing.T) {
	for _, key := range []string{"", "user-7", `a"b\c`, "<b>&amp;</b>", "tab\tnew\nline", "é€😀", "bad\xffbyte", "\x00"} {
		p := Pane{
			Window:  span{-60_000, 1_700_000_000_123}.window(),
			Key:     key,
			Info:    PaneInfo{Index: 1 << 40, Timing: Late},
			Version: 1<<64 - 1,
			Kind:    Insert,
			Value:   []byte(`{"max":-3,"names":["x","y"]}`),
		}
		mine, err := p.Encode()
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range [][]byte{mine, theirs} {
			got, err := DecodePane(b)
			if err != nil {
				t.Fatalf("DecodePane(%s): %v", b, err)
			}
			var want Pane
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatalf("json.Unmarshal(%s): %v", b, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: DecodePane %+v, encoding/json %+v", b, got, want)
			}
			if utf8.ValidString(key) && got.Key != key {
				t.Errorf("%s: key %q, want %q", b, got.Key, key)
			}
		}
	}
	// Members in another order, spaces, escaped names and a value spread
	// over lines: read, and the value compacted again on the way out.
	b := []byte(`{ "value" : { "count" : 3 },"kind":"insert","version":2,` +
		`"pane":{"final":false,"timing":"EARLY","index":0},"key":"k","\u0077indow":{"end":"1970-01-01T00:02:00Z","start":"1970-01-01T00:01:00Z"} }`)
	p, err := DecodePane(b)
	if err != nil {
		t.Fatal(err)
	}
	if p.Key != "k" || p.Version != 2 || p.Info.Timing != Early || !p.Window.End.Equal(time.UnixMilli(120_000)) {
		t.Errorf("DecodePane = %+v", p)
	}
	if out, err := p.Encode(); err != nil || !bytes.Contains(out, []byte(`"value":{"count":3}}`)) {
		t.Errorf("Encode = %s, %v", out, err)
	}
	for _, bad := range []string{
		`{"key":"a","key":"b"}`,
		`{"key":"a"} {}`,
		`{"key":1}`,
		`{"version":-1}`,
		`{"version":1.5}`,
		`{"pane":{"final":"yes"}}`,
		`{"pane":{"other":1}}`,
		`{"window":{"start":"1970-01-01T00:01:00Z","end":"1970-01-01T00:02:00Z","step":1}}`,
		`{"value":}`,
		`{"key":"a"`,
	} {
		if _, err := DecodePane([]byte(bad)); err == nil {
			t.Errorf("DecodePane(%s) succeeded", bad)
		}
	}
	if _, err := (Pane{Value: []byte(`{"a":`)}).Encode(); err == nil {
		t.Error("Encode of a value that is not JSON succeeded")
	}
	// A value weir carries without reading goes through as written —
	// names given twice and escapes included — as with encoding/json; a
	// key of bytes that are not UTF-8 reads as encoding/json reads it.
	odd := Pane{Key: "k", Value: []byte(`{"a":1,"a":"\u00e9"}`)}
	out, err := odd.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodePane(out)
	if err != nil || string(back.Value) != `{"a":1,"a":"\u00e9"}` {
		t.Errorf("a value with a name given twice: %s, %v (encoded %s)", back.Value, err, out)
	}
	raw := bytes.Replace(out, []byte(`"key":"k"`), []byte("\"key\":\"k\xff\""), 1)
	var want Pane
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if got, err := DecodePane(raw); err != nil || got.Key != want.Key || got.Key != "k\uFFFD" {
		t.Errorf("a key that is not UTF-8: %q, %v; encoding/json reads %q", got.Key, err, want.Key)
	}
}

func TestWinStateEncoding(t *testing.T) {
	for _, ws := range []winState{
		{},
		{late: true, index: 3, version: 7, count: 2, first: -5, acc: []byte{1, 2}, last: []byte(`{"count":1}`)},
		{index: 1 << 40, version: 1 << 41, count: 1, first: 1 << 62, acc: bytes.Repeat([]byte{9}, 300)},
		{last: []byte{}},
	} {
		got, err := decodeWinState(ws.encode())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, ws) {
			t.Errorf("round trip: %+v, want %+v", got, ws)
		}
	}
	full := (&winState{late: true, index: 3, version: 7, count: 2, first: 9, acc: []byte{1, 2}, last: []byte("x")}).encode()
	for i := range len(full) {
		if _, err := decodeWinState(full[:i]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("truncated to %d bytes: %v, want ErrCorrupt", i, err)
		}
	}
	if _, err := decodeWinState(append(full, 0)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("trailing byte: %v, want ErrCorrupt", err)
	}
}

func TestSubKeysAndTimerNames(t *testing.T) {
	spans := []span{globalSpan, {-20, -10}, {-10, 0}, {-10, 5}, {0, 10}, {10, globalSpan.end}}
	for i, sp := range spans {
		got, err := parseSubKey(subKey(sp))
		if err != nil || got != sp {
			t.Errorf("sub-key round trip of %v: %v, %v", sp, got, err)
		}
		for _, p := range []byte{purposeOnTime, purposeGC, purposeTrigger} {
			s, purpose, err := parseTimerName(timerName(sp, p))
			if err != nil || s != sp || purpose != p {
				t.Errorf("timer name round trip of %v %c: %v %c %v", sp, p, s, purpose, err)
			}
		}
		// Sub-keys and timer names sort in window order, which is how the
		// runtime orders a key's timers due at the same time.
		if i > 0 {
			prev := spans[i-1]
			if bytes.Compare(subKey(prev), subKey(sp)) >= 0 || strings.Compare(timerName(prev, purposeGC), timerName(sp, purposeOnTime)) >= 0 {
				t.Errorf("%v does not sort before %v", prev, sp)
			}
		}
	}
	for _, bad := range []string{"", "ping", strings.Repeat("z", 32) + "e", timerName(span{0, 1}, 'x')} {
		if _, _, err := parseTimerName(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("parseTimerName(%q) = %v, want ErrCorrupt", bad, err)
		}
	}
}
