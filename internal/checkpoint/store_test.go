package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/state"
)

func openStore(t *testing.T) *checkpoint.Store {
	t.Helper()
	srv := natstest.Run(t)
	js, err := jetstream.New(srv.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	s, err := checkpoint.Open(context.Background(), js, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var families = []state.Family{{Name: "v", Kind: state.KindValue, MaxKeys: 1 << 20}}

func write(t testing.TB, st *state.Store, from, to int) {
	t.Helper()
	b := st.NewBatch()
	for i := from; i < to; i++ {
		k := []byte(fmt.Sprintf("key-%06d", i))
		if err := b.Scope(i%256, k, time.Time{}).Value("v").Set([]byte(fmt.Sprintf("value-%d-%0200d", i, i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotRoundTripIsIncremental uploads two snapshots of a growing
// store: the second sends only what changed, and each restores into a
// fresh directory with exactly its data.
func TestSnapshotRoundTripIsIncremental(t *testing.T) {
	ctx := context.Background()
	cs := openStore(t)
	dir := t.TempDir()
	st, err := state.Open(filepath.Join(dir, "state"), state.Options{Families: families, KeyGroups: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	write(t, st, 0, 5000)
	if err := st.Flush(); err != nil {
		t.Fatal(err)
	}
	snap := func(n uint64) checkpoint.Manifest {
		d := filepath.Join(dir, fmt.Sprintf("snap-%d", n))
		if err := st.Snapshot(d); err != nil {
			t.Fatal(err)
		}
		m, err := cs.Upload(ctx, d, checkpoint.Manifest{Operator: "op", Instance: "0", Checkpoint: n})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m1 := snap(1)
	write(t, st, 5000, 5100)
	if err := st.Flush(); err != nil {
		t.Fatal(err)
	}
	m2 := snap(2)
	if m1.NewBytes != m1.FullBytes || m1.FullBytes == 0 {
		t.Fatalf("first snapshot sent %d of %d bytes, want all", m1.NewBytes, m1.FullBytes)
	}
	// The second snapshot sends exactly its files that the first did not
	// upload: new table files and the small per-snapshot files. (Which
	// table files are new depends on Pebble's background compactions.)
	sent := func(prev, m checkpoint.Manifest) (want int64, shared int) {
		had := map[string]bool{}
		for _, f := range prev.Files {
			had[f.Object] = true
		}
		for _, f := range m.Files {
			if had[f.Object] {
				shared++
			} else {
				want += f.Size
			}
		}
		return want, shared
	}
	if want, _ := sent(m1, m2); m2.NewBytes != want {
		t.Fatalf("second snapshot sent %d bytes, want %d: the files the first did not upload\n%+v\n%+v", m2.NewBytes, want, m1.Files, m2.Files)
	}
	// A snapshot of an unchanged store shares every table file: retake it
	// until background compactions have settled, then only the few small
	// per-snapshot files are sent.
	prev := m2
	for n := uint64(3); ; n++ {
		m := snap(n)
		want, shared := sent(prev, m)
		if m.NewBytes != want {
			t.Fatalf("snapshot %d sent %d bytes, want %d", n, m.NewBytes, want)
		}
		if shared > 0 && m.NewBytes < m.FullBytes/10 {
			break
		}
		if n > 10 {
			t.Fatalf("snapshots of an unchanged store keep re-sending their tables: %d of %d bytes", m.NewBytes, m.FullBytes)
		}
		prev = m
	}
	for _, c := range []struct {
		m    checkpoint.Manifest
		keys int64
	}{{m1, 5000}, {m2, 5100}} {
		got, err := cs.Manifest(ctx, c.m.Key())
		if err != nil {
			t.Fatal(err)
		}
		restored := filepath.Join(t.TempDir(), "state")
		if err := cs.Download(ctx, got, restored); err != nil {
			t.Fatal(err)
		}
		rs, err := state.Open(restored, state.Options{Families: families, KeyGroups: 256})
		if err != nil {
			t.Fatal(err)
		}
		if n := rs.Stats().Keys["v"]; n != c.keys {
			t.Errorf("checkpoint %d restores %d keys, want %d", c.m.Checkpoint, n, c.keys)
		}
		rs.Close()
	}
	if _, err := cs.Manifest(ctx, checkpoint.ManifestKey("op", "0", 9)); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("missing manifest: err = %v", err)
	}
}

// TestCommitIsACompareAndSet: two coordinators completing concurrently,
// only the one holding the current revision wins.
func TestCommitIsACompareAndSet(t *testing.T) {
	ctx := context.Background()
	cs := openStore(t)
	if _, _, err := cs.Latest(ctx); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("latest of an empty log: %v", err)
	}
	rev, err := cs.Commit(ctx, checkpoint.Latest{Checkpoint: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Commit(ctx, checkpoint.Latest{Checkpoint: 1}, 0); !errors.Is(err, checkpoint.ErrConflict) {
		t.Fatalf("second create: %v, want ErrConflict", err)
	}
	if _, err := cs.Commit(ctx, checkpoint.Latest{Checkpoint: 2}, rev); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Commit(ctx, checkpoint.Latest{Checkpoint: 3}, rev); !errors.Is(err, checkpoint.ErrConflict) {
		t.Fatalf("stale revision: %v, want ErrConflict", err)
	}
	l, _, err := cs.Latest(ctx)
	if err != nil || l.Checkpoint != 2 {
		t.Fatalf("latest %+v, %v; want 2", l, err)
	}
	for n := uint64(1); n <= 3; n++ {
		if err := cs.PutRecord(ctx, checkpoint.Record{Checkpoint: n, Status: checkpoint.Complete}); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := cs.Records(ctx)
	if err != nil || len(rs) != 3 || rs[0].Checkpoint != 1 || rs[2].Checkpoint != 3 {
		t.Fatalf("records %+v, %v", rs, err)
	}
}

// TestRecentReadsTheNewestRecords: the log's newest n records, newest
// first, skipping numbers without a record (collected, or never written),
// read a window at a time.
func TestRecentReadsTheNewestRecords(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	for c := uint64(1); c <= 30; c++ {
		if c%7 == 0 {
			continue
		}
		if err := s.PutRecord(ctx, checkpoint.Record{Checkpoint: c, Status: checkpoint.Complete}); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := s.Recent(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, r := range recs {
		got = append(got, r.Checkpoint)
	}
	if want := []uint64{30, 29, 27, 26, 25, 24, 23, 22, 20, 19}; !slices.Equal(got, want) {
		t.Errorf("Recent(10) = %v, want %v", got, want)
	}
	if recs, err := s.Recent(ctx, 40); err != nil || len(recs) != 26 || recs[25].Checkpoint != 1 {
		t.Errorf("Recent(40): %d records, %v", len(recs), err)
	}
}

// TestAFenceThatCannotBeDecodedIsAnError: listing the fences, one that
// cannot be decoded is an error, not skipped: its writer would have its
// older generation's frames read as current ones.
func TestAFenceThatCannotBeDecodedIsAnError(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Run(t)
	js, err := jetstream.New(srv.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	s, err := checkpoint.Open(ctx, js, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutFence(ctx, "a", "0", checkpoint.Fence{Generation: 2}); err != nil {
		t.Fatal(err)
	}
	fences, err := s.FencesOf(ctx, "a")
	if err != nil || fences["a/0"].Generation != 2 {
		t.Fatalf("fences %+v: %v", fences, err)
	}
	kv, err := js.KeyValue(ctx, checkpoint.BucketName("p"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "fence.b.0", []byte(`{"generation":`)); err != nil {
		t.Fatal(err)
	}
	if fences, err := s.FencesOf(ctx, "b"); err == nil {
		t.Fatalf("a fence that cannot be decoded was skipped: %+v", fences)
	}
	if fences, err := s.FencesOf(ctx, "a"); err != nil || fences["a/0"].Generation != 2 {
		t.Fatalf("another operator's broken fence reached a's: %+v, %v", fences, err)
	}
}
