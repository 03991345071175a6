package state

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestCommitWhenTheDiskRefusesTheLog: a write or sync of Pebble's log that
// the disk refuses (injected with Pebble's errorfs on the real file
// system: EIO, or ENOSPC for a full disk) makes Commit return ErrDisk —
// not a panic — and every later Commit too. Reopened once the disk is
// fixed, the store holds every batch committed before the fault, and the
// failed batch either whole or not at all.
func TestCommitWhenTheDiskRefusesTheLog(t *testing.T) {
	for _, c := range []struct {
		name string
		kind errorfs.OpKind
		err  error
	}{
		{"write fails", errorfs.OpFileWrite, syscall.EIO},
		{"sync fails", errorfs.OpFileSync, syscall.EIO},
		{"disk full", errorfs.OpFileWrite, syscall.ENOSPC},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "db")
			var on atomic.Bool
			var hits atomic.Int64
			kinds := []errorfs.OpKind{c.kind}
			if c.kind == errorfs.OpFileSync {
				kinds = append(kinds, errorfs.OpFileSyncData)
			}
			fs := refusing(&on, &hits, ".log", c.err, kinds...)
			o := testOptions(fs)
			s, err := Open(dir, o)
			if err != nil {
				t.Fatal(err)
			}
			put := func(s *Store, i int) error {
				b := s.NewBatch()
				defer b.Close()
				if err := b.PutMeta(fmt.Sprintf("k%03d", i), []byte{byte(i)}); err != nil {
					return err
				}
				return b.Commit()
			}
			for i := range 20 {
				if err := put(s, i); err != nil {
					t.Fatalf("commit %d before the fault: %v", i, err)
				}
			}
			on.Store(true)
			err = put(s, 20)
			t.Logf("commit during the fault: %v", err)
			if !errors.Is(err, ErrDisk) || !strings.Contains(err.Error(), c.err.Error()) {
				t.Fatalf("commit during the fault: %v, want ErrDisk naming %q", err, c.err)
			}
			if hits.Load() == 0 {
				t.Fatal("no log write was refused")
			}
			on.Store(false)
			if err := put(s, 21); !errors.Is(err, ErrDisk) {
				t.Fatalf("commit after the fault, store not reopened: %v, want ErrDisk", err)
			}
			_ = s.Close() // it may report the broken log again

			s, err = Open(dir, testOptions(vfs.Default))
			if err != nil {
				t.Fatalf("reopen after the fault cleared: %v", err)
			}
			defer s.Close()
			for i := range 20 {
				if v, ok, err := s.Meta(fmt.Sprintf("k%03d", i)); err != nil || !ok || v[0] != byte(i) {
					t.Fatalf("batch %d committed before the fault: %v %v %v", i, v, ok, err)
				}
			}
			if _, ok, _ := s.Meta("k021"); ok {
				t.Fatal("the batch committed after the fault, which Commit refused, is in the store")
			}
			if err := put(s, 22); err != nil {
				t.Fatalf("commit after reopening: %v", err)
			}
		})
	}
}

// TestAFlushTheDiskRefusesWaitsForRoom: a full disk met while Pebble
// writes a memtable out to a table file (not its log) is not fatal: Pebble
// reports it and tries again, so whatever needs that flush — here Flush,
// as a checkpoint's snapshot does — waits. Once the disk has room it goes
// on by itself, and nothing committed is lost.
func TestAFlushTheDiskRefusesWaitsForRoom(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	var full atomic.Bool
	var refused atomic.Int64
	fs := refusing(&full, &refused, ".sst", syscall.ENOSPC, errorfs.OpFileWrite)
	s, err := Open(dir, testOptions(fs))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 20 {
		commit(t, s, func(b *Batch) { must(t, b.PutMeta(fmt.Sprintf("k%03d", i), []byte{byte(i)})) })
	}
	full.Store(true)
	flushed := make(chan error, 1)
	go func() { flushed <- s.Flush() }()
	select {
	case err := <-flushed:
		t.Fatalf("Flush returned %v while the disk was full", err)
	case <-time.After(300 * time.Millisecond):
	}
	if refused.Load() == 0 {
		t.Fatal("no table write was refused")
	}
	full.Store(false)
	select {
	case err := <-flushed:
		if err != nil {
			t.Fatalf("Flush after the disk had room again: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Flush still waits 10 s after the disk had room again")
	}
	commit(t, s, func(b *Batch) { must(t, b.PutMeta("k020", []byte{20})) })
	for i := range 21 {
		if v, ok, err := s.Meta(fmt.Sprintf("k%03d", i)); err != nil || !ok || v[0] != byte(i) {
			t.Fatalf("k%03d: %v %v %v", i, v, ok, err)
		}
	}
}

// refusing is the real file system, where operations of the given kinds on
// files named *suffix fail with err while on is set; hits counts them.
func refusing(on *atomic.Bool, hits *atomic.Int64, suffix string, err error, kinds ...errorfs.OpKind) vfs.FS {
	return errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if on.Load() && strings.HasSuffix(op.Path, suffix) && slices.Contains(kinds, op.Kind) {
			hits.Add(1)
			return fmt.Errorf("injected: %w", err)
		}
		return nil
	}))
}
