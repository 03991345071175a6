package q5

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/weirflow/weir/pkg/operator/operatortest"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
	"github.com/weirflow/weir/pkg/window"
)

// TestMaxEmitsTheHottest runs q5-max over count panes of one window: it
// emits, when the watermark passes the window, the highest count and the
// auctions that reach it, in order, as the JSON result it always did.
func TestMaxEmitsTheHottest(t *testing.T) {
	h := operatortest.New(t, Max{}, operatortest.Options{
		Families:  []state.Family{{Name: MaxFamily, Kind: state.KindValue, MaxKeys: 100}},
		KeyGroups: 1,
	})
	t.Cleanup(func() { _ = h.Close() })
	w := window.Window{Start: time.UnixMilli(1_000_000).UTC(), End: time.UnixMilli(1_010_000).UTC()}
	pane := func(auction string, count string) record.Record {
		p := window.Pane{Window: w, Key: auction, Info: window.PaneInfo{Timing: window.OnTime, Final: true}, Version: 1, Value: json.RawMessage(count)}
		r, err := p.Record()
		if err != nil {
			t.Fatal(err)
		}
		r.Key, r.Time = []byte(WindowKey(w)), w.MaxTimestamp()
		return r
	}
	for _, r := range []record.Record{
		pane("1003", `{"count":2}`), pane("1001", `{"count":5}`), pane("1002", `{"count":5}`),
		pane("1004", `{ "count" : 4 }`), // not as window.Count renders it: read by encoding/json
	} {
		if err := h.Process(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Process(pane("1005", `{"sum":3}`)); err == nil {
		t.Fatal("a pane without a count was taken")
	}
	if err := h.Advance(w.End); err != nil {
		t.Fatal(err)
	}
	const want = `{"window":{"start":"1970-01-01T00:16:40.000Z","end":"1970-01-01T00:16:50.000Z"},"count":5,"auctions":["1001","1002"]}`
	if len(h.Out) != 1 || string(h.Out[0].Value) != want {
		t.Fatalf("emitted %d results, the first %s; want %s", len(h.Out), value(h.Out), want)
	}
}

func value(rs []record.Record) string {
	if len(rs) == 0 {
		return "none"
	}
	return string(rs[0].Value)
}

// TestHotEncoding round-trips a window's state and refuses what
// encodeHot cannot have written.
func TestHotEncoding(t *testing.T) {
	h := Hot{Window: window.Window{Start: time.UnixMilli(-4000).UTC(), End: time.UnixMilli(6000).UTC()}, Count: 7, Auctions: []string{"a", "bc"}}
	b := encodeHot(h)
	got, err := decodeHot(b)
	if err != nil || got.Window != h.Window || got.Count != 7 || len(got.Auctions) != 2 || got.Auctions[1] != "bc" {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for name, bad := range map[string][]byte{"empty": nil, "truncated": b[:len(b)-1], "trailing": append(b[:len(b):len(b)], 0)} {
		if _, err := decodeHot(bad); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}
