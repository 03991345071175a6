package stream

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/weirflow/weir/pkg/checkpoint"
	"github.com/weirflow/weir/pkg/keygroup"
	"github.com/weirflow/weir/pkg/state"
	"github.com/weirflow/weir/pkg/watermark"
)

// restoreState decides where the instance's state comes from before the
// store opens, and returns the manifest restored (nil: local state, or a
// first start):
//
//   - local state built under the current assignment wins;
//   - otherwise, on a new host, the latest checkpoint taken under the
//     current assignment, when there is one;
//   - otherwise the checkpoint the assignment names, from which the state
//     of the key groups the instance now owns is assembled.
func (rn *run) restoreState(ctx context.Context, dir string) (*checkpoint.Manifest, error) {
	_, statErr := os.Stat(dir)
	local := statErr == nil
	a := rn.lay.assignment
	if a == nil {
		if local {
			return nil, nil // local state wins: it is as new as the last commit
		}
		if m, err := rn.restoreLatest(ctx, dir, 0); m != nil || err != nil {
			return m, err
		}
		return rn.startOver(ctx)
	}
	if local {
		v, err := localAssignment(dir, rn.plan)
		if err != nil {
			return nil, err
		}
		if v == a.Version {
			return nil, nil
		}
		rn.log.Info("assignment changed: rebuilding state", "local", v, "assignment", a.Version, "checkpoint", a.Checkpoint)
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
	}
	if m, err := rn.restoreLatest(ctx, dir, a.Version); m != nil || err != nil {
		return m, err
	}
	rn.restoring = a.Checkpoint
	rn.restoringSavepoint = rn.fromSavepoint(ctx, a)
	// An instance that owns what it owned in the checkpoint restores its own
	// snapshot whole; the others assemble theirs.
	if key := a.Manifests[rn.cfg.Operator+"/"+rn.cfg.Instance]; key != "" {
		m, err := rn.bar.store.Manifest(ctx, key)
		if err != nil {
			return nil, err
		}
		if lo, hi := m.PartitionRange(len(rn.base.inputs)); lo == rn.lay.lo && hi == rn.lay.hi {
			return rn.restoreFrom(ctx, key, dir)
		}
	}
	return rn.rebuild(ctx, dir, a.Checkpoint, a.Manifests)
}

// startOver is a new host's start with no checkpoint to restore. An
// instance that ran before — it is registered, or fenced — lost its state
// before the pipeline's first checkpoint: it starts from nothing, as a
// first start does, but as a new generation whose fence disowns every
// frame the lost one wrote. Those frames would otherwise share the new
// ones' message IDs — the same producer, generation and sequence — and
// JetStream would drop the new frames as their duplicates though they
// hold other records (weir chaos found it: 1,880 of 2,998 results lost).
// Its readers, starting over too, wait for that fence before reading its
// frames, as readers restored from a checkpoint do. It returns nil for an
// instance that never ran.
func (rn *run) startOver(ctx context.Context) (*checkpoint.Manifest, error) {
	op, inst := rn.cfg.Operator, rn.cfg.Instance
	registered, err := rn.bar.store.Instances(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	_, ran := registered[op+"/"+inst]
	ran = ran || rn.interrupted
	if !ran {
		// A clean stop deregisters: the fence of an earlier restore, or
		// frames on the output edge — only this instance writes it before
		// the first checkpoint, since rescaling needs one — tell too.
		if _, ran, err = rn.bar.store.Fence(ctx, op, inst); err != nil {
			return nil, fmt.Errorf("stream: %w", err)
		}
	}
	if !ran && rn.plan.output != nil && !rn.plan.outputView {
		// (A view's writer has no output stream: the registry and the
		// fence tell.)
		s, err := rn.js.Stream(ctx, rn.plan.output.StreamName())
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("stream: %w", err)
		}
		ran = err == nil && s.CachedInfo().State.Msgs > 0
	}
	if !ran {
		return nil, nil
	}
	rn.log.Warn("no local state and no checkpoint to restore: starting over from the beginning of the input, as a new generation")
	m := &checkpoint.Manifest{Operator: op, Instance: inst}
	// Marked like a restore, before the store makes the state directory:
	// a start-over killed before its fence starts over again, rather than
	// take what it began for local state of the lost generation.
	rn.bar.startedOver = true
	if err := rn.markRestored(m); err != nil {
		return nil, err
	}
	return m, nil
}

// restoreLatest restores the instance's own snapshot of the latest
// completed checkpoint, if that checkpoint was taken under assignment
// version.
func (rn *run) restoreLatest(ctx context.Context, dir string, version uint64) (*checkpoint.Manifest, error) {
	latest, _, err := rn.bar.store.Latest(ctx)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if latest.Assignment != version || (rn.lay.assignment != nil && latest.Checkpoint <= rn.lay.assignment.Checkpoint) {
		return nil, nil
	}
	key := latest.Manifests[rn.cfg.Operator+"/"+rn.cfg.Instance]
	if key == "" {
		return nil, nil // this instance is new to the pipeline
	}
	rn.restoring = latest.Checkpoint
	return rn.restoreFrom(ctx, key, dir)
}

// fromSavepoint reports whether assignment a restarts from a savepoint:
// one of its snapshots is a savepoint's, or its checkpoint was taken for
// one (operators that snapshot at a barrier file theirs as a checkpoint's).
func (rn *run) fromSavepoint(ctx context.Context, a *checkpoint.Assignment) bool {
	for _, key := range a.Manifests {
		if strings.HasPrefix(key, "savepoint.") {
			return true
		}
	}
	r, err := rn.bar.store.GetRecord(ctx, a.Checkpoint)
	return err == nil && r.Savepoint != ""
}

// localAssignment reads the assignment version local state was built under.
func localAssignment(dir string, p plan) (uint64, error) {
	st, err := state.Open(dir, state.Options{Families: p.families, KeyGroups: p.keyGroups})
	if err != nil {
		return 0, fmt.Errorf("stream: open state: %w", err)
	}
	defer st.Close()
	v, ok, err := st.Meta(metaAssignment)
	if err != nil || !ok || len(v) != 8 {
		return 0, err
	}
	return binary.BigEndian.Uint64(v), nil
}

// rebuild assembles the instance's state in dir from checkpoint n: the key
// groups it owns, with their timers, from the snapshots of every instance
// of its operator that owned any of them, the positions of its input
// partitions from their previous owners, and their watermarks. n 0 starts
// empty. It returns a manifest describing the cut for fencing.
func (rn *run) rebuild(ctx context.Context, dir string, n uint64, manifests map[string]string) (*checkpoint.Manifest, error) {
	start := time.Now()
	me := rn.cfg.Operator + "/" + rn.cfg.Instance
	tmp := dir + ".restoring"
	_ = os.RemoveAll(tmp)
	dst, err := state.Open(tmp, state.Options{FS: rn.cfg.StateFS, Families: rn.plan.families, KeyGroups: rn.plan.keyGroups, Logger: rn.log})
	if err != nil {
		return nil, fmt.Errorf("stream: rebuild state: %w", err)
	}
	defer func() {
		if dst != nil {
			dst.Close()
		}
		_ = os.RemoveAll(tmp)
	}()
	cut := &checkpoint.Manifest{Operator: rn.cfg.Operator, Instance: rn.cfg.Instance, Checkpoint: n}
	if f, ok, err := rn.bar.store.Fence(ctx, rn.cfg.Operator, rn.cfg.Instance); err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	} else if ok {
		cut.Generation = f.Generation
	}
	var tracker *watermark.Tracker
	if rn.plan.strategy != "" && rn.plan.strategy != watermark.None {
		tracker = watermark.NewTracker(rn.chans, rn.plan.idleTimeout, rn.plan.drift)
	}
	var trackers [][]byte
	positions := map[string]state.Position{}
	// Results an old instance held for a transactional sink go to one heir,
	// the new instance owning its first partition, which publishes them
	// under the old writer's commit markers (txn.go).
	var carried [][]byte
	var keys int64
	for _, owner := range slices.Sorted(maps.Keys(manifests)) {
		op, _, _ := strings.Cut(owner, "/")
		if op != rn.cfg.Operator {
			continue
		}
		m, err := rn.bar.store.Manifest(ctx, manifests[owner])
		if err != nil {
			return nil, err
		}
		if v := rn.schemaVersion(); m.SchemaVersion != v {
			return nil, fmt.Errorf("stream: refusing to restore: snapshot %s has state schema version %d, operator %s reads version %d; restore a compatible savepoint or migrate the state", m.Key(), m.SchemaVersion, rn.cfg.Operator, v)
		}
		if owner == me {
			cut.Outputs, cut.Generation = m.Outputs, max(cut.Generation, m.Generation)
		}
		first, last := m.PartitionRange(len(rn.base.inputs))
		lo, hi := max(first, rn.lay.lo), min(last, rn.lay.hi)
		if lo >= hi {
			continue // owned nothing this instance owns now
		}
		if err := rn.checkMeaning(&m, manifests[owner]); err != nil {
			return nil, err
		}
		src := filepath.Join(tmp+".src", m.Instance)
		_ = os.RemoveAll(src)
		if err := rn.bar.store.Download(ctx, m, src); err != nil {
			return nil, err
		}
		old, err := state.Open(src, state.Options{Families: rn.plan.families, KeyGroups: rn.plan.keyGroups, Logger: rn.log})
		if err != nil {
			return nil, fmt.Errorf("stream: open snapshot %s: %w", m.Key(), err)
		}
		kl := keygroup.Layout{Groups: rn.plan.keyGroups, Partitions: len(rn.base.inputs)}
		k, err := dst.Import(old, func(kg int) bool { p := kl.PartitionOf(kg); return p >= lo && p < hi })
		keys += k
		if err == nil {
			var pos map[string]state.Position
			if pos, err = old.Positions(); err == nil {
				for _, in := range rn.base.inputs[lo:hi] {
					if p, ok := pos[in.Name]; ok {
						positions[in.Name] = p
					}
				}
			}
		}
		if err == nil && rn.plan.output != nil && rn.plan.output.Transactional && lo == first {
			err = old.HeldOutputs(0, func(_ uint64, v []byte) error {
				carried = append(carried, v)
				return nil
			})
		}
		if err == nil && tracker != nil {
			if v, ok, merr := old.Meta(metaWatermarks); merr != nil {
				err = merr
			} else if ok {
				trackers = append(trackers, v)
			}
		}
		old.Close()
		_ = os.RemoveAll(src)
		if err != nil {
			return nil, fmt.Errorf("stream: rebuild from %s: %w", m.Key(), err)
		}
	}
	_ = os.RemoveAll(tmp + ".src")
	// The batch holds the store's writer, which Import needs: it opens now.
	b := dst.NewBatch()
	defer b.Close()
	for name, p := range positions {
		if err := b.SetPosition(name, p); err != nil {
			return nil, err
		}
	}
	if tracker != nil && len(trackers) > 0 {
		// A channel is one writer's on one input partition: its progress
		// comes from every channel of that partition in the snapshots,
		// whichever writers the old layout had (Relayout).
		err := tracker.Relayout(trackers, func(input, saved string) bool {
			part, _, _ := strings.Cut(saved, "@")
			return rn.chanInput[input] == part
		})
		if err != nil {
			return nil, fmt.Errorf("stream: rebuild watermarks: %w", err)
		}
		v, err := tracker.MarshalBinary()
		if err != nil {
			return nil, err
		}
		if err := b.PutMeta(metaWatermarks, v); err != nil {
			return nil, err
		}
	}
	if len(carried) > 0 {
		// Checkpoint n completed: every carried result is released at start.
		held := txnState{hseq: uint64(len(carried)), cutThrough: uint64(len(carried)), cuts: []txnCut{{n, uint64(len(carried))}}}
		for i, v := range carried {
			if err := b.HoldOutput(uint64(i+1), v); err != nil {
				return nil, err
			}
		}
		if err := b.PutMeta(metaTxn, held.marshal()); err != nil {
			return nil, err
		}
	}
	if len(cut.Outputs) > 0 {
		if err := b.PutMeta(metaFrameSeqs, encodeSeqs(cut.Outputs)); err != nil {
			return nil, err
		}
	}
	if err := b.PutMeta(metaGeneration, binary.BigEndian.AppendUint64(nil, max(cut.Generation, 1))); err != nil {
		return nil, err
	}
	if err := b.Commit(); err != nil {
		return nil, err
	}
	if err := dst.Close(); err != nil {
		return nil, err
	}
	dst = nil
	if err := rn.markRestored(cut); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, err
	}
	rn.obs.metrics.Restored(ctx, time.Since(start))
	rn.log.Info("rebuilt state for the assignment", "checkpoint", n, "assignment", rn.lay.version,
		"partitions", strconv.Itoa(rn.lay.lo)+".."+strconv.Itoa(rn.lay.hi-1), "keys", keys, "took", time.Since(start))
	return cut, nil
}

// RestoredMarker is the file in an instance's data directory that names
// the snapshot its state was restored from and not yet fenced: `weir
// savepoint restore` writes it with a manifest key, and every restore writes
// it (as JSON of the cut) before the state is put in place. At start an
// instance with the marker fences its previous generations, as after any
// restore, and removes the marker only then: a crash in between cannot
// leave a restored state running an old generation.
const RestoredMarker = "restored-from"

// pendingRestore is the marker's content when the runtime wrote it.
type pendingRestore struct {
	Checkpoint uint64   `json:"checkpoint"`
	Generation uint64   `json:"generation"`
	Outputs    []uint64 `json:"outputs,omitempty"`
	// StartedOver marks a start-over (startOver) rather than a restore.
	StartedOver bool `json:"started_over,omitempty"`
}

// markRestored writes the marker of a restore about to be put in place.
func (rn *run) markRestored(m *checkpoint.Manifest) error {
	if err := os.MkdirAll(rn.cfg.DataDir, 0o755); err != nil {
		return err
	}
	b, _ := json.Marshal(pendingRestore{Checkpoint: m.Checkpoint, Generation: m.Generation, Outputs: m.Outputs, StartedOver: rn.bar.startedOver})
	return os.WriteFile(markerPath(rn.cfg.DataDir), b, 0o644)
}

// restoredByHand reads the marker of a restore not yet fenced: a savepoint
// restored by `weir savepoint restore`, or a restore interrupted before its
// fence. A marker without the state it restored is dropped.
func (rn *run) restoredByHand(ctx context.Context, stateDir string) (*checkpoint.Manifest, error) {
	p := markerPath(rn.cfg.DataDir)
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var pr pendingRestore
	if json.Unmarshal(data, &pr) == nil && pr.StartedOver {
		// A start-over killed before its fence: whatever state it began
		// goes, and the start decides again — a checkpoint or an
		// assignment may have come meanwhile — knowing the instance ran.
		if err := os.RemoveAll(stateDir); err != nil {
			return nil, err
		}
		if err := os.Remove(p); err != nil {
			return nil, err
		}
		rn.log.Warn("a start-over was interrupted before its fence: its state goes, and the start decides again")
		rn.interrupted = true
		return nil, nil
	}
	if _, err := os.Stat(stateDir); err != nil {
		return nil, os.Remove(p) // the crash came before the state was in place
	}
	if json.Unmarshal(data, &pr) == nil {
		return &checkpoint.Manifest{Operator: rn.cfg.Operator, Instance: rn.cfg.Instance,
			Checkpoint: pr.Checkpoint, Generation: pr.Generation, Outputs: pr.Outputs}, nil
	}
	key := string(data)
	m, err := rn.bar.store.Manifest(ctx, key)
	if err != nil {
		return nil, err
	}
	if v := rn.schemaVersion(); m.SchemaVersion != v {
		return nil, fmt.Errorf("stream: refusing to start: the savepoint restored here (%s) has state schema version %d, operator %s reads version %d", key, m.SchemaVersion, rn.cfg.Operator, v)
	}
	if err := rn.checkMeaning(&m, key); err != nil {
		return nil, err
	}
	return &m, nil
}

// restoreFrom downloads a snapshot into dir after checking that the
// operator can read it.
func (rn *run) restoreFrom(ctx context.Context, key, dir string) (*checkpoint.Manifest, error) {
	m, err := rn.bar.store.Manifest(ctx, key)
	if err != nil {
		return nil, err
	}
	if m.Operator != rn.cfg.Operator {
		return nil, fmt.Errorf("stream: refusing to restore: snapshot %s is of operator %s, not %s", key, m.Operator, rn.cfg.Operator)
	}
	if v := rn.schemaVersion(); m.SchemaVersion != v {
		return nil, fmt.Errorf("stream: refusing to restore: snapshot %s has state schema version %d, operator %s reads version %d; restore a compatible savepoint or migrate the state", key, m.SchemaVersion, rn.cfg.Operator, v)
	}
	if err := rn.checkMeaning(&m, key); err != nil {
		return nil, err
	}
	start := time.Now()
	tmp := dir + ".restoring"
	_ = os.RemoveAll(tmp)
	if err := rn.bar.store.Download(ctx, m, tmp); err != nil {
		return nil, err
	}
	if err := rn.markRestored(&m); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, err
	}
	rn.obs.metrics.Restored(ctx, time.Since(start))
	rn.log.Info("restored", "manifest", key, "bytes", m.FullBytes, "took", time.Since(start))
	return &m, nil
}
