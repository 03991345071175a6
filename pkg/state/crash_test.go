package state

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// crashWrite commits batch i: keysPerBatch values in several key groups, a
// map entry, a timer, a staged output and the input position i.
func crashWrite(t *testing.T, s *Store, i, keysPerBatch int) {
	t.Helper()
	commit(t, s, func(b *Batch) {
		for j := range keysPerBatch {
			sc := b.Scope(j%16, []byte(fmt.Sprintf("b%03d-k%03d", i, j)), t0)
			must(t, sc.Value("v").Set(make([]byte, 100)))
		}
		must(t, b.Scope(i%16, []byte(fmt.Sprint("b", i)), t0).Map("m").Put([]byte("x"), nil))
		must(t, b.SetTimer(Timer{Time: t0, KeyGroup: i % 16, Key: []byte(fmt.Sprint("b", i))}))
		must(t, b.StageOutput(fmt.Sprintf("%06d", i), []byte("frame")))
		must(t, b.SetPosition("in/0", Position{Seq: uint64(i)}))
	})
}

// checkCut checks that the store holds exactly batches 1..n of crashWrite,
// where n is its recorded position, and returns n.
func checkCut(t *testing.T, s *Store, batches, keysPerBatch int) int {
	t.Helper()
	p, _, err := s.Position("in/0")
	must(t, err)
	n := int(p.Seq)
	b := s.NewBatch()
	defer b.Close()
	for i := 1; i <= batches; i++ {
		present := 0
		for j := range keysPerBatch {
			_, ok, err := b.Scope(j%16, []byte(fmt.Sprintf("b%03d-k%03d", i, j)), t0).Value("v").Get()
			must(t, err)
			if ok {
				present++
			}
		}
		_, ok, err := b.Scope(i%16, []byte(fmt.Sprint("b", i)), t0).Map("m").Get([]byte("x"))
		must(t, err)
		if ok {
			present++
		}
		want := 0
		if i <= n {
			want = keysPerBatch + 1
		}
		if present != want {
			t.Fatalf("batch %d: %d of %d records present, position %d: a batch is not all-or-nothing", i, present, keysPerBatch+1, n)
		}
	}
	st := s.Stats()
	timers, err := s.DueTimers(EventTime, t0, batches+1)
	must(t, err)
	outs := 0
	must(t, s.StagedOutputs(func(string, []byte) error { outs++; return nil }))
	if st.Keys["v"] != int64(n*keysPerBatch) || st.Keys["m"] != int64(n) || st.Timers != int64(n) || len(timers) != n || outs != n {
		t.Fatalf("position %d but keys %v, %d timers counted, %d found, %d outputs", n, st.Keys, st.Timers, len(timers), outs)
	}
	return n
}

// TestSyncedCommitsSurviveCrash: with the default (synced) options every
// committed batch is in any crash image, whatever unsynced data it holds.
func TestSyncedCommitsSurviveCrash(t *testing.T) {
	const batches, keys = 8, 20
	fs := vfs.NewCrashableMem()
	s := openTest(t, testOptions(fs))
	for i := 1; i <= batches; i++ {
		crashWrite(t, s, i, keys)
	}
	// An open, uncommitted batch is in no image.
	open := s.NewBatch()
	must(t, open.Scope(0, []byte("uncommitted"), t0).Value("v").Set([]byte("x")))
	for seed := range uint64(4) {
		crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: int(seed * 30), RNG: rand.New(rand.NewPCG(seed, 7))})
		c := openTest(t, testOptions(crashed))
		if n := checkCut(t, c, batches, keys); n != batches {
			t.Fatalf("seed %d: crash image holds %d of %d synced batches", seed, n, batches)
		}
		must(t, c.Close())
	}
	open.Close()
	// Plain close and reopen, too.
	must(t, s.Close())
	s = openTest(t, testOptions(fs))
	if n := checkCut(t, s, batches, keys); n != batches {
		t.Fatalf("reopened store holds %d of %d batches", n, batches)
	}
}

// TestUnsyncedBatchesAllOrNothing: with NoSync, a crash may lose recent
// batches, but each batch is lost or kept whole, and the kept batches are
// a prefix of the committed ones, matching the recorded position.
func TestUnsyncedBatchesAllOrNothing(t *testing.T) {
	const batches, keys = 20, 40 // ~4 KB per batch: WAL blocks split batches
	fs := vfs.NewCrashableMem()
	o := testOptions(fs)
	o.NoSync = true
	s := openTest(t, o)
	for i := 1; i <= batches; i++ {
		crashWrite(t, s, i, keys)
	}
	cuts := map[int]bool{}
	for seed := range uint64(12) {
		crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: int(seed*9) % 101, RNG: rand.New(rand.NewPCG(seed, 11))})
		c, err := Open("db", Options{FS: crashed, Families: o.Families, KeyGroups: o.KeyGroups})
		if err != nil {
			t.Fatalf("seed %d: open crash image: %v", seed, err)
		}
		cuts[checkCut(t, c, batches, keys)] = true
		must(t, c.Close())
	}
	t.Logf("recovered cuts: %v", cuts)
}
