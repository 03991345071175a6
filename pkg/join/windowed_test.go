package join_test

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/weirflow/weir/pkg/join"
	weiroperator "github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
)

const fam = "join"

func newWindowed(t testing.TB, size time.Duration) *join.Windowed {
	t.Helper()
	j, err := join.NewWindowed(size, fam, sideOf, combine)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func TestWindowedPairsOnceWhenTheWindowEnds(t *testing.T) {
	h := newHarness(t, newWindowed(t, 10*time.Second))
	h.mustProcess(rec(join.Right, "a2", "p1", 9_999))
	h.mustProcess(rec(join.Left, "p1", "p1", 1_000))
	h.mustProcess(rec(join.Right, "a1", "p1", 2_000))
	h.mustProcess(rec(join.Right, "a3", "p1", 10_000)) // next window
	h.mustProcess(rec(join.Left, "p2", "p2", 3_000))   // no auction
	h.mustProcess(rec(join.Right, "a1", "p1", 2_000))  // redelivered: stored once

	h.advance(at(9_998))
	checkOut(t, h.Out, nil)
	if got := h.entries(fam, []byte("p1")); got != 4 {
		t.Fatalf("entries of p1 = %d, want 4", got)
	}

	h.advance(at(9_999))
	checkOut(t, h.Out, []want{
		{"p1+a1", "p1", at(9_999)},
		{"p1+a2", "p1", at(9_999)},
	})
	if got := h.entries(fam, []byte("p1")); got != 1 {
		t.Fatalf("entries of p1 after firing = %d, want 1 (the next window's)", got)
	}
	if got := h.keys(fam); got != 1 {
		t.Fatalf("live keys = %d, want 1", got)
	}
	o := h.Out[0]
	if o.At != (record.Coordinate{Stream: "IN", Subject: "in.L", Seq: 1002}) || o.Producer != "" {
		t.Errorf("output source %s producer %q, want the left record's source", o.At, o.Producer)
	}

	h.advance(at(60_000))
	checkOut(t, h.Out[2:], nil) // a3 has no person
	if st := h.Store().Stats(); st.Keys[fam] != 0 || st.Timers != 0 {
		t.Fatalf("state left after all windows fired: %d keys, %d timers", st.Keys[fam], st.Timers)
	}
	if len(h.Side) != 0 {
		t.Fatalf("side output %v", h.Side)
	}
}

func TestWindowedLateRecordsGoToSideOutput(t *testing.T) {
	h := newHarness(t, newWindowed(t, 10*time.Second))
	h.mustProcess(rec(join.Left, "p1", "k", 1_000))
	h.advance(at(9_999))
	h.mustProcess(rec(join.Right, "a1", "k", 5_000))  // window fired
	h.mustProcess(rec(join.Right, "a2", "k", 10_000)) // next window, open
	h.mustProcess(rec(join.Left, "p2", "k", 19_000))
	if len(h.Side) != 1 || h.Side[0].Record.ID != "a1" {
		t.Fatalf("side output %v, want a1", h.Side)
	}
	reason := h.Side[0].Reason
	mustContain(t, reason, "window [2025-03-01T00:00:00Z, 2025-03-01T00:00:10Z)")
	mustContain(t, reason, "watermark 2025-03-01T00:00:09.999Z")
	h.advance(at(19_999))
	checkOut(t, h.Out, []want{{"p2+a2", "k", at(19_999)}})
}

func TestWindowedCombineErrorSideOutputsThePair(t *testing.T) {
	failing := func(l, r record.Record) (record.Record, error) {
		if r.ID == "bad" {
			return record.Record{}, errors.New("no reserve price")
		}
		return combine(l, r)
	}
	j, err := join.NewWindowed(time.Second, fam, sideOf, failing)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, j)
	h.mustProcess(rec(join.Left, "p", "k", 100))
	h.mustProcess(rec(join.Right, "bad", "k", 200))
	h.mustProcess(rec(join.Right, "good", "k", 300))
	h.advance(at(999))
	checkOut(t, h.Out, []want{{"p+good", "k", at(999)}})
	if len(h.Side) != 1 || h.Side[0].Record.ID != "p" {
		t.Fatalf("side output %v, want the left record of the failed pair", h.Side)
	}
	mustContain(t, h.Side[0].Reason, "p+bad")
	mustContain(t, h.Side[0].Reason, "no reserve price")
}

func TestRecordErrorsChangeNothing(t *testing.T) {
	w := newWindowed(t, time.Second)
	iv, err := join.NewInterval(-time.Second, time.Second, fam, sideOf, combine)
	if err != nil {
		t.Fatal(err)
	}
	neither := rec(join.Left, "x", "k", 5)
	neither.Producer = "?"
	noTime := rec(join.Left, "y", "k", 5)
	noTime.Time = time.Time{}
	for _, op := range []operator{w, iv} {
		h := newHarness(t, op)
		for _, c := range []struct {
			r     record.Record
			field string
			is    error
		}{{neither, "side", join.ErrSide}, {noTime, "time", join.ErrEventTime}} {
			err := h.Process(c.r)
			var re *join.RecordError
			var pe *weiroperator.PoisonError
			if !errors.As(err, &re) || re.Field != c.field || !errors.Is(err, c.is) || re.At != c.r.At ||
				!errors.As(err, &pe) || pe.Field != c.field {
				t.Fatalf("%T: process %s: %v, want a *RecordError for %s", op, c.r.ID, err, c.field)
			}
		}
		if st := h.Store().Stats(); st.Keys[fam] != 0 || st.Timers != 0 || len(h.Out)+len(h.Side) != 0 {
			t.Fatalf("%T: rejected records left state or output", op)
		}
	}
}

func TestConstructorsRejectBadArguments(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
	}{
		{"zero size", func() error { _, err := join.NewWindowed(0, fam, sideOf, combine); return err }()},
		{"sub-ms size", func() error { _, err := join.NewWindowed(time.Microsecond, fam, sideOf, combine); return err }()},
		{"no family", func() error { _, err := join.NewWindowed(time.Second, "", sideOf, combine); return err }()},
		{"no side", func() error { _, err := join.NewWindowed(time.Second, fam, nil, combine); return err }()},
		{"no combine", func() error { _, err := join.NewInterval(0, 0, fam, sideOf, nil); return err }()},
		{"lower > upper", func() error { _, err := join.NewInterval(time.Second, 0, fam, sideOf, combine); return err }()},
		{"sub-ms bound", func() error { _, err := join.NewInterval(0, time.Nanosecond, fam, sideOf, combine); return err }()},
	} {
		if !errors.Is(c.err, join.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, c.err)
		}
	}
}

// windowedOracle computes, by brute force over the whole history, what the
// windowed join must emit and side-output.
func windowedOracle(evs []event, size int64) (out []want, late []string) {
	type win struct {
		key  string
		last int64
	}
	groups := map[win][2][]record.Record{}
	for _, a := range arrivals(evs) {
		ts := a.rec.Time.UnixMilli()
		start := ts - ((ts%size)+size)%size
		w := win{string(a.rec.Key), start + size - 1}
		if !a.wm.Before(time.UnixMilli(w.last)) {
			late = append(late, a.rec.ID)
			continue
		}
		g := groups[w]
		s, _ := sideOf(a.rec)
		g[s-1] = append(g[s-1], a.rec)
		groups[w] = g
	}
	byRec := func(a, b record.Record) int {
		return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.ID, b.ID))
	}
	var fired [][]want
	for w, g := range groups {
		slices.SortFunc(g[0], byRec)
		slices.SortFunc(g[1], byRec)
		var ws []want
		for _, l := range g[0] {
			for _, r := range g[1] {
				ws = append(ws, want{l.ID + "+" + r.ID, w.key, time.UnixMilli(w.last)})
			}
		}
		if len(ws) > 0 {
			fired = append(fired, ws)
		}
	}
	// Windows fire in timer order: max timestamp, key group, key.
	slices.SortFunc(fired, func(a, b []want) int { return compareWant(a[0], b[0]) })
	for _, ws := range fired {
		out = append(out, ws...)
	}
	slices.Sort(late)
	return out, late
}

func TestWindowedMatchesOracle(t *testing.T) {
	for _, size := range []time.Duration{time.Second, 5 * time.Second} {
		for seed := range uint64(4) {
			t.Run(fmt.Sprintf("size=%v/seed=%d", size, seed), func(t *testing.T) {
				evs := history(rand.New(rand.NewPCG(seed, 17)), 400, 5, 60_000, 1)
				wantOut, wantLate := windowedOracle(evs, size.Milliseconds())
				if len(wantOut) == 0 || len(wantLate) == 0 {
					t.Fatalf("weak history: %d pairs, %d late", len(wantOut), len(wantLate))
				}
				h := newHarness(t, newWindowed(t, size))
				h.run(evs)
				h.advance(at(1 << 30))
				checkOut(t, h.Out, wantOut)
				if got := sideIDs(h.Side); !slices.Equal(got, wantLate) {
					t.Fatalf("side output %v, want %v", got, wantLate)
				}
				if st := h.Store().Stats(); st.Keys[fam] != 0 || st.Timers != 0 {
					t.Fatalf("state left: %d keys, %d timers", st.Keys[fam], st.Timers)
				}
			})
		}
	}
}

func TestWindowedRejectsForeignTimers(t *testing.T) {
	h := newHarness(t, newWindowed(t, time.Second))
	err := h.FireTimer(state.Timer{Domain: state.EventTime, Time: at(0), Key: []byte("k"), Name: "gc"})
	if !errors.Is(err, join.ErrCorrupt) {
		t.Fatalf("foreign timer: %v, want ErrCorrupt", err)
	}
}
