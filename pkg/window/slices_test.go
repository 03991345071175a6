package window

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/weirflow/weir/pkg/state"
)

// slicedSpec draws a spec whose sliding windows are kept as slices: k of
// 2 to 5 slices, no allowed lateness, no early trigger, any accumulation.
func slicedSpec(rng *rand.Rand) Spec {
	slide := []time.Duration{time.Second, 2 * time.Second, 1500 * time.Millisecond}[rng.IntN(3)]
	return Spec{Kind: Sliding, Slide: slide, Size: slide * time.Duration(2+rng.IntN(4)), OnTime: true,
		Accumulation: Accumulation(rng.IntN(3))}
}

// TestSlicedWindows runs random scripts through sliding windows kept as
// slices: the panes and side output are Evaluate's, in the same order (so
// also the window-by-window operator's), no timer is stray or missing after
// any step (driver.checkTimers), and lazy timers change no final value.
func TestSlicedWindows(t *testing.T) {
	n := uint64(300)
	if testing.Short() {
		n = 60
	}
	for seed := uint64(1); seed <= n; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x511ce))
		spec := slicedSpec(rng)
		agg := []Aggregator{Count(), MaxBy("n")}[rng.IntN(2)]
		if d := newDriver(t, spec, agg); !d.op.sliced || d.op.SchemaVersion() != 2 {
			t.Fatalf("spec %+v with %s is not kept as slices", spec, agg.Name())
		}
		script := randomScript(rng, spec)
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			panes, _ := runBoth(t, spec, agg, script)
			checkInvariants(t, spec, panes)
			lateTimersAgree(t, seed, rng, spec, agg)
		})
		if !ok {
			t.Logf("seed %d: spec %+v, agg %s, script:\n%s", seed, spec, agg.Name(), describeScript(script))
			return
		}
	}
}

// TestWhatIsSliced: only specs whose one pane is the final ON_TIME pane,
// with an aggregator whose merge is exact and cannot fail, are kept as
// slices; the rest stay window by window, at state schema version 1.
func TestWhatIsSliced(t *testing.T) {
	base := Spec{Kind: Sliding, Size: 10 * time.Second, Slide: 2 * time.Second, OnTime: true}
	cases := []struct {
		name   string
		change func(*Spec)
		agg    Aggregator
		sliced bool
	}{
		{"count", func(*Spec) {}, Count(), true},
		{"max", func(*Spec) {}, MaxBy("n"), true},
		{"a hot key's part, counted", func(*Spec) {}, Partial(Count()), true},
		{"a hot key's part, summed", func(*Spec) {}, Partial(Sum("n")), false},
		{"retracting", func(s *Spec) { s.Accumulation = Retracting }, Count(), true},
		{"sum overflows at the record, not at the merge", func(*Spec) {}, Sum("n"), false},
		{"one slice per window", func(s *Spec) { s.Slide = s.Size }, Count(), false},
		{"allowed lateness", func(s *Spec) { s.AllowedLateness = time.Second }, Count(), false},
		{"early count", func(s *Spec) { s.EarlyCount = 3 }, Count(), false},
		{"early every", func(s *Spec) { s.EarlyEvery = time.Second }, Count(), false},
		{"tumbling", func(s *Spec) { s.Kind, s.Slide = Tumbling, 0 }, Count(), false},
	}
	for _, tc := range cases {
		spec := base
		tc.change(&spec)
		op, err := New(spec, tc.agg, testFamily)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if op.sliced != tc.sliced || op.SchemaVersion() != map[bool]int{false: 1, true: 2}[tc.sliced] {
			t.Errorf("%s: sliced %t, schema version %d; want sliced %t", tc.name, op.sliced, op.SchemaVersion(), tc.sliced)
		}
	}
}

// TestSlicedStateIsOneEntryPerKey: however many windows a key's records
// fall in, it keeps one state entry, and none once its windows have fired.
func TestSlicedStateIsOneEntryPerKey(t *testing.T) {
	spec := Spec{Kind: Sliding, Size: 10 * time.Second, Slide: 2 * time.Second, OnTime: true}
	d := newDriver(t, spec, Count())
	var script []Step
	for i := range 20 {
		r := testRecord(fmt.Sprintf("r%d", i), "a", time.Duration(i)*700*time.Millisecond, 1)
		script = append(script, Step{Record: &r})
	}
	if err := d.run(script); err != nil {
		t.Fatal(err)
	}
	entries := func() int {
		b := d.h.Store().NewBatch()
		defer b.Close()
		n := 0
		if err := b.Scope(0, []byte("a"), d.h.Now()).Map(testFamily).Range(func(k, _ []byte) bool {
			n++
			return bytes.Equal(k, sliceSubKey)
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := entries(); n != 1 {
		t.Fatalf("%d state entries for one key, want 1", n)
	}
	timers, err := d.h.Store().DueTimers(state.EventTime, GlobalEnd, 100)
	if err != nil || len(timers) != 11 { // windows starting at -8s, -6s … 12s
		t.Fatalf("%d timers (%v), want one per window: 11", len(timers), err)
	}
	if err := d.run([]Step{{Watermark: epoch(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if n := entries(); n != 0 {
		t.Fatalf("%d state entries after every window fired, want 0", n)
	}
	if len(d.panes()) != 11 {
		t.Fatalf("%d panes, want 11", len(d.panes()))
	}
}

// TestKeySlicesEncoding round-trips the entry and refuses what encode
// cannot have written.
func TestKeySlicesEncoding(t *testing.T) {
	ks := keySlices{fired: -4000, hasFired: true, slices: []slice{{start: -2000, acc: []byte{1}}, {start: 0}, {start: 2000, acc: []byte{3, 4}}}}
	b := ks.encode()
	got, err := decodeKeySlices(b)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(keySlices{fired: -4000, hasFired: true, slices: []slice{{-2000, []byte{1}}, {0, []byte{}}, {2000, []byte{3, 4}}}}) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	unordered := keySlices{slices: []slice{{start: 2000}, {start: 0}}}
	for name, bad := range map[string][]byte{
		"empty":        nil,
		"format":       append([]byte{9}, b[1:]...),
		"flags":        append([]byte{sliceFormat, 2}, b[2:]...),
		"truncated":    b[:len(b)-1],
		"trailing":     append(bytes.Clone(b), 0),
		"out of order": unordered.encode(),
	} {
		if _, err := decodeKeySlices(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}
