package state

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func limitOptions(fs vfs.FS, logs *bytes.Buffer) Options {
	return Options{
		FS:        fs,
		KeyGroups: 4,
		Logger:    slog.New(slog.NewTextHandler(logs, nil)),
		Families: []Family{
			{Name: "v", Kind: KindValue, MaxKeys: 2},
			{Name: "m", Kind: KindMap, MaxKeys: 2, OnLimit: LimitDeadLetter},
			{Name: "l", Kind: KindList, MaxKeys: 1, TTL: time.Minute},
		},
	}
}

func TestMaxKeys(t *testing.T) {
	for _, c := range []struct {
		fam    string
		action LimitAction
		create func(sc Scope) error // creates the scope's key
		update func(sc Scope) error // writes to an existing key
	}{
		{"v", LimitFail,
			func(sc Scope) error { return sc.Value("v").Set([]byte("x")) },
			func(sc Scope) error { return sc.Value("v").Set([]byte("y")) }},
		{"m", LimitDeadLetter,
			func(sc Scope) error { return sc.Map("m").Put([]byte("a"), nil) },
			func(sc Scope) error { return sc.Map("m").Put([]byte("other"), nil) }},
		{"l", LimitFail,
			func(sc Scope) error { return sc.List("l").Append([]byte("x")) },
			func(sc Scope) error { return sc.List("l").Append([]byte("y")) }},
	} {
		t.Run(c.fam, func(t *testing.T) {
			var logs bytes.Buffer
			s := openTest(t, limitOptions(nil, &logs))
			max := s.families[c.fam].MaxKeys
			key := func(i int) []byte { return []byte(fmt.Sprint("k", i)) }
			// Fill the family across two batches and several groups.
			for i := range max {
				commit(t, s, func(b *Batch) { must(t, c.create(b.Scope(int(i)%4, key(int(i)), t0))) })
			}

			b := s.NewBatch()
			// Existing keys can still be written.
			must(t, c.update(b.Scope(0, key(0), t0)))
			// New keys are refused, twice, logged once.
			for range 2 {
				err := c.create(b.Scope(3, []byte("new"), t0))
				if !errors.Is(err, ErrLimit) {
					t.Fatalf("create beyond limit = %v, want ErrLimit", err)
				}
				var le *LimitError
				if !errors.As(err, &le) || le.Family != c.fam || le.MaxKeys != max || le.Action != c.action {
					t.Fatalf("LimitError = %+v, want family %s max %d action %v", le, c.fam, max, c.action)
				}
			}
			// The refused write was not applied.
			switch c.fam {
			case "v":
				must(t, wantV("v", "", false).fn(b.Scope(3, []byte("new"), t0)))
			case "m":
				must(t, wantM("m").fn(b.Scope(3, []byte("new"), t0)))
			case "l":
				must(t, wantL("l").fn(b.Scope(3, []byte("new"), t0)))
			}
			// Clearing a key in the same batch makes room.
			sc0 := b.Scope(0, key(0), t0)
			switch c.fam {
			case "v":
				must(t, sc0.Value("v").Clear())
			case "m":
				must(t, sc0.Map("m").Clear())
			case "l":
				must(t, sc0.List("l").Clear())
			}
			must(t, c.create(b.Scope(3, []byte("new"), t0)))
			must(t, b.Commit())

			st := s.Stats()
			if st.Keys[c.fam] != max || st.LimitHits[c.fam] != 2 {
				t.Fatalf("Keys %d, LimitHits %d; want %d, 2", st.Keys[c.fam], st.LimitHits[c.fam], max)
			}
			if n := strings.Count(logs.String(), "reached its key limit"); n != 1 {
				t.Fatalf("limit logged %d times in one batch, want 1:\n%s", n, logs.String())
			}
			if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "family="+c.fam) {
				t.Fatalf("log = %s", logs.String())
			}

			// A second batch that crosses again logs again.
			b = s.NewBatch()
			if err := c.create(b.Scope(2, []byte("another"), t0)); !errors.Is(err, ErrLimit) {
				t.Fatalf("create = %v, want ErrLimit", err)
			}
			b.Close()
			if n := strings.Count(logs.String(), "reached its key limit"); n != 2 {
				t.Fatalf("limit logged %d times over two batches, want 2", n)
			}
		})
	}
}

func TestMaxKeysWithinOneBatch(t *testing.T) {
	var logs bytes.Buffer
	s := openTest(t, limitOptions(nil, &logs))
	b := s.NewBatch()
	defer b.Close()
	must(t, b.Scope(0, []byte("a"), t0).Value("v").Set(nil))
	must(t, b.Scope(1, []byte("b"), t0).Value("v").Set(nil))
	if err := b.Scope(2, []byte("c"), t0).Value("v").Set(nil); !errors.Is(err, ErrLimit) {
		t.Fatalf("third key in one batch = %v, want ErrLimit", err)
	}
	// Create and clear in one batch: the count is back where it was.
	must(t, b.Scope(1, []byte("b"), t0).Value("v").Clear())
	must(t, b.Scope(2, []byte("c"), t0).Value("v").Set(nil))
	must(t, b.Scope(2, []byte("c"), t0).Value("v").Clear())
	must(t, b.Commit())
	if got := s.Stats().Keys["v"]; got != 1 {
		t.Fatalf("keys = %d, want 1", got)
	}
}

// TestExpiredKeysStillCount: an expired key counts until Expire deletes
// it; after that the family has room again.
func TestExpiredKeysStillCount(t *testing.T) {
	var logs bytes.Buffer
	s := openTest(t, limitOptions(nil, &logs))
	commit(t, s, func(b *Batch) { must(t, b.Scope(0, []byte("a"), t0).List("l").Append(nil)) })
	later := t0.Add(time.Hour)
	b := s.NewBatch()
	if err := b.Scope(0, []byte("b"), later).List("l").Append(nil); !errors.Is(err, ErrLimit) {
		t.Fatalf("Append = %v, want ErrLimit", err)
	}
	b.Close()
	if n, err := s.Expire(later, 10); err != nil || n != 1 {
		t.Fatalf("Expire = %d, %v", n, err)
	}
	commit(t, s, func(b *Batch) { must(t, b.Scope(0, []byte("b"), later).List("l").Append(nil)) })
}

func TestCountsSurviveReopen(t *testing.T) {
	fs := vfs.NewMem()
	var logs bytes.Buffer
	s := openTest(t, limitOptions(fs, &logs))
	commit(t, s, func(b *Batch) {
		must(t, b.Scope(0, []byte("a"), t0).Value("v").Set(nil))
		must(t, b.Scope(3, []byte("b"), t0).Value("v").Set(nil))
		must(t, b.Scope(3, []byte("b"), t0).Map("m").Put(nil, nil))
		must(t, b.SetTimer(Timer{Time: t0, KeyGroup: 1}))
		must(t, b.SetTimer(Timer{Time: t0, KeyGroup: 2}))
	})
	must(t, s.Close())
	s = openTest(t, limitOptions(fs, &logs))
	st := s.Stats()
	if st.Keys["v"] != 2 || st.Keys["m"] != 1 || st.Keys["l"] != 0 || st.Timers != 2 {
		t.Fatalf("Stats after reopen = %+v", st)
	}
	b := s.NewBatch()
	defer b.Close()
	if err := b.Scope(0, []byte("c"), t0).Value("v").Set(nil); !errors.Is(err, ErrLimit) {
		t.Fatalf("Set after reopen = %v, want ErrLimit", err)
	}
}
