package state

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestCacheSeesWhatABatchCommitsAndNotWhatItDiscards: a value read once is
// then read from the cache; a discarded batch's write never reaches it, a
// committed one does, and a reopened store reads the same from Pebble.
func TestCacheSeesWhatABatchCommitsAndNotWhatItDiscards(t *testing.T) {
	fs := vfs.NewMem()
	s := openTest(t, testOptions(fs))
	get := func(b *Batch) string {
		t.Helper()
		v, ok, err := b.Scope(3, []byte("k"), t0).Value("v").Get()
		must(t, err)
		if !ok {
			return "<none>"
		}
		return string(v)
	}
	set := func(b *Batch, v string) { must(t, b.Scope(3, []byte("k"), t0).Value("v").Set([]byte(v))) }

	b := s.NewBatch()
	if got := get(b); got != "<none>" { // cached as absent
		t.Fatalf("fresh store holds %q", got)
	}
	set(b, "one")
	if got := get(b); got != "one" {
		t.Fatalf("a batch reads its own write as %q", got)
	}
	b.Close() // discarded
	commit(t, s, func(b *Batch) {
		if got := get(b); got != "<none>" {
			t.Fatalf("a discarded write was read back as %q", got)
		}
		set(b, "two")
	})
	commit(t, s, func(b *Batch) {
		if got := get(b); got != "two" {
			t.Fatalf("after the commit: %q", got)
		}
		if len(s.cache.m) == 0 {
			t.Fatal("the cache holds nothing after a read and a commit")
		}
		must(t, b.Scope(3, []byte("k"), t0).Value("v").Clear())
	})
	commit(t, s, func(b *Batch) {
		if got := get(b); got != "<none>" {
			t.Fatalf("a cleared value reads %q", got)
		}
		set(b, "three")
	})
	must(t, s.Close())
	s = openTest(t, testOptions(fs))
	commit(t, s, func(b *Batch) {
		if got := get(b); got != "three" {
			t.Fatalf("reopened: %q", got)
		}
	})
}

// TestImportIsReadAfterTheCacheKnewTheKeyAbsent: Import writes without a
// batch, so it must leave no cached absence behind.
func TestImportIsReadAfterTheCacheKnewTheKeyAbsent(t *testing.T) {
	src := openTest(t, testOptions(vfs.NewMem()))
	commit(t, src, func(b *Batch) { must(t, b.Scope(5, []byte("k"), t0).Value("v").Set([]byte("moved"))) })
	dst := openTest(t, testOptions(vfs.NewMem()))
	commit(t, dst, func(b *Batch) {
		if _, ok, err := b.Scope(5, []byte("k"), t0).Value("v").Get(); err != nil || ok {
			t.Fatalf("fresh store: %v %v", ok, err)
		}
	})
	if _, err := dst.Import(src, func(kg int) bool { return kg == 5 }); err != nil {
		t.Fatal(err)
	}
	commit(t, dst, func(b *Batch) {
		v, ok, err := b.Scope(5, []byte("k"), t0).Value("v").Get()
		if err != nil || !ok || string(v) != "moved" {
			t.Fatalf("after Import: %q %v %v", v, ok, err)
		}
	})
}

// TestCacheStaysWithinItsBound: the cache drops entries past its size.
func TestCacheStaysWithinItsBound(t *testing.T) {
	o := testOptions(vfs.NewMem())
	o.CacheSize = 4 << 20 // a read cache of 256 KiB
	s := openTest(t, o)
	value := make([]byte, 1000)
	for i := range 1000 {
		commit(t, s, func(b *Batch) {
			must(t, b.Scope(i%16, fmt.Appendf(nil, "k%d", i), t0).Value("v").Set(value))
		})
	}
	if s.cache.bytes > s.cache.max || len(s.cache.m) == 0 {
		t.Fatalf("the cache holds %d bytes in %d entries, bound %d", s.cache.bytes, len(s.cache.m), s.cache.max)
	}
	commit(t, s, func(b *Batch) { // every value still reads right
		for i := range 1000 {
			v, ok, err := b.Scope(i%16, fmt.Appendf(nil, "k%d", i), t0).Value("v").Get()
			if err != nil || !ok || len(v) != len(value) {
				t.Fatalf("k%d: %d bytes, %v %v", i, len(v), ok, err)
			}
		}
	})
}
