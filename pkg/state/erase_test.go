package state

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
)

// TestEraseKeyLeavesNothingOfTheKey fills every kind of family, with and
// without a TTL, and timers of both domains, for two keys of one key
// group; erasing one leaves not a byte of it in the store — cells, map
// entries, list elements, TTL index entries, timers — and the other key,
// the key counts and the timer count as they should be.
func TestEraseKeyLeavesNothingOfTheKey(t *testing.T) {
	s := openTest(t, testOptions(nil))
	const kg = 3
	fill := func(key string) {
		commit(t, s, func(b *Batch) {
			sc := b.Scope(kg, []byte(key), t0)
			for _, f := range []string{"v", "vt"} {
				must(t, sc.Value(f).Set([]byte(key+"-value")))
			}
			for _, f := range []string{"m", "mt"} {
				must(t, sc.Map(f).Put([]byte("a"), []byte(key+"-a")))
				must(t, sc.Map(f).Put([]byte("b"), []byte(key+"-b")))
			}
			for _, f := range []string{"l", "lt"} {
				must(t, sc.List(f).Append([]byte(key+"-1")))
				must(t, sc.List(f).Append([]byte(key+"-2")))
			}
			must(t, b.SetTimer(Timer{Domain: EventTime, Time: t0.Add(time.Minute), KeyGroup: kg, Key: []byte(key), Name: "w"}))
			must(t, b.SetTimer(Timer{Domain: ProcessingTime, Time: t0.Add(time.Hour), KeyGroup: kg, Key: []byte(key), Name: "p"}))
		})
	}
	fill("alice")
	fill("bob")
	must(t, s.Flush()) // the values in a table file, as in any store that ran a while
	keys, err := s.KeysOf(kg, func(k []byte) bool { return bytes.HasPrefix(k, []byte("al")) })
	must(t, err)
	if len(keys) != 1 || string(keys[0]) != "alice" {
		t.Errorf("keys starting al: %q, want alice alone", keys)
	}
	before := s.Stats()

	var erased Erased
	commit(t, s, func(b *Batch) {
		var err error
		erased, err = b.EraseKey(kg, []byte("alice"), t0)
		must(t, err)
	})
	if want := []string{"v", "m", "l", "vt", "mt", "lt"}; !slices.Equal(erased.Families, want) || erased.Timers != 2 {
		t.Errorf("erased %+v, want families %v and 2 timers", erased, want)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{})
	must(t, err)
	for it.First(); it.Valid(); it.Next() {
		if bytes.Contains(it.Key(), []byte("alice")) || bytes.Contains(it.Value(), []byte("alice")) {
			t.Errorf("left after the erasure: %x = %q", it.Key(), it.Value())
		}
	}
	must(t, it.Close())

	after := s.Stats()
	for f, n := range before.Keys {
		if after.Keys[f] != n-1 {
			t.Errorf("family %s counts %d keys after the erasure, want %d", f, after.Keys[f], n-1)
		}
	}
	if after.Timers != before.Timers-2 {
		t.Errorf("%d timers after the erasure, want %d", after.Timers, before.Timers-2)
	}
	// In a snapshot — the store's live table files, what a checkpoint
	// uploads — the values may still be there, under tombstones, until
	// Pebble compacts them together; once the key group is purged no table
	// file holds one of them, read entry by entry, shadowed ones included.
	// (The tombstones themselves, which name the key, may stay until
	// Pebble compacts them away: a file of tombstones alone in the last
	// level is not rewritten by a manual compaction. A store this small
	// often compacts by itself before the purge.)
	snapshots := 0
	tables := func() (n int) {
		t.Helper()
		snapshots++
		dir := "snap" + strconv.Itoa(snapshots)
		must(t, s.Snapshot(dir))
		names, err := s.fs.List(dir)
		must(t, err)
		for _, name := range names {
			if !strings.HasSuffix(name, ".sst") {
				continue
			}
			f, err := s.fs.Open(s.fs.PathJoin(dir, name))
			must(t, err)
			r, err := sstable.NewSimpleReadable(f)
			must(t, err)
			points, _, _, err := sstable.ReadAll(r, sstable.ReaderOptions{}, nil)
			must(t, err)
			for _, kv := range points {
				if v := kv.V.InPlaceValue(); bytes.Contains(v, []byte("alice")) {
					n++
				}
			}
		}
		return n
	}
	must(t, s.Purge(context.Background(), kg))
	if n := tables(); n > 0 {
		t.Errorf("%d of alice's values in the snapshot's table files after the purge", n)
	}

	due, err := s.DueTimers(EventTime, t0.Add(time.Hour), 10)
	must(t, err)
	if len(due) != 1 || string(due[0].Key) != "bob" {
		t.Errorf("due event-time timers %v, want bob's alone", due)
	}
	commit(t, s, func(b *Batch) {
		got, ok, err := b.Scope(kg, []byte("bob"), t0).Value("vt").Get()
		must(t, err)
		if !ok || string(got) != "bob-value" {
			t.Errorf("bob's value %q, %v after alice's erasure", got, ok)
		}
		again, err := b.EraseKey(kg, []byte("alice"), t0)
		must(t, err)
		if len(again.Families) != 0 || again.Timers != 0 {
			t.Errorf("erasing again found %+v", again)
		}
	})
}
