package join_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/weirflow/weir/pkg/join"
	"github.com/weirflow/weir/pkg/record"
)

func newInterval(t testing.TB, lower, upper time.Duration) *join.Interval {
	t.Helper()
	j, err := join.NewInterval(lower, upper, fam, sideOf, combine)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func TestIntervalBoundsAreInclusive(t *testing.T) {
	for _, c := range []struct {
		lower, upper time.Duration
	}{
		{-2 * time.Second, 3 * time.Second},
		{time.Second, 4 * time.Second},
		{-4 * time.Second, -time.Second},
		{0, 0},
	} {
		lo, hi := c.lower.Milliseconds(), c.upper.Milliseconds()
		const l = 10_000
		rights := []struct {
			ms    int64
			match bool
		}{
			{l + lo - 1, false}, {l + lo, true}, {l + lo + 1, lo+1 <= hi},
			{l + hi - 1, hi-1 >= lo}, {l + hi, true}, {l + hi + 1, false},
		}
		for _, leftFirst := range []bool{true, false} {
			t.Run(fmt.Sprintf("[%v,%v]/leftFirst=%t", c.lower, c.upper, leftFirst), func(t *testing.T) {
				h := newHarness(t, newInterval(t, c.lower, c.upper))
				left := rec(join.Left, "L", "k", l)
				if leftFirst {
					h.mustProcess(left)
				}
				var ws []want
				for i, r := range rights {
					rr := rec(join.Right, fmt.Sprintf("R%d", i), "k", r.ms)
					h.mustProcess(rr)
					if r.match && leftFirst {
						ws = append(ws, want{"L+" + rr.ID, "k", later(left.Time, rr.Time)})
					}
				}
				if !leftFirst {
					h.mustProcess(left)
					// The left record meets the buffered rights in time order.
					for i, r := range rights {
						if r.match {
							ws = append(ws, want{fmt.Sprintf("L+R%d", i), "k", later(left.Time, at(r.ms))})
						}
					}
					slices.SortStableFunc(ws, func(a, b want) int { return a.time.Compare(b.time) })
				}
				checkOut(t, h.Out, ws)
			})
		}
	}
}

func TestIntervalStateIsRemovedOnceNothingCanMatch(t *testing.T) {
	h := newHarness(t, newInterval(t, -2*time.Second, 3*time.Second))
	h.mustProcess(rec(join.Left, "L", "k", 10_000))   // last partner 13 s
	h.mustProcess(rec(join.Right, "R", "k", 11_000))  // last partner 13 s
	h.mustProcess(rec(join.Right, "R2", "k", 20_000)) // last partner 22 s
	h.mustProcess(rec(join.Left, "M", "m", 5_000))    // last partner 8 s
	checkOut(t, h.Out, []want{{"L+R", "k", at(11_000)}})
	if got := h.keys(fam); got != 2 {
		t.Fatalf("live keys = %d, want 2", got)
	}

	h.advance(at(12_999))
	if got := h.entries(fam, []byte("k")); got != 3 {
		t.Fatalf("entries at 12.999 s = %d, want 3", got)
	}
	if got := h.keys(fam); got != 1 {
		t.Fatalf("live keys at 12.999 s = %d, want 1 (m retired at 8 s)", got)
	}
	h.advance(at(13_000))
	if got := h.entries(fam, []byte("k")); got != 1 {
		t.Fatalf("entries at 13 s = %d, want 1", got)
	}
	h.advance(at(22_000))
	if st := h.Store().Stats(); st.Keys[fam] != 0 || st.Timers != 0 {
		t.Fatalf("state left at 22 s: %d keys, %d timers", st.Keys[fam], st.Timers)
	}
	if len(h.Side) != 0 {
		t.Fatalf("side output %v", h.Side)
	}
}

func TestIntervalLateRecords(t *testing.T) {
	h := newHarness(t, newInterval(t, -2*time.Second, 3*time.Second))
	h.advance(at(10_000))
	h.mustProcess(rec(join.Left, "Llate", "k", 7_000))  // last partner 10 s = W
	h.mustProcess(rec(join.Right, "Rlate", "k", 8_000)) // last partner 10 s = W
	h.mustProcess(rec(join.Left, "L", "k", 7_001))      // last partner 10.001 s
	h.mustProcess(rec(join.Right, "R", "k", 8_001))     // last partner 10.001 s
	if got := sideIDs(h.Side); !slices.Equal(got, []string{"Llate", "Rlate"}) {
		t.Fatalf("side output %v, want Llate, Rlate", got)
	}
	mustContain(t, h.Side[0].Reason, "late left record: it can only match right records at or before 2025-03-01T00:00:10Z, the watermark is 2025-03-01T00:00:10Z")
	mustContain(t, h.Side[1].Reason, "late right record")
	checkOut(t, h.Out, []want{{"L+R", "k", at(8_001)}})

	// A record past its last partner time still meets the buffered records
	// that can match it, and is then neither buffered nor late.
	h.mustProcess(rec(join.Right, "R3", "k", 12_000)) // last partner 14 s
	h.advance(at(13_000))
	h.mustProcess(rec(join.Left, "L3", "k", 9_500)) // last partner 12.5 s
	checkOut(t, h.Out[1:], []want{{"L3+R3", "k", at(12_000)}})
	if len(h.Side) != 2 {
		t.Fatalf("side output %v", h.Side)
	}
	if got := h.entries(fam, []byte("k")); got != 1 {
		t.Fatalf("entries = %d, want 1 (R3)", got)
	}
}

func TestIntervalIgnoresRedelivery(t *testing.T) {
	h := newHarness(t, newInterval(t, 0, time.Second))
	h.mustProcess(rec(join.Left, "L", "k", 0))
	h.mustProcess(rec(join.Right, "R", "k", 500))
	h.mustProcess(rec(join.Right, "R", "k", 500))
	checkOut(t, h.Out, []want{{"L+R", "k", at(500)}})
}

// intervalOracle computes, by brute force over all pairs of the history,
// what the interval join must emit and side-output: a pair matches when
// lower <= r-l <= upper, and is emitted on its second record's arrival if
// the watermark then is still before the first record's last partner
// time. A record past its own last partner time on arrival that emits
// nothing is late.
func intervalOracle(evs []event, lower, upper int64) (out []want, late []string) {
	last := func(r record.Record) time.Time {
		ms := r.Time.UnixMilli()
		if s, _ := sideOf(r); s == join.Left {
			return time.UnixMilli(ms + upper)
		}
		return time.UnixMilli(ms - lower)
	}
	as := arrivals(evs)
	for bi, b := range as {
		sb, _ := sideOf(b.rec)
		var found []record.Record
		for _, a := range as[:bi] {
			sa, _ := sideOf(a.rec)
			if sa == sb || string(a.rec.Key) != string(b.rec.Key) || !b.wm.Before(last(a.rec)) {
				continue
			}
			l, r := a.rec, b.rec
			if sb == join.Left {
				l, r = r, l
			}
			if d := r.Time.UnixMilli() - l.Time.UnixMilli(); d >= lower && d <= upper {
				found = append(found, a.rec)
			}
		}
		slices.SortFunc(found, func(x, y record.Record) int {
			return cmp.Or(cmp.Compare(x.Time.UnixMilli(), y.Time.UnixMilli()), cmp.Compare(x.ID, y.ID))
		})
		for _, p := range found {
			l, r := p, b.rec
			if sb == join.Left {
				l, r = r, l
			}
			out = append(out, want{l.ID + "+" + r.ID, string(b.rec.Key), later(l.Time, r.Time)})
		}
		if len(found) == 0 && !b.wm.Before(last(b.rec)) {
			late = append(late, b.rec.ID)
		}
	}
	slices.Sort(late)
	return out, late
}

func TestIntervalMatchesOracle(t *testing.T) {
	for _, c := range []struct {
		lower, upper time.Duration
		grain        int64
	}{
		{-1500 * time.Millisecond, 800 * time.Millisecond, 1},
		{200 * time.Millisecond, 2 * time.Second, 1},
		{-2 * time.Second, -100 * time.Millisecond, 1},
		{0, 0, 250},
		{-time.Second, time.Second, 500},
	} {
		for seed := range uint64(4) {
			// Odd seeds run timers late: the output must not depend on it.
			lazy := seed%2 == 1
			t.Run(fmt.Sprintf("[%v,%v]/seed=%d/lazy=%t", c.lower, c.upper, seed, lazy), func(t *testing.T) {
				evs := history(rand.New(rand.NewPCG(seed, 29)), 400, 4, 40_000, c.grain)
				wantOut, wantLate := intervalOracle(evs, c.lower.Milliseconds(), c.upper.Milliseconds())
				if len(wantOut) == 0 || len(wantLate) == 0 {
					t.Fatalf("weak history: %d pairs, %d late", len(wantOut), len(wantLate))
				}
				h := newHarness(t, newInterval(t, c.lower, c.upper))
				h.lazy = lazy
				h.run(evs)
				checkOut(t, h.Out, wantOut)
				if got := sideIDs(h.Side); !slices.Equal(got, wantLate) {
					t.Fatalf("side output %v, want %v", got, wantLate)
				}
				h.lazy = false
				h.advance(at(1 << 30))
				if st := h.Store().Stats(); st.Keys[fam] != 0 || st.Timers != 0 {
					t.Fatalf("state left: %d keys, %d timers", st.Keys[fam], st.Timers)
				}
			})
		}
	}
}

// In order input — every record ahead of the watermark — joins every
// matching pair, whatever the watermark does.
func TestIntervalInOrderInputJoinsEveryPair(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	const lower, upper = -700, 300
	h := newHarness(t, newInterval(t, lower*time.Millisecond, upper*time.Millisecond))
	var recs []record.Record
	for i := range 300 {
		ts := int64(i*20) + rng.Int64N(10)
		s := join.Side(1 + rng.IntN(2))
		r := rec(s, fmt.Sprintf("%s%03d", s.String()[:1], i), "k", ts)
		h.mustProcess(r)
		recs = append(recs, r)
		h.advance(at(ts - 1))
	}
	pairs := 0
	for _, l := range recs {
		for _, r := range recs {
			d := r.Time.Sub(l.Time).Milliseconds()
			if l.Producer == "L" && r.Producer == "R" && d >= lower && d <= upper {
				pairs++
			}
		}
	}
	if len(h.Out) != pairs || len(h.Side) != 0 || pairs == 0 {
		t.Fatalf("emitted %d, side output %d; want %d pairs, none late", len(h.Out), len(h.Side), pairs)
	}
}

// A buffered record the watermark has retired does not match, even while
// its timer has yet to run.
func TestIntervalRetiredRecordsNeverMatch(t *testing.T) {
	h := newHarness(t, newInterval(t, -2*time.Second, 3*time.Second))
	h.mustProcess(rec(join.Right, "R", "k", 8_000)) // last partner 10 s
	h.lazy = true
	h.advance(at(10_000))
	h.mustProcess(rec(join.Left, "L", "k", 9_000)) // would match R
	checkOut(t, h.Out, nil)
	if got := h.entries(fam, []byte("k")); got != 2 {
		t.Fatalf("entries = %d, want 2 (R awaiting its timer, L)", got)
	}
	h.lazy = false
	h.advance(at(10_001))
	if got := h.entries(fam, []byte("k")); got != 1 {
		t.Fatalf("entries after the timer = %d, want 1 (L)", got)
	}
}
