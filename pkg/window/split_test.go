package window

import (
	"encoding/binary"
	"encoding/json"
	"testing"
	"time"

	"github.com/weirflow/weir/pkg/operator/operatortest"
	"github.com/weirflow/weir/pkg/record"
)

// TestMergeCombinesPartsOnTimeAndLate: the merge emits the sum of the
// parts' latest counts when the watermark passes the window, the new sum
// when a part's late pane replaces its last, and a window it first sees
// after the watermark passed it at once, as late.
func TestMergeCombinesPartsOnTimeAndLate(t *testing.T) {
	spec := Spec{Kind: Tumbling, Size: 10 * time.Second, OnTime: true, LateEach: true,
		Accumulation: Accumulating, AllowedLateness: time.Minute}
	m, err := NewMerge(spec, Count(), "merged")
	if err != nil {
		t.Fatal(err)
	}
	h := operatortest.New(t, m, operatortest.Options{})
	defer h.Close()
	base := time.Date(2025, 3, 1, 11, 0, 0, 0, time.UTC)
	part := func(w Window, part string, n uint64, version uint64) record.Record {
		t.Helper()
		v, err := Partial(Count()).Result(binary.AppendUvarint(nil, n))
		if err != nil {
			t.Fatal(err)
		}
		r, err := Pane{Window: w, Key: part, Version: version, Value: v}.Record()
		if err != nil {
			t.Fatal(err)
		}
		r.Key = []byte("k")
		return r
	}
	count := func(r record.Record) (uint64, Timing) {
		t.Helper()
		p, err := DecodePane(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		var v struct{ Count uint64 }
		if err := json.Unmarshal(p.Value, &v); err != nil {
			t.Fatal(err)
		}
		return v.Count, p.Info.Timing
	}
	w := Window{Start: base, End: base.Add(10 * time.Second)}
	h.MustProcess(part(w, "k\x1f0", 3, 1))
	h.MustProcess(part(w, "k\x1f1", 2, 1))
	if len(h.Out) != 0 {
		t.Fatalf("emitted %d panes before the watermark passed the window", len(h.Out))
	}
	if err := h.Advance(w.End.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if len(h.Out) != 1 {
		t.Fatalf("%d panes after the watermark passed, want the on-time one", len(h.Out))
	}
	if n, timing := count(h.Out[0]); n != 5 || timing != OnTime {
		t.Fatalf("on-time pane %d (%s), want 5 on time", n, timing)
	}
	h.MustProcess(part(w, "k\x1f1", 4, 2)) // part 1's late pane: its whole count
	if n, timing := count(h.Out[1]); n != 7 || timing != Late {
		t.Fatalf("late pane %d (%s), want 3+4 late", n, timing)
	}
	// A window first seen after the watermark passed it, within lateness.
	older := Window{Start: base.Add(-10 * time.Second), End: base}
	h.MustProcess(part(older, "k\x1f0", 1, 2))
	if len(h.Out) != 3 {
		t.Fatalf("%d panes: a late window's first part was not emitted at once", len(h.Out))
	}
	if n, timing := count(h.Out[2]); n != 1 || timing != Late {
		t.Fatalf("late window pane %d (%s), want 1 late", n, timing)
	}
}
