package state

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func timerString(t Timer) string {
	return fmt.Sprintf("%d/%d/%s/%s", t.Time.UnixNano(), t.KeyGroup, t.Key, t.Name)
}

func timerStrings(ts []Timer) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = timerString(t)
	}
	return out
}

func TestDueTimers(t *testing.T) {
	s := openTest(t, testOptions(nil))
	at := func(n int64) time.Time { return time.Unix(0, n) }
	timers := []Timer{
		{Domain: EventTime, Time: at(10), KeyGroup: 5, Key: []byte("a"), Name: "x"},
		{Domain: EventTime, Time: at(10), KeyGroup: 2, Key: []byte("b"), Name: "x"},
		{Domain: EventTime, Time: at(10), KeyGroup: 2, Key: []byte("a"), Name: "y"},
		{Domain: EventTime, Time: at(10), KeyGroup: 2, Key: []byte("a"), Name: "x"},
		{Domain: EventTime, Time: at(0), KeyGroup: 9, Key: []byte("z"), Name: "zero"},
		{Domain: EventTime, Time: at(-5), KeyGroup: 15, Key: []byte("n"), Name: "neg"},
		{Domain: EventTime, Time: at(math.MinInt64), KeyGroup: 0, Key: nil, Name: "min"},
		{Domain: EventTime, Time: at(math.MaxInt64), KeyGroup: 0, Key: nil, Name: "max"},
		{Domain: EventTime, Time: at(20), KeyGroup: 0, Key: []byte("late"), Name: ""},
		{Domain: ProcessingTime, Time: at(1), KeyGroup: 1, Key: []byte("p"), Name: "p"},
		{Domain: ProcessingTime, Time: at(-1), KeyGroup: 14, Key: []byte("p"), Name: "p"},
	}
	commit(t, s, func(b *Batch) {
		for _, tm := range timers {
			must(t, b.SetTimer(tm))
			must(t, b.SetTimer(tm)) // idempotent
		}
	})
	if got := s.Stats().Timers; got != int64(len(timers)) {
		t.Fatalf("Stats().Timers = %d, want %d", got, len(timers))
	}
	for _, c := range []struct {
		name  string
		d     Domain
		upTo  time.Time
		limit int
		want  []string
	}{
		{"all event", EventTime, at(math.MaxInt64), 100, []string{
			"-9223372036854775808/0//min", "-5/15/n/neg", "0/9/z/zero",
			"10/2/a/x", "10/2/a/y", "10/2/b/x", "10/5/a/x", "20/0/late/", "9223372036854775807/0//max"}},
		{"beyond storable", EventTime, time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), 100, []string{
			"-9223372036854775808/0//min", "-5/15/n/neg", "0/9/z/zero",
			"10/2/a/x", "10/2/a/y", "10/2/b/x", "10/5/a/x", "20/0/late/", "9223372036854775807/0//max"}},
		{"up to zero inclusive", EventTime, at(0), 100, []string{"-9223372036854775808/0//min", "-5/15/n/neg", "0/9/z/zero"}},
		{"up to negative", EventTime, at(-1), 100, []string{"-9223372036854775808/0//min", "-5/15/n/neg"}},
		{"limit cuts ties by group key name", EventTime, at(15), 5, []string{
			"-9223372036854775808/0//min", "-5/15/n/neg", "0/9/z/zero", "10/2/a/x", "10/2/a/y"}},
		{"limit one", EventTime, at(15), 1, []string{"-9223372036854775808/0//min"}},
		{"limit zero", EventTime, at(15), 0, nil},
		{"before everything", EventTime, time.Time{}, 10, nil},
		{"processing", ProcessingTime, at(100), 10, []string{"-1/14/p/p", "1/1/p/p"}},
		{"processing none due", ProcessingTime, at(-2), 10, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := s.DueTimers(c.d, c.upTo, c.limit)
			must(t, err)
			if !slices.Equal(timerStrings(got), c.want) {
				t.Fatalf("DueTimers = %q\nwant %q", timerStrings(got), c.want)
			}
			for _, tm := range got {
				if tm.Domain != c.d {
					t.Fatalf("timer of domain %v", tm.Domain)
				}
			}
		})
	}

	// Deleting fired timers: the next call sees the rest.
	due, err := s.DueTimers(EventTime, at(10), 4)
	must(t, err)
	commit(t, s, func(b *Batch) {
		for _, tm := range due {
			must(t, b.DeleteTimer(tm))
			must(t, b.DeleteTimer(tm)) // idempotent
		}
		// A timer set and deleted in one batch leaves nothing.
		tm := Timer{Domain: EventTime, Time: at(1), KeyGroup: 3, Name: "ephemeral"}
		must(t, b.SetTimer(tm))
		must(t, b.DeleteTimer(tm))
	})
	got, err := s.DueTimers(EventTime, at(10), 100)
	must(t, err)
	if want := []string{"10/2/a/y", "10/2/b/x", "10/5/a/x"}; !slices.Equal(timerStrings(got), want) {
		t.Fatalf("after delete: %q, want %q", timerStrings(got), want)
	}
	if got := s.Stats().Timers; got != int64(len(timers)-4) {
		t.Fatalf("Stats().Timers = %d, want %d", got, len(timers)-4)
	}
}

func TestTimerErrors(t *testing.T) {
	s := openTest(t, testOptions(nil))
	b := s.NewBatch()
	defer b.Close()
	for _, c := range []struct {
		tm   Timer
		want error
	}{
		{Timer{Time: t0, KeyGroup: 16}, ErrKeyGroup},
		{Timer{Time: t0, KeyGroup: -1}, ErrKeyGroup},
		{Timer{Time: time.Time{}}, ErrTimeRange},
	} {
		if err := b.SetTimer(c.tm); !errors.Is(err, c.want) {
			t.Errorf("SetTimer(%+v) = %v, want %v", c.tm, err, c.want)
		}
		if err := b.DeleteTimer(c.tm); !errors.Is(err, c.want) {
			t.Errorf("DeleteTimer(%+v) = %v, want %v", c.tm, err, c.want)
		}
	}
	if err := b.SetTimer(Timer{Domain: 7, Time: t0}); err == nil {
		t.Error("SetTimer accepted domain 7")
	}
	// No timer is of domain 7: nothing is due, and no floor is asked.
	if due, err := b.DueTimers(7, t0, 10); err != nil || len(due) != 0 {
		t.Errorf("batch DueTimers(7) = %v, %v", due, err)
	}
	if due, err := s.DueTimers(7, t0, 10); err != nil || len(due) != 0 {
		t.Errorf("store DueTimers(7) = %v, %v", due, err)
	}
	// TakeTimer says whether the timer was there.
	tm := Timer{Time: t0, KeyGroup: 1, Key: []byte("k"), Name: "n"}
	must(t, b.SetTimer(tm))
	if ok, err := b.TakeTimer(tm); !ok || err != nil {
		t.Errorf("TakeTimer of a set timer = %v, %v", ok, err)
	}
	if ok, err := b.TakeTimer(tm); ok || err != nil {
		t.Errorf("TakeTimer of a taken timer = %v, %v", ok, err)
	}
}

// TestDueTimersRandom checks DueTimers against sorting all timers, over
// random timers spread across key groups with many equal times.
func TestDueTimersRandom(t *testing.T) {
	s := openTest(t, testOptions(nil))
	rng := rand.New(rand.NewPCG(1, 2))
	var all []Timer
	commit(t, s, func(b *Batch) {
		for i := range 400 {
			tm := Timer{
				Domain:   Domain(rng.IntN(2)),
				Time:     time.Unix(0, int64(rng.IntN(50)-25)),
				KeyGroup: rng.IntN(16),
				Key:      []byte{byte(rng.IntN(4))},
				Name:     fmt.Sprint(i),
			}
			all = append(all, tm)
			must(t, b.SetTimer(tm))
		}
	})
	for range 50 {
		d := Domain(rng.IntN(2))
		upTo := time.Unix(0, int64(rng.IntN(60)-30))
		limit := 1 + rng.IntN(60)
		var want []Timer
		for _, tm := range all {
			if tm.Domain == d && !tm.Time.After(upTo) {
				want = append(want, tm)
			}
		}
		slices.SortFunc(want, compareTimers)
		want = want[:min(limit, len(want))]
		got, err := s.DueTimers(d, upTo, limit)
		must(t, err)
		if !slices.Equal(timerStrings(got), timerStrings(want)) {
			t.Fatalf("DueTimers(%v, %v, %d) =\n%q\nwant\n%q", d, upTo, limit, timerStrings(got), timerStrings(want))
		}
	}
}

// TestAddTimer: a timer added without the lookup is registered, due and
// counted like one set, and HasTimer sees it in the batch and once
// committed; deleting it uncounts it.
func TestAddTimer(t *testing.T) {
	s := openTest(t, testOptions(nil))
	tm := Timer{Domain: EventTime, Time: time.Unix(0, 10), KeyGroup: 3, Key: []byte("k"), Name: "w"}
	commit(t, s, func(b *Batch) {
		if ok, err := b.HasTimer(tm); err != nil || ok {
			t.Fatalf("HasTimer before AddTimer: %t, %v", ok, err)
		}
		must(t, b.AddTimer(tm))
		if ok, err := b.HasTimer(tm); err != nil || !ok {
			t.Fatalf("HasTimer in the batch that added it: %t, %v", ok, err)
		}
	})
	if got := s.Stats().Timers; got != 1 {
		t.Fatalf("Stats().Timers = %d, want 1", got)
	}
	due, err := s.DueTimers(EventTime, time.Unix(0, 10), 10)
	if err != nil || len(due) != 1 || timerString(due[0]) != timerString(tm) {
		t.Fatalf("DueTimers = %v, %v", timerStrings(due), err)
	}
	commit(t, s, func(b *Batch) { must(t, b.DeleteTimer(tm)) })
	if got := s.Stats().Timers; got != 0 {
		t.Fatalf("Stats().Timers after delete = %d, want 0", got)
	}
}

// TestTimersAgainstAModel runs a random history of steps against a model
// of the timers: each step sets, adds and deletes timers, asks for due
// ones as the runtime does — with the watermark mostly between timers, so
// the floors answer, and sometimes past a burst at one time, fired in
// chunks and deleted — and commits or is discarded; between steps the
// store is reopened, or its key groups imported into a new store. Every
// answer of the batch and of the store must be the model's.
func TestTimersAgainstAModel(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runTimerModel(t, seed) })
	}
}

func runTimerModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	fs := vfs.NewMem()
	o := Options{FS: fs, KeyGroups: 8}
	dir := "db"
	s, err := Open(dir, o)
	must(t, err)
	defer func() { s.Close() }()
	id := func(tm Timer) string { return fmt.Sprint(tm.Domain, "/", timerString(tm)) }
	committed := map[string]Timer{}
	due := func(m map[string]Timer, d Domain, upTo time.Time, limit int) []string {
		var all []Timer
		for _, tm := range m {
			if tm.Domain == d && !tm.Time.After(upTo) {
				all = append(all, tm)
			}
		}
		slices.SortFunc(all, compareTimers)
		return timerStrings(all[:min(limit, len(all))])
	}
	newTimer := func(wm int) Timer {
		return Timer{Domain: Domain(rng.IntN(2)), Time: time.Unix(0, int64(wm+rng.IntN(40))),
			KeyGroup: rng.IntN(8), Key: []byte{byte(rng.IntN(6))}, Name: fmt.Sprint(rng.IntN(3))}
	}
	wm, fired := 0, 0
	for step := range 400 {
		switch rng.IntN(12) {
		case 0:
			must(t, s.Close())
			s, err = Open(dir, o)
			must(t, err)
		case 1:
			next := fmt.Sprintf("db%d", step)
			ns, err := Open(next, o)
			must(t, err)
			// Half the key groups, then a scan that learns the new
			// store's floors, then the other half.
			_, err = ns.Import(s, func(kg int) bool { return kg%2 == 0 })
			must(t, err)
			b := ns.NewBatch()
			_, err = b.DueTimers(Domain(rng.IntN(2)), time.Unix(0, int64(wm)), 100)
			must(t, err)
			must(t, b.Commit())
			_, err = ns.Import(s, func(kg int) bool { return kg%2 == 1 })
			must(t, err)
			must(t, s.Close())
			s, dir = ns, next
		}
		view := maps.Clone(committed)
		b := s.NewBatch()
		for range 1 + rng.IntN(8) {
			switch r := rng.IntN(10); {
			case r < 3:
				tm := newTimer(wm)
				must(t, b.SetTimer(tm))
				view[id(tm)] = tm
			case r < 4:
				tm := newTimer(wm)
				if _, ok := view[id(tm)]; !ok {
					must(t, b.AddTimer(tm))
					view[id(tm)] = tm
				}
			case r < 6:
				for _, tm := range view {
					must(t, b.DeleteTimer(tm))
					delete(view, id(tm))
					break
				}
			default:
				// The watermark moves; what is due fires, in chunks.
				wm += rng.IntN(12)
				d := Domain(rng.IntN(2))
				upTo := time.Unix(0, int64(wm))
				limit := 1 + rng.IntN(5)
				for {
					got, err := b.DueTimers(d, upTo, limit)
					must(t, err)
					if want := due(view, d, upTo, limit); !slices.Equal(timerStrings(got), want) {
						t.Fatalf("step %d: batch DueTimers(%v, %v, %d) =\n%q\nwant\n%q", step, d, upTo, limit, timerStrings(got), want)
					}
					if len(got) == 0 {
						break
					}
					for _, tm := range got {
						must(t, b.DeleteTimer(tm))
						delete(view, id(tm))
						fired++
					}
				}
			}
		}
		if rng.IntN(4) == 0 {
			b.Close()
		} else {
			must(t, b.Commit())
			committed = view
		}
		for d := range Domain(2) {
			upTo := time.Unix(0, int64(wm+rng.IntN(30)-10))
			got, err := s.DueTimers(d, upTo, 100)
			must(t, err)
			if want := due(committed, d, upTo, 100); !slices.Equal(timerStrings(got), want) {
				t.Fatalf("step %d: store DueTimers(%v, %v) =\n%q\nwant\n%q", step, d, upTo, timerStrings(got), want)
			}
		}
	}
	if fired < 100 {
		t.Fatalf("history fired only %d timers", fired)
	}
}
