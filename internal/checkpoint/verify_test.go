package checkpoint_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/state"
)

// snapshots is a checkpoint store with a growing Pebble store behind it.
type snapshots struct {
	t   *testing.T
	js  jetstream.JetStream
	cs  *checkpoint.Store
	st  *state.Store
	dir string
}

func newSnapshots(t *testing.T) *snapshots {
	t.Helper()
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	cs, err := checkpoint.Open(context.Background(), js, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st, err := state.Open(filepath.Join(dir, "state"), state.Options{Families: families, KeyGroups: 256})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &snapshots{t: t, js: js, cs: cs, st: st, dir: dir}
}

// take writes more keys and uploads a snapshot as checkpoint n (or, with
// savepoint set, as that savepoint at n), recording it complete.
func (s *snapshots) take(n uint64, savepoint string) checkpoint.Manifest {
	s.t.Helper()
	ctx := context.Background()
	write(s.t, s.st, int(n)*100, int(n)*100+100)
	if err := s.st.Flush(); err != nil {
		s.t.Fatal(err)
	}
	d := filepath.Join(s.dir, "snap-"+savepoint+string(rune('0'+n)))
	if err := s.st.Snapshot(d); err != nil {
		s.t.Fatal(err)
	}
	m, err := s.cs.Upload(ctx, d, checkpoint.Manifest{Operator: "op", Instance: "0", Checkpoint: n, Savepoint: savepoint})
	if err != nil {
		s.t.Fatal(err)
	}
	key := m.Key()
	if savepoint != "" {
		key = checkpoint.SavepointKey(savepoint, "op", "0")
	}
	l := checkpoint.Latest{Checkpoint: n, Completed: time.Now().UTC(), Manifests: map[string]string{"op/0": key}}
	rec := checkpoint.Record{Checkpoint: n, Status: checkpoint.Complete, Triggered: time.Now().UTC(), Completed: l.Completed,
		Acks: map[string]checkpoint.Ack{"op/0": {Manifest: key}}, Savepoint: savepoint}
	if err := s.cs.PutRecord(ctx, rec); err != nil {
		s.t.Fatal(err)
	}
	if savepoint != "" {
		if err := s.cs.PutSavepoint(ctx, savepoint, l); err != nil {
			s.t.Fatal(err)
		}
	}
	return m
}

// restores reports whether the snapshot downloads and verifies.
func (s *snapshots) restores(m checkpoint.Manifest) error {
	s.t.Helper()
	return s.cs.Download(context.Background(), m, filepath.Join(s.t.TempDir(), "state"))
}

// TestCorruptSnapshotsAreDetected: a file whose bytes changed, a file
// missing and a manifest edited are each reported as ErrCorrupt, by
// Verify without downloading and by Download, which checks every file's
// digest.
func TestCorruptSnapshotsAreDetected(t *testing.T) {
	ctx := context.Background()
	s := newSnapshots(t)
	m := s.take(1, "")
	if err := s.restores(m); err != nil {
		t.Fatalf("an intact snapshot: %v", err)
	}
	sn, err := s.cs.SnapshotOf(ctx, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cs.Verify(ctx, sn); err != nil {
		t.Fatalf("an intact snapshot does not verify: %v", err)
	}
	for _, f := range m.Files {
		if f.Digest == "" || !strings.HasPrefix(f.Digest, "SHA-256=") {
			t.Fatalf("file %s recorded without a digest: %+v", f.Name, f)
		}
	}
	obj, err := s.js.ObjectStore(ctx, checkpoint.FilesBucket("p", "op"))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := s.js.KeyValue(ctx, checkpoint.BucketName("p"))
	if err != nil {
		t.Fatal(err)
	}
	f := m.Files[0]
	for _, g := range m.Files {
		if g.Size > f.Size {
			f = g
		}
	}
	good, err := obj.GetBytes(ctx, f.Object)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte{}, good...)
	bad[len(bad)/2] ^= 0xff
	for _, damage := range []struct {
		name          string
		do, undo      func() error
		verifyCatches bool
	}{
		{"a changed file", func() error { _, err := obj.PutBytes(ctx, f.Object, bad); return err },
			func() error { _, err := obj.PutBytes(ctx, f.Object, good); return err }, true},
		{"a missing file", func() error { return obj.Delete(ctx, f.Object) },
			func() error { _, err := obj.PutBytes(ctx, f.Object, good); return err }, true},
		{"an edited manifest", func() error {
			e, err := kv.Get(ctx, m.Key())
			if err != nil {
				return err
			}
			_, err = kv.Put(ctx, m.Key(), []byte(strings.Replace(string(e.Value()), `"checkpoint":1`, `"checkpoint":2`, 1)))
			return err
		}, func() error {
			m.Checksum = ""
			_, err := s.cs.Upload(ctx, filepath.Join(s.dir, "snap-1"), m)
			return err
		}, true},
	} {
		if err := damage.do(); err != nil {
			t.Fatal(err)
		}
		if err := s.cs.Verify(ctx, sn); !errors.Is(err, checkpoint.ErrCorrupt) {
			t.Errorf("%s: Verify = %v, want ErrCorrupt", damage.name, err)
		}
		got, err := s.cs.Manifest(ctx, m.Key())
		if err == nil {
			err = s.restores(got)
		}
		if !errors.Is(err, checkpoint.ErrCorrupt) {
			t.Errorf("%s: restore = %v, want ErrCorrupt", damage.name, err)
		}
		t.Logf("%s: %v", damage.name, err)
		if err := damage.undo(); err != nil {
			t.Fatal(err)
		}
		if err := s.restores(m); err != nil {
			t.Fatalf("after undoing %s: %v", damage.name, err)
		}
	}
}

// TestCollectKeepsWhatIsNeeded collects all but the newest two of the
// checkpoints 2 to 6: the others' manifests and per-checkpoint files go and
// their records say so, while a savepoint (checkpoint 1), the checkpoint
// the assignment restarts from (3) and the kept checkpoints still restore.
func TestCollectKeepsWhatIsNeeded(t *testing.T) {
	ctx := context.Background()
	s := newSnapshots(t)
	sp := s.take(1, "sp")
	var ms []checkpoint.Manifest
	for n := uint64(2); n <= 6; n++ {
		ms = append(ms, s.take(n, ""))
	}
	if _, err := s.cs.PutAssignment(ctx, checkpoint.Assignment{Version: 1, Operators: map[string][]string{"op": {"0"}},
		Checkpoint: 3, Manifests: map[string]string{"op/0": ms[1].Key()}}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.cs.Commit(ctx, checkpoint.Latest{Checkpoint: 6, Manifests: map[string]string{"op/0": ms[4].Key()}}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.cs.Collect(ctx, 0); err == nil {
		t.Fatal("collecting down to no checkpoint was not refused")
	}
	c, err := s.cs.Collect(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Checkpoints) != 2 || c.Checkpoints[0] != 2 || c.Checkpoints[1] != 4 || c.Manifests != 2 || c.Objects == 0 {
		t.Fatalf("collected %+v, want checkpoints 2 and 4 with their manifests and files", c)
	}
	for i, m := range ms {
		_, err := s.cs.Manifest(ctx, m.Key())
		gone := m.Checkpoint == 2 || m.Checkpoint == 4
		if gone != errors.Is(err, checkpoint.ErrNotFound) {
			t.Errorf("checkpoint %d: manifest %v after collection", m.Checkpoint, err)
		}
		if !gone {
			if err := s.restores(ms[i]); err != nil {
				t.Errorf("kept checkpoint %d does not restore: %v", m.Checkpoint, err)
			}
		}
		r, err := s.cs.GetRecord(ctx, m.Checkpoint)
		if err != nil || r.Collected != gone || r.Status != checkpoint.Complete {
			t.Errorf("checkpoint %d: record %+v, %v", m.Checkpoint, r, err)
		}
	}
	if err := s.restores(sp); err != nil {
		t.Fatalf("the savepoint does not restore after collection: %v", err)
	}
	obj, err := s.js.ObjectStore(ctx, checkpoint.FilesBucket("p", "op"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range ms[0].Files {
		if !strings.Contains(f.Object, "/2/") {
			continue // a table file, which later checkpoints share
		}
		if _, err := obj.GetInfo(ctx, f.Object); !errors.Is(err, jetstream.ErrObjectNotFound) {
			t.Errorf("file %s of collected checkpoint 2: %v, want it removed", f.Object, err)
		}
	}
	snaps, err := s.cs.Snapshots(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sn := range snaps {
		names = append(names, sn.String())
	}
	if got := strings.Join(names, ","); !strings.Contains(got, "savepoint sp") || strings.Contains(got, "checkpoint 2") || strings.Contains(got, "checkpoint 4") || !strings.Contains(got, "checkpoint 3") {
		t.Fatalf("snapshots after collection: %s", got)
	}
	if _, err := s.cs.SnapshotOf(ctx, 2, ""); err == nil {
		t.Fatal("a collected checkpoint was offered for a restore")
	}
}
