package state

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestMemTablesFillEarlyAndStay writes 48 MiB through a store the way the
// runtime's steps do — each step stages a frame and deletes the one the
// step before staged — and checks that the memory its memtables hold never
// passes memTablesHeld of memTableSize, and for a store of a small state
// (none, or q7's 1,000 windows) reaches its full size within the first
// 4 MiB written: such a process's memory is flat after its first second,
// whatever the number of events.
func TestMemTablesFillEarlyAndStay(t *testing.T) {
	large := []Family{{Name: "ids", Kind: KindValue, MaxKeys: 5_000_000}}
	for _, c := range []struct {
		name  string
		fams  []Family
		size  int64
		early bool
	}{
		{"stateless", nil, 2 << 20, true},
		{"small", testFamilies(), 1 << 20, true},
		{"large", large, 4 << 20, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := Options{FS: vfs.NewMem(), Families: c.fams, KeyGroups: 16, NoSync: true}
			if got := o.memTableSize(); got != c.size {
				t.Errorf("memTableSize = %d, want %d", got, c.size)
			}
			memTablesFill(t, o, c.early)
		})
	}
}

func memTablesFill(t *testing.T, o Options, early bool) {
	s := openTest(t, o)
	memTableSize := uint64(o.memTableSize())
	const frame = 64 << 10
	data := make([]byte, frame)
	held := func() uint64 {
		m := s.db.Metrics()
		return m.MemTable.Size + m.MemTable.ZombieSize
	}
	var first, most uint64
	const steps = 48 << 20 / frame
	for i := range steps {
		b := s.NewBatch()
		if err := b.StageOutput(fmt.Sprintf("%08d", i), data); err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			if err := b.DeleteOutput(fmt.Sprintf("%08d", i-1)); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		n := held()
		most = max(most, n)
		if i == 4<<20/frame {
			first = s.db.Metrics().MemTable.Size
		}
	}
	if early && first < memTableSize {
		t.Errorf("after 4 MiB written the memtable in use holds %d bytes, want its full %d", first, memTableSize)
	}
	if bound := memTablesHeld * memTableSize; most > bound {
		t.Errorf("memtables held up to %d bytes over 48 MiB written, want at most %d (memTablesHeld × memTableSize)", most, bound)
	}
	if most > uint64(o.MemoryBound()) {
		t.Errorf("memtables held up to %d bytes, over the store's MemoryBound %d", most, o.MemoryBound())
	}
}

// TestMemoryBoundCoversMemTables: a cache smaller than the memtables still
// has them allocated, and the bound says so.
func TestMemoryBoundCoversMemTables(t *testing.T) {
	for _, fams := range [][]Family{nil, testFamilies(), {{Name: "ids", Kind: KindValue, MaxKeys: 5_000_000}}} {
		small := Options{CacheSize: 1 << 20, Families: fams}
		if got, want := small.MemoryBound(), memTablesHeld*small.memTableSize(); got < want {
			t.Errorf("%d families: MemoryBound with a 1 MiB cache = %d, want at least the memtables' %d", len(fams), got, want)
		}
		def := Options{Families: fams}
		if got, want := def.MemoryBound(), DefaultCacheSize+def.memTableSize()+tableOverhead; got < want {
			t.Errorf("%d families: MemoryBound by default = %d, want at least the cache, a memtable and the tables' overhead (%d)", len(fams), got, want)
		}
	}
}
