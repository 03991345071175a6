package state

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestImportMovesKeyGroupsWhole splits the state of two stores — values,
// maps, lists with TTL, timers — between two new ones by key group, as a
// rescale does, and checks that each new store holds exactly the key
// groups it took, with their timers and counters, and nothing else.
func TestImportMovesKeyGroupsWhole(t *testing.T) {
	old := []*Store{openTest(t, testOptions(vfs.NewMem())), openTest(t, testOptions(vfs.NewMem()))}
	// Old store i owns key groups [8i, 8i+8).
	type entry struct {
		kg  int
		key string
	}
	var entries []entry
	for i, s := range old {
		commit(t, s, func(b *Batch) {
			for kg := 8 * i; kg < 8*i+8; kg++ {
				for k := range 3 {
					key := fmt.Sprintf("k%d-%d", kg, k)
					entries = append(entries, entry{kg, key})
					sc := b.Scope(kg, []byte(key), t0)
					must(t, sc.Value("v").Set([]byte(key)))
					must(t, sc.Map("mt").Put([]byte("a"), []byte(key)))
					must(t, sc.List("l").Append([]byte(key)))
					must(t, b.SetTimer(Timer{Domain: EventTime, Time: time.Unix(int64(kg), 0), KeyGroup: kg, Key: []byte(key), Name: "end"}))
				}
			}
			must(t, b.SetPosition("in/0", Position{Seq: uint64(10 + i)}))
		})
	}
	// New store j owns key groups with kg%2 == j: both old stores feed both.
	for j := range 2 {
		s := openTest(t, testOptions(vfs.NewMem()))
		mine := func(kg int) bool { return kg%2 == j }
		for _, o := range old {
			if _, err := s.Import(o, mine); err != nil {
				t.Fatal(err)
			}
		}
		st := s.Stats()
		if st.Keys["v"] != 24 || st.Keys["mt"] != 24 || st.Keys["l"] != 24 || st.Timers != 24 {
			t.Fatalf("store %d: counters %+v, want 24 of each", j, st)
		}
		b := s.NewBatch()
		for _, e := range entries {
			sc := b.Scope(e.kg, []byte(e.key), t0.Add(time.Second))
			v, ok, err := sc.Value("v").Get()
			must(t, err)
			m, mok, err := sc.Map("mt").Get([]byte("a"))
			must(t, err)
			l, err := sc.List("l").All()
			must(t, err)
			if mine(e.kg) != ok || ok != mok || ok != (len(l) == 1) {
				t.Fatalf("store %d key group %d key %s: value %v, map %v, list %d", j, e.kg, e.key, ok, mok, len(l))
			}
			if ok && (string(v) != e.key || string(m) != e.key || string(l[0]) != e.key) {
				t.Fatalf("store %d key %s: %q %q %q", j, e.key, v, m, l)
			}
		}
		b.Close()
		timers, err := s.DueTimers(EventTime, time.Unix(100, 0), 100)
		must(t, err)
		if len(timers) != 24 {
			t.Fatalf("store %d: %d timers due, want 24", j, len(timers))
		}
		for _, tm := range timers {
			if !mine(tm.KeyGroup) {
				t.Fatalf("store %d holds a timer of key group %d", j, tm.KeyGroup)
			}
		}
		// TTL entries keep their expiry index: they expire in the new store.
		if n, err := s.Expire(t0.Add(2*time.Minute), 1000); err != nil || n != 24 {
			t.Fatalf("store %d: Expire removed %d (%v), want the 24 map entries", j, n, err)
		}
		// Positions are not imported.
		if p, err := s.Positions(); err != nil || len(p) != 0 {
			t.Fatalf("store %d: positions %v (%v) imported", j, p, err)
		}
	}
}

func TestImportRefusesOtherKeyGroupCount(t *testing.T) {
	a := openTest(t, testOptions(vfs.NewMem()))
	o := testOptions(vfs.NewMem())
	o.KeyGroups = 32
	b := openTest(t, o)
	if _, err := a.Import(b, func(int) bool { return true }); err == nil {
		t.Fatal("imported a store of 32 key groups into one of 16")
	}
}
