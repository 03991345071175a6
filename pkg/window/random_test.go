package window

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

var (
	randomScripts = flag.Int("window.scripts", 400, "random scripts run by TestRandomScripts")
	randomSeed    = flag.Uint64("window.seed", 0, "if not 0, run only this seed of TestRandomScripts")
)

// randomSpec draws a valid spec: any kind, trigger set, lateness and
// accumulation, with window sizes small against the script's time span.
func randomSpec(rng *rand.Rand) Spec {
	pick := func(ds ...time.Duration) time.Duration { return ds[rng.IntN(len(ds))] }
	var s Spec
	switch rng.IntN(7) {
	case 0, 1:
		s.Kind, s.Size = Tumbling, pick(time.Second, 2*time.Second, 5*time.Second)
	case 2, 3:
		s.Kind, s.Slide = Sliding, pick(time.Second, 2*time.Second)
		s.Size = s.Slide * time.Duration(1+rng.IntN(4))
	case 4, 5:
		s.Kind, s.Gap = Session, pick(500*time.Millisecond, time.Second, 2*time.Second)
	default:
		s.Kind = Global
	}
	s.Accumulation = Accumulation(rng.IntN(3))
	if rng.IntN(3) == 0 {
		s.EarlyCount = 1 + rng.IntN(4)
	}
	if rng.IntN(3) == 0 {
		s.EarlyEvery = pick(300*time.Millisecond, time.Second, 2500*time.Millisecond)
	}
	if s.Kind == Global {
		if s.EarlyCount == 0 && s.EarlyEvery == 0 {
			s.EarlyCount = 1 + rng.IntN(4)
		}
		return s
	}
	s.OnTime = true
	s.AllowedLateness = pick(0, 0, time.Second, 3*time.Second, 1500*time.Millisecond+7*time.Nanosecond)
	if s.AllowedLateness > 0 {
		switch rng.IntN(4) {
		case 1:
			s.LateEach = true
		case 2:
			s.LateEvery = pick(400*time.Millisecond, 2*time.Second)
		case 3:
			s.LateEach, s.LateEvery = true, time.Second
		}
	}
	return s
}

// randomScript draws a script over a few keys: event times wander forward
// with out-of-order records, some behind the watermark; watermarks trail
// the event clock, sometimes landing exactly on, or one instant before, a
// window boundary shifted by the allowed lateness; processing time advances
// in small steps. The script ends with a watermark that closes everything.
func randomScript(rng *rand.Rand, spec Spec) []Step {
	keys := []string{"a", "b", "c", "d"}[:1+rng.IntN(4)]
	n := 30 + rng.IntN(120)
	var steps []Step
	clock := time.Duration(rng.IntN(10_000)) * time.Millisecond // event clock after the epoch
	var wm time.Duration
	for i := range n {
		var st Step
		roll := rng.IntN(100)
		if roll < 60 || roll >= 95 {
			clock += time.Duration(rng.IntN(700)) * time.Millisecond
			t := clock - time.Duration(rng.IntN(4000))*time.Millisecond + time.Duration(rng.IntN(1000))*time.Millisecond
			if rng.IntN(8) == 0 {
				t -= time.Duration(rng.IntN(int(5 * time.Second)))
			}
			if rng.IntN(4) == 0 {
				t += time.Duration(rng.IntN(int(time.Millisecond))) // sub-millisecond event times
			}
			r := testRecord(fmt.Sprintf("r%d", i), keys[rng.IntN(len(keys))], t, int64(rng.IntN(100)-50))
			st.Record = &r
		}
		if (roll >= 60 && roll < 80) || roll >= 97 {
			next := clock - time.Duration(rng.IntN(3000))*time.Millisecond
			if rng.IntN(3) == 0 {
				// A boundary: some window's maximum timestamp plus the
				// lateness, exactly or one instant before.
				next = next.Truncate(time.Second) - time.Millisecond + spec.AllowedLateness - time.Duration(rng.IntN(2))
			}
			if next > wm {
				wm = next
			}
			st.Watermark = epoch(wm)
		}
		if (roll >= 80 && roll < 95) || roll == 99 {
			st.Advance = time.Duration(1+rng.IntN(15)) * 100 * time.Millisecond
		}
		steps = append(steps, st)
	}
	return append(steps, Step{Advance: time.Hour, Watermark: epoch(clock + time.Hour)})
}

func randomAgg(rng *rand.Rand) Aggregator {
	return []Aggregator{Count(), MaxBy("n"), Sum("n")}[rng.IntN(3)]
}

// TestRandomScripts runs many seeded random scripts through the Operator on
// Pebble and through Evaluate, which must emit the same panes in the same
// order. A failure names its seed; -window.seed reruns it alone.
func TestRandomScripts(t *testing.T) {
	first, count := uint64(1), uint64(*randomScripts)
	if testing.Short() {
		count /= 4
	}
	if *randomSeed != 0 {
		first, count = *randomSeed, 1
	}
	for seed := first; seed < first+count; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		spec := randomSpec(rng)
		agg := randomAgg(rng)
		script := randomScript(rng, spec)
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			panes, _ := runBoth(t, spec, agg, script)
			checkInvariants(t, spec, panes)
		})
		if !ok {
			t.Logf("seed %d: spec %+v, agg %s, script:\n%s", seed, spec, agg.Name(), describeScript(script))
			return
		}
	}
}

// describeScript renders a script in the testdata format.
func describeScript(script []Step) string {
	var sb strings.Builder
	for _, st := range script {
		if st.Advance > 0 {
			fmt.Fprintf(&sb, "adv %v\n", st.Advance)
		}
		if r := st.Record; r != nil {
			fmt.Fprintf(&sb, "rec %s %v %s   # %s\n", r.Key, offset(r.Time), strings.TrimSuffix(strings.TrimPrefix(string(r.Value), `{"n":`), "}"), r.ID)
		}
		if !st.Watermark.IsZero() {
			fmt.Fprintf(&sb, "wm %v\n", offset(st.Watermark))
		}
	}
	return sb.String()
}

// TestLateTimers runs random scripts with a runtime that fires event-time
// timers only now and then. Panes come at other moments, but the operator
// brings each window it touches up to the watermark first, so it accepts
// and drops the same records, and every window closes with the same
// accumulated value as under prompt timers.
func TestLateTimers(t *testing.T) {
	for seed := uint64(1); seed <= 60; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x1a7e))
		spec := randomSpec(rng)
		if spec.Kind == Global {
			continue
		}
		spec.Accumulation = Accumulating
		lateTimersAgree(t, seed, rng, spec, Count())
	}
}

// lateTimersAgree runs a random script under lazy and prompt timers: the
// same records are accepted and dropped, and every window closes with the
// same value.
func lateTimersAgree(t *testing.T, seed uint64, rng *rand.Rand, spec Spec, agg Aggregator) {
	t.Helper()
	script := randomScript(rng, spec)
	want, wantSide := runBoth(t, spec, agg, script)
	d := newDriver(t, spec, agg)
	for i, st := range script {
		lazy := i < len(script)-1 && rng.IntN(4) != 0
		wm := st.Watermark
		if lazy {
			st.Watermark = time.Time{}
		}
		if err := d.step(st); err != nil {
			t.Fatalf("seed %d step %d: %v", seed, i, err)
		}
		if lazy {
			d.h.SetWatermark(wm) // the watermark moves, its timers do not fire
		}
	}
	if diff := diffRecords(d.side(), wantSide); diff != "" {
		t.Fatalf("seed %d: side outputs differ (- lazy, + prompt):\n%s", seed, diff)
	}
	got, wantFinal := finalValues(t, d.panes()), finalValues(t, want)
	for k, v := range wantFinal {
		if got[k] != v {
			t.Errorf("seed %d: window %v of %q closed with %q under late timers, %q under prompt ones", seed, Window{k.start, k.end}, k.key, got[k], v)
		}
	}
	if len(got) != len(wantFinal) {
		t.Errorf("seed %d: %d windows emitted under late timers, %d under prompt ones", seed, len(got), len(wantFinal))
	}
}
