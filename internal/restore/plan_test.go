package restore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/restore"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/state"
)

// world is a real broker with a pipeline's checkpoint store, and the
// snapshots a test puts in it: real Pebble stores, uploaded.
type world struct {
	t   *testing.T
	ctx context.Context
	js  jetstream.JetStream
	st  *checkpoint.Store
}

func newWorld(t *testing.T) *world {
	t.Helper()
	srv := natstest.Run(t)
	js, err := jetstream.New(srv.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	st, err := checkpoint.Open(t.Context(), js, "p", 1, "op")
	if err != nil {
		t.Fatal(err)
	}
	return &world{t: t, ctx: t.Context(), js: js, st: st}
}

var opts = state.Options{Families: []state.Family{{Name: "v", Kind: state.KindValue, MaxKeys: 1 << 10}}, KeyGroups: 16}

// snapshot uploads a snapshot of a real store holding one key, as m
// describes it, and returns its key.
func (w *world) snapshot(m checkpoint.Manifest) string {
	w.t.Helper()
	dir := w.t.TempDir()
	st, err := state.Open(filepath.Join(dir, "state"), opts)
	if err != nil {
		w.t.Fatal(err)
	}
	defer st.Close()
	b := st.NewBatch()
	if err := b.Scope(1, []byte("k"), time.Time{}).Value("v").Set([]byte(m.Instance)); err != nil {
		w.t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		w.t.Fatal(err)
	}
	snap := filepath.Join(dir, "snap")
	if err := st.Snapshot(snap); err != nil {
		w.t.Fatal(err)
	}
	if m.SchemaVersion == 0 {
		m.SchemaVersion = 1
	}
	if _, err := w.st.Upload(w.ctx, snap, m); err != nil {
		w.t.Fatal(err)
	}
	if m.Savepoint != "" {
		return checkpoint.SavepointKey(m.Savepoint, m.Operator, m.Instance)
	}
	return m.Key()
}

// complete records checkpoint n as complete with the snapshots named,
// taken under assignment version, and makes it the latest.
func (w *world) complete(n, version uint64, manifests map[string]string) {
	w.t.Helper()
	acks := map[string]checkpoint.Ack{}
	for inst, key := range manifests {
		acks[inst] = checkpoint.Ack{Checkpoint: n, Manifest: key}
	}
	done := time.Now().Add(time.Duration(n) * time.Second)
	if err := w.st.PutRecord(w.ctx, checkpoint.Record{Checkpoint: n, Status: checkpoint.Complete, Completed: done, Acks: acks, Assignment: version}); err != nil {
		w.t.Fatal(err)
	}
	_, rev, err := w.st.Latest(w.ctx)
	if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
		w.t.Fatal(err)
	}
	if _, err := w.st.Commit(w.ctx, checkpoint.Latest{Checkpoint: n, Completed: done, Manifests: manifests, Assignment: version}, rev); err != nil {
		w.t.Fatal(err)
	}
}

// instance is operator op's instance 0 of a pipeline of 4 input
// partitions, owning all of them, reading state schema version 1.
func instance() restore.Instance {
	return restore.Instance{Operator: "op", Instance: "0", Partitions: 4, Lo: 0, Hi: 4, SchemaVersion: 1}
}

func assignment(version, n uint64, manifests map[string]string, insts ...string) *checkpoint.Assignment {
	return &checkpoint.Assignment{Version: version, Checkpoint: n, Manifests: manifests, Operators: map[string][]string{"op": insts}}
}

// TestDecide plans the start of an instance over a real store for each
// situation an instance starts in.
func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup fills the store and returns the instance and its local
		// state.
		setup func(w *world) (restore.Instance, restore.Local)
		check func(t *testing.T, w *world, p restore.Plan, err error)
	}{{
		name: "first start",
		setup: func(w *world) (restore.Instance, restore.Local) {
			return instance(), restore.Local{}
		},
		check: func(t *testing.T, _ *world, p restore.Plan, err error) {
			if err != nil || p.Kind != restore.StartOver || p.Ran || p.Cut != nil {
				t.Fatalf("%+v %v, want a start over of an instance that never ran", p, err)
			}
		},
	}, {
		name: "a new host of an instance that ran before the first checkpoint",
		setup: func(w *world) (restore.Instance, restore.Local) {
			if err := w.st.Register(w.ctx, checkpoint.Instance{Operator: "op", Instance: "0"}); err != nil {
				t.Fatal(err)
			}
			return instance(), restore.Local{}
		},
		check: func(t *testing.T, _ *world, p restore.Plan, err error) {
			if err != nil || p.Kind != restore.StartOver || !p.Ran || p.Cut == nil || p.Cut.Checkpoint != 0 {
				t.Fatalf("%+v %v, want a start over as a new generation", p, err)
			}
		},
	}, {
		name: "local state current",
		setup: func(w *world) (restore.Instance, restore.Local) {
			w.complete(3, 0, map[string]string{"op/0": w.snapshot(checkpoint.Manifest{Operator: "op", Instance: "0", Checkpoint: 3})})
			return instance(), restore.Local{State: true}
		},
		check: func(t *testing.T, _ *world, p restore.Plan, err error) {
			if err != nil || p.Kind != restore.Reopen || p.Wipe {
				t.Fatalf("%+v %v, want the local state reopened over the latest checkpoint", p, err)
			}
		},
	}, {
		name: "local state built under the current assignment",
		setup: func(w *world) (restore.Instance, restore.Local) {
			in := instance()
			in.Assignment = assignment(2, 0, nil, "0")
			return in, restore.Local{State: true, Built: 2}
		},
		check: func(t *testing.T, _ *world, p restore.Plan, err error) {
			if err != nil || p.Kind != restore.Reopen {
				t.Fatalf("%+v %v, want the local state reopened", p, err)
			}
		},
	}, {
		name: "new host with latest",
		setup: func(w *world) (restore.Instance, restore.Local) {
			w.complete(3, 0, map[string]string{"op/0": w.snapshot(checkpoint.Manifest{Operator: "op", Instance: "0", Checkpoint: 3, Generation: 2, Outputs: []uint64{7}})})
			return instance(), restore.Local{}
		},
		check: func(t *testing.T, _ *world, p restore.Plan, err error) {
			if err != nil || p.Kind != restore.RestoreCheckpoint || p.Checkpoint != 3 || p.Whole != checkpoint.ManifestKey("op", "0", 3) ||
				p.Cut == nil || p.Cut.Generation != 2 || len(p.Cut.Outputs) != 1 {
				t.Fatalf("%+v %v, want checkpoint 3's own snapshot restored whole", p, err)
			}
		},
	}, {
		name: "assignment changed: scaled in from two instances to one",
		setup: func(w *world) (restore.Instance, restore.Local) {
			ms := map[string]string{
				"op/0": w.snapshot(checkpoint.Manifest{Operator: "op", Instance: "0", Checkpoint: 5, Partitions: []int{0, 2}, Generation: 3, Outputs: []uint64{9}}),
				"op/1": w.snapshot(checkpoint.Manifest{Operator: "op", Instance: "1", Checkpoint: 5, Partitions: []int{2, 4}}),
			}
			w.complete(5, 1, ms)
			in := instance()
			in.Assignment = assignment(2, 5, ms, "0")
			return in, restore.Local{State: true, Built: 1}
		},
		check: func(t *testing.T, _ *world, p restore.Plan, err error) {
			if err != nil || p.Kind != restore.RestoreCheckpoint || !p.Wipe || p.Checkpoint != 5 || p.Whole != "" || len(p.Parts) != 2 {
				t.Fatalf("%+v %v, want checkpoint 5 assembled from both snapshots over wiped local state", p, err)
			}
			for i, want := range [][2]int{{0, 2}, {2, 4}} {
				if got := p.Parts[i]; got.Lo != want[0] || got.Hi != want[1] || got.Key != checkpoint.ManifestKey("op", fmt.Sprint(i), 5) {
					t.Errorf("part %d: %s partitions [%d, %d), want [%d, %d)", i, got.Key, got.Lo, got.Hi, want[0], want[1])
				}
			}
			if p.Cut == nil || p.Cut.Generation != 3 || len(p.Cut.Outputs) != 1 || p.Cut.Outputs[0] != 9 {
				t.Errorf("cut %+v, want its own snapshot's generation and frame sequences", p.Cut)
			}
		},
	}, {
		name: "savepoint named by the assignment",
		setup: func(w *world) (restore.Instance, restore.Local) {
			key := w.snapshot(checkpoint.Manifest{Operator: "op", Instance: "0", Checkpoint: 4, Savepoint: "before-upgrade"})
			in := instance()
			in.Assignment = assignment(3, 4, map[string]string{"op/0": key}, "0")
			return in, restore.Local{State: true, Built: 2}
		},
		check: func(t *testing.T, _ *world, p restore.Plan, err error) {
			if err != nil || p.Kind != restore.RestoreSavepoint || p.Savepoint != "before-upgrade" || p.Whole != checkpoint.SavepointKey("before-upgrade", "op", "0") || !p.Wipe {
				t.Fatalf("%+v %v, want savepoint before-upgrade restored whole", p, err)
			}
		},
	}, {
		name: "savepoint put in place by weir savepoint restore",
		setup: func(w *world) (restore.Instance, restore.Local) {
			key := w.snapshot(checkpoint.Manifest{Operator: "op", Instance: "0", Checkpoint: 4, Savepoint: "sp"})
			return instance(), restore.Local{State: true, Marker: &restore.Marker{Format: restore.MarkerFormat, Kind: restore.SavepointPlaced, Manifest: key}}
		},
		check: func(t *testing.T, _ *world, p restore.Plan, err error) {
			if err != nil || p.Kind != restore.RestoreSavepoint || !p.InPlace || p.Savepoint != "sp" || p.Cut == nil || p.Cut.Checkpoint != 4 {
				t.Fatalf("%+v %v, want the savepoint in place fenced", p, err)
			}
		},
	}, {
		name: "a restore killed before its fence",
		setup: func(w *world) (restore.Instance, restore.Local) {
			mk := restore.MarkerOf(checkpoint.Manifest{Checkpoint: 6, Generation: 4, Outputs: []uint64{1, 2}}, false)
			return instance(), restore.Local{State: true, Marker: &mk}
		},
		check: func(t *testing.T, _ *world, p restore.Plan, err error) {
			if err != nil || p.Kind != restore.RestoreCheckpoint || !p.InPlace || p.Cut == nil || p.Cut.Checkpoint != 6 || p.Cut.Generation != 4 || p.Cut.Operator != "op" {
				t.Fatalf("%+v %v, want the restore in place fenced", p, err)
			}
		},
	}, {
		name: "a restore killed before its state was in place",
		setup: func(w *world) (restore.Instance, restore.Local) {
			mk := restore.MarkerOf(checkpoint.Manifest{Checkpoint: 6}, false)
			return instance(), restore.Local{Marker: &mk}
		},
		check: func(t *testing.T, _ *world, p restore.Plan, err error) {
			if err != nil || !p.DropMarker || p.Kind != restore.StartOver {
				t.Fatalf("%+v %v, want the marker dropped and the start decided again", p, err)
			}
		},
	}, {
		name: "a start-over killed before its fence",
		setup: func(w *world) (restore.Instance, restore.Local) {
			mk := restore.MarkerOf(checkpoint.Manifest{}, true)
			return instance(), restore.Local{State: true, Marker: &mk}
		},
		check: func(t *testing.T, _ *world, p restore.Plan, err error) {
			if err != nil || p.Kind != restore.StartOver || !p.Wipe || !p.DropMarker || !p.Ran {
				t.Fatalf("%+v %v, want its state wiped and a start over as a new generation again", p, err)
			}
		},
	}, {
		name: "unrestorable: a snapshot of another state schema version",
		setup: func(w *world) (restore.Instance, restore.Local) {
			w.complete(3, 0, map[string]string{"op/0": w.snapshot(checkpoint.Manifest{Operator: "op", Instance: "0", Checkpoint: 3, SchemaVersion: 2})})
			return instance(), restore.Local{}
		},
		check: func(t *testing.T, _ *world, p restore.Plan, err error) {
			if err != nil || p.Kind != restore.Refuse || p.Err() == nil || !strings.Contains(p.Err().Error(), "state schema version 2") {
				t.Fatalf("%+v %v, want a refusal naming the schema version", p, err)
			}
		},
	}, {
		name: "unrestorable: the assignment's checkpoint record cannot be read",
		setup: func(w *world) (restore.Instance, restore.Local) {
			key := w.snapshot(checkpoint.Manifest{Operator: "op", Instance: "0", Checkpoint: 7})
			kv, err := w.js.KeyValue(w.ctx, checkpoint.BucketName("p"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Put(w.ctx, checkpoint.RecordKey(7), []byte("{not a record")); err != nil {
				t.Fatal(err)
			}
			in := instance()
			in.Assignment = assignment(2, 7, map[string]string{"op/0": key}, "0")
			return in, restore.Local{}
		},
		check: func(t *testing.T, _ *world, p restore.Plan, err error) {
			// Whether it restarts from a savepoint decides whether a
			// corrupt snapshot may fall back: never "not a savepoint".
			if err == nil || p.Checkpoint != 7 {
				t.Fatalf("%+v %v, want the read error", p, err)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			in, local := tc.setup(w)
			p, err := restore.Decide(w.ctx, w.js, w.st, in, local)
			tc.check(t, w, p, err)
		})
	}
}

// TestDecideFallBack: a restore of checkpoint 3 found corrupt falls back
// to the newest older checkpoint that verifies; one of a savepoint
// refuses, as does one with nothing older to fall back to.
func TestDecideFallBack(t *testing.T) {
	w := newWorld(t)
	for n := uint64(1); n <= 3; n++ {
		w.complete(n, 0, map[string]string{"op/0": w.snapshot(checkpoint.Manifest{Operator: "op", Instance: "0", Checkpoint: n})})
	}
	cause := fmt.Errorf("restore 3: %w", checkpoint.ErrCorrupt)
	failed, err := restore.Decide(w.ctx, w.js, w.st, instance(), restore.Local{})
	if err != nil || failed.Kind != restore.RestoreCheckpoint || failed.Checkpoint != 3 {
		t.Fatalf("%+v %v, want checkpoint 3 restored", failed, err)
	}
	p, err := restore.DecideFallBack(w.ctx, w.st, instance(), failed, cause)
	if err != nil || p.Kind != restore.FallBack || p.To.Checkpoint != 2 || p.Checkpoint != 3 || !errors.Is(p.Refusal, checkpoint.ErrCorrupt) {
		t.Fatalf("%+v %v, want a fallback from checkpoint 3 to 2", p, err)
	}

	sp := failed
	sp.Kind, sp.Savepoint = restore.RestoreSavepoint, "sp"
	p, err = restore.DecideFallBack(w.ctx, w.st, instance(), sp, cause)
	if err != nil || p.Kind != restore.Refuse || !errors.Is(p.Err(), checkpoint.ErrCorrupt) || !strings.Contains(p.Err().Error(), "savepoint") {
		t.Fatalf("%+v %v, want a corrupt savepoint refused", p, err)
	}

	first := failed
	first.Checkpoint = 1
	p, err = restore.DecideFallBack(w.ctx, w.st, instance(), first, cause)
	if err != nil || p.Kind != restore.Refuse || !strings.Contains(p.Err().Error(), "no older checkpoint") {
		t.Fatalf("%+v %v, want a refusal: nothing older than checkpoint 1", p, err)
	}
}

// TestMarkerIsReadStrictly: the marker round-trips in its one format;
// anything else — another format, an unknown kind or field, a savepoint
// marker without its manifest, a torn write — is refused as corrupt,
// naming the file.
func TestMarkerIsReadStrictly(t *testing.T) {
	dir := t.TempDir()
	if mk, err := restore.ReadMarker(dir); mk != nil || err != nil {
		t.Fatalf("no marker: %+v %v", mk, err)
	}
	want := restore.MarkerOf(checkpoint.Manifest{Checkpoint: 4, Generation: 2, Outputs: []uint64{3}}, false)
	if err := restore.WriteMarker(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := restore.ReadMarker(dir)
	if err != nil || got == nil || got.Kind != restore.Restored || got.Checkpoint != 4 || got.Generation != 2 || len(got.Outputs) != 1 {
		t.Fatalf("read %+v %v, want %+v", got, err, want)
	}
	if err := restore.WriteMarker(dir, restore.Marker{Kind: restore.SavepointPlaced}); err == nil {
		t.Fatal("a savepoint marker without its manifest was written")
	}
	for _, bad := range []string{
		``,
		`{"format":1,"kind":"restored","checkpoint":4,"gener`,
		`{"checkpoint":4,"generation":2}`,
		`savepoint.sp.op.0`,
		`{"format":2,"kind":"restored"}`,
		`{"format":1,"kind":"rebuilt"}`,
		`{"format":1,"kind":"restored","extra":1}`,
		`{"format":1,"kind":"savepoint"}`,
		`{"format":1,"kind":"restored"} {}`,
	} {
		if err := os.WriteFile(restore.MarkerPath(dir), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		mk, err := restore.ReadMarker(dir)
		if !errors.Is(err, restore.ErrCorruptRecord) || !strings.Contains(err.Error(), restore.MarkerPath(dir)) {
			t.Errorf("marker %q: %+v %v, want it refused as corrupt, naming the file", bad, mk, err)
		}
	}
	if err := restore.RemoveMarker(dir); err != nil {
		t.Fatal(err)
	}
	if err := restore.RemoveMarker(dir); err != nil {
		t.Fatalf("removing no marker: %v", err)
	}
}

// TestLocalRecordsAreReadStrictly: the records a fence writes in the
// state read back; a damaged one is refused, never taken for "none".
func TestLocalRecordsAreReadStrictly(t *testing.T) {
	data := t.TempDir()
	dir := filepath.Join(data, "state")
	st, err := state.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := restore.LastRestore(st); ok || err != nil {
		t.Fatalf("never restored: %v %v", ok, err)
	}
	b := st.NewBatch()
	if err := restore.PutFenced(b, 3, 9, true); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if n, over, ok, err := restore.LastRestore(st); n != 9 || !over || !ok || err != nil {
		t.Fatalf("restored from %d (started over %v, %v): %v", n, over, ok, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := restore.ReadLocal(data, dir, opts, true)
	if err != nil || !l.State || l.Built != 3 || l.Marker != nil {
		t.Fatalf("local %+v %v, want state built under assignment 3", l, err)
	}
	if l, err := restore.ReadLocal(data, filepath.Join(data, "none"), opts, true); err != nil || l.State {
		t.Fatalf("no state: %+v %v", l, err)
	}

	st, err = state.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	b = st.NewBatch()
	for name, v := range map[string][]byte{"assignment": {1, 2, 3}, "restored": {0, 0, 0, 0, 0, 0, 0, 9, 2}, "meaning": []byte("{")} {
		if err := b.PutMeta(name, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := restore.LastRestore(st); !errors.Is(err, restore.ErrCorruptRecord) {
		t.Errorf("a damaged restored record: %v", err)
	}
	if _, _, _, err := restore.LocalMeaning(st); !errors.Is(err, restore.ErrCorruptRecord) {
		t.Errorf("a damaged meaning record: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := restore.ReadLocal(data, dir, opts, true); !errors.Is(err, restore.ErrCorruptRecord) {
		t.Errorf("a damaged assignment record: %v", err)
	}
}
