package state

import (
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// t0 is the processing time tests start from.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func testFamilies() []Family {
	return []Family{
		{Name: "v", Kind: KindValue, MaxKeys: 1000},
		{Name: "m", Kind: KindMap, MaxKeys: 1000},
		{Name: "l", Kind: KindList, MaxKeys: 1000},
		{Name: "vt", Kind: KindValue, TTL: time.Minute, MaxKeys: 1000},
		{Name: "mt", Kind: KindMap, TTL: time.Minute, MaxKeys: 1000},
		{Name: "lt", Kind: KindList, TTL: time.Minute, MaxKeys: 1000},
	}
}

func testOptions(fs vfs.FS) Options {
	return Options{FS: fs, Families: testFamilies(), KeyGroups: 16}
}

// openTest opens a store in dir "db" on fs and closes it when the test ends
// unless the test closed it.
func openTest(t testing.TB, o Options) *Store {
	t.Helper()
	if o.FS == nil {
		o.FS = vfs.NewMem()
	}
	s, err := Open("db", o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// commit runs fn in a batch and commits it.
func commit(t testing.TB, s *Store, fn func(b *Batch)) {
	t.Helper()
	b := s.NewBatch()
	defer b.Close()
	fn(b)
	if err := b.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestOptionsValidate(t *testing.T) {
	ok := Family{Name: "f", Kind: KindValue, MaxKeys: 1}
	with := func(fn func(*Family)) []Family {
		f := ok
		fn(&f)
		return []Family{f}
	}
	for _, c := range []struct {
		name string
		o    Options
		want string // substring of the error; "" for valid
	}{
		{"valid", Options{KeyGroups: 1, Families: []Family{ok}}, ""},
		{"no families", Options{KeyGroups: 256}, ""},
		{"max key groups", Options{KeyGroups: 1 << 15}, ""},
		{"zero key groups", Options{}, "KeyGroups 0"},
		{"too many key groups", Options{KeyGroups: 1<<15 + 1}, "KeyGroups"},
		{"empty name", Options{KeyGroups: 1, Families: with(func(f *Family) { f.Name = "" })}, "name is empty"},
		{"bad kind", Options{KeyGroups: 1, Families: with(func(f *Family) { f.Kind = 0 })}, "invalid kind"},
		{"kind too big", Options{KeyGroups: 1, Families: with(func(f *Family) { f.Kind = 9 })}, "invalid kind"},
		{"zero max keys", Options{KeyGroups: 1, Families: with(func(f *Family) { f.MaxKeys = 0 })}, "MaxKeys must be positive"},
		{"negative ttl", Options{KeyGroups: 1, Families: with(func(f *Family) { f.TTL = -1 })}, "negative TTL"},
		{"bad action", Options{KeyGroups: 1, Families: with(func(f *Family) { f.OnLimit = 7 })}, "invalid OnLimit"},
		{"duplicate", Options{KeyGroups: 1, Families: []Family{ok, ok}}, "declared twice"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.o.Validate()
			if c.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate = %v, want ErrInvalidOptions containing %q", err, c.want)
			}
			c.o.FS = vfs.NewMem()
			if _, err := Open("db", c.o); !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("Open = %v, want ErrInvalidOptions", err)
			}
		})
	}
}

func TestClosedStore(t *testing.T) {
	s := openTest(t, testOptions(nil))
	b := s.NewBatch()
	must(t, b.Scope(0, []byte("k"), t0).Value("v").Set([]byte("x")))
	must(t, s.Close())
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close = %v, want ErrClosed", err)
	}
	if err := b.Commit(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Commit after Close = %v, want ErrClosed", err)
	}
	b.Close()
	if _, _, err := s.Meta("x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Meta = %v, want ErrClosed", err)
	}
	if _, err := s.DueTimers(EventTime, t0, 10); !errors.Is(err, ErrClosed) {
		t.Fatalf("DueTimers = %v, want ErrClosed", err)
	}
	if _, err := s.Expire(t0, 10); !errors.Is(err, ErrClosed) {
		t.Fatalf("Expire = %v, want ErrClosed", err)
	}
	if err := s.Checkpoint("cp"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Checkpoint = %v, want ErrClosed", err)
	}
	b = s.NewBatch()
	if err := b.PutMeta("x", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("PutMeta on a batch of a closed store = %v, want ErrClosed", err)
	}
	b.Close()
	if st := s.Stats(); st.DiskBytes != 0 {
		t.Fatalf("Stats of a closed store: DiskBytes = %d", st.DiskBytes)
	}
}

func TestBatchDone(t *testing.T) {
	s := openTest(t, testOptions(nil))
	b := s.NewBatch()
	must(t, b.Commit())
	b.Close() // safe after Commit
	v := b.Scope(0, []byte("k"), t0).Value("v")
	for name, err := range map[string]error{
		"Commit":      b.Commit(),
		"Set":         v.Set([]byte("x")),
		"SetPosition": b.SetPosition("in", Position{}),
		"PutMeta":     b.PutMeta("x", nil),
		"StageOutput": b.StageOutput("1", nil),
		"SetTimer":    b.SetTimer(Timer{Time: t0}),
	} {
		if !errors.Is(err, ErrBatchDone) {
			t.Errorf("%s after Commit = %v, want ErrBatchDone", name, err)
		}
	}
	// The writer lock was released: a new batch starts.
	b2 := s.NewBatch()
	b2.Close()
	b2.Close()
}

func TestFormatVersionChecked(t *testing.T) {
	fs := vfs.NewMem()
	s := openTest(t, testOptions(fs))
	must(t, s.db.Set(metaKey(metaFormat, ""), []byte{99}, nil))
	must(t, s.Close())
	if _, err := Open("db", testOptions(fs)); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("Open = %v, want ErrIncompatible", err)
	}
}

func TestUndeclaredFamilyLogged(t *testing.T) {
	fs := vfs.NewMem()
	s := openTest(t, testOptions(fs))
	commit(t, s, func(b *Batch) { must(t, b.Scope(1, []byte("k"), t0).Value("v").Set([]byte("x"))) })
	must(t, s.Close())

	var logs strings.Builder
	o := testOptions(fs)
	o.Families = o.Families[1:] // "v" no longer declared
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	s = openTest(t, o)
	if !strings.Contains(logs.String(), "undeclared family") {
		t.Fatalf("no warning logged: %q", logs.String())
	}
	if _, ok := s.Stats().Keys["v"]; ok {
		t.Fatal("undeclared family in Stats")
	}
}

func TestConcurrentWritersSerialize(t *testing.T) {
	s := openTest(t, testOptions(nil))
	const writers, steps = 4, 25
	done := make(chan error, writers)
	for w := range writers {
		go func() {
			for i := range steps {
				b := s.NewBatch()
				m := b.Scope(0, []byte("shared"), t0).Map("m")
				// Read-modify-write of one map: serialized writers never
				// lose an update.
				if err := m.Put([]byte{byte(w), byte(i)}, nil); err != nil {
					b.Close()
					done <- err
					return
				}
				if err := b.Commit(); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range writers {
		must(t, <-done)
	}
	b := s.NewBatch()
	defer b.Close()
	n, err := b.mapLen(statePrefix(0, "m", []byte("shared")))
	must(t, err)
	if n != writers*steps {
		t.Fatalf("map length %d, want %d", n, writers*steps)
	}
	if got := s.Stats().Keys["m"]; got != 1 {
		t.Fatalf("live keys %d, want 1", got)
	}
}

// TestSweepFamilies: a sweep in slices measures each family's live bytes
// exactly, and a later sweep sees what was deleted since.
func TestSweepFamilies(t *testing.T) {
	s := openTest(t, testOptions(nil))
	val := make([]byte, 1000)
	commit(t, s, func(b *Batch) {
		for i := range 500 {
			sc := b.Scope(i%16, []byte(strconv.Itoa(i)), t0)
			must(t, sc.Value("v").Set(val))
			if i%10 == 0 {
				must(t, sc.Map("m").Put([]byte("x"), val))
			}
		}
	})
	var w Sweep
	sweep := func() map[string]int64 {
		t.Helper()
		for calls := 1; ; calls++ {
			done, err := s.SweepFamilies(&w, 64)
			must(t, err)
			if done {
				if calls < 5 {
					t.Fatalf("a sweep of 64 keys at a time took %d calls over some 600 keys", calls)
				}
				return w.Bytes()
			}
			if calls > 100 {
				t.Fatal("the sweep does not end")
			}
		}
	}
	got := sweep()
	if got["v"] < 500*1000 || got["v"] > 500*1100 || got["m"] < 50*1000 || got["m"] > 50*1200 || got["l"] != 0 {
		t.Fatalf("family bytes %v: want v about 500 kB, m about 50 kB, l none", got)
	}
	commit(t, s, func(b *Batch) {
		for i := range 250 {
			must(t, b.Scope(i%16, []byte(strconv.Itoa(i)), t0).Value("v").Clear())
		}
	})
	if again := sweep(); again["v"] > got["v"]/2+20_000 || again["m"] != got["m"] {
		t.Fatalf("after deleting half of v: %v, before %v", again, got)
	}
}
