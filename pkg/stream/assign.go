package stream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weirflow/weir/pkg/checkpoint"
	"github.com/weirflow/weir/pkg/keygroup"
	"github.com/weirflow/weir/pkg/state"
	"github.com/weirflow/weir/pkg/watermark"
)

// errReassigned stops a run whose pipeline was rescaled: Run starts again
// under the new assignment.
var errReassigned = errors.New("stream: the pipeline's assignment changed")

// errRetired stops a run whose instance the assignment no longer names.
var errRetired = errors.New("stream: instance retired by the pipeline's assignment")

// layout is what the pipeline's assignment means for this instance: the
// input partitions and key groups it owns, and the writers of its input.
type layout struct {
	// assignment is nil when the pipeline was never scaled: the instance
	// owns every partition and every key group.
	assignment *checkpoint.Assignment
	version    uint64
	// lo, hi are the owned input partitions; groupLo, groupHi their key
	// groups.
	lo, hi           int
	groupLo, groupHi int
	// writers are the upstream instances writing the input edge
	// ("operator/instance") when the upstream operator is assigned; nil
	// when each partition has one writer.
	writers []string
}

// owns reports whether the instance owns key group kg.
func (l layout) owns(kg int) bool { return kg >= l.groupLo && kg < l.groupHi }

// loadLayout reads the assignment and narrows the plan's inputs to the
// partitions this instance owns.
func (rt *Runtime) loadLayout(ctx context.Context) error {
	all := rt.plan.inputs
	lay := layout{lo: 0, hi: len(all), groupLo: 0, groupHi: rt.plan.keyGroups}
	a, _, err := rt.bar.store.Assignment(ctx)
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
	case err != nil:
		return fmt.Errorf("stream: read assignment: %w", err)
	default:
		lay.assignment, lay.version = &a, a.Version
		rt.layVersion.Store(a.Version)
		k, n, ok := a.Index(rt.cfg.Operator, rt.cfg.Instance)
		if ok && k < 0 {
			return fmt.Errorf("%w: operator %s runs as instances %s (assignment version %d), not %s",
				errRetired, rt.cfg.Operator, strings.Join(a.Operators[rt.cfg.Operator], ", "), a.Version, rt.cfg.Instance)
		}
		if ok {
			lay.lo, lay.hi = checkpoint.Owned(k, n, len(all))
		}
		if up := rt.plan.upstream; up != "" {
			for _, inst := range a.Operators[up] {
				lay.writers = append(lay.writers, up+"/"+inst)
			}
		}
	}
	kl := keygroup.Layout{Groups: rt.plan.keyGroups, Partitions: len(all)}
	if lay.hi > lay.lo {
		lay.groupLo, _ = kl.GroupRange(lay.lo)
		_, lay.groupHi = kl.GroupRange(lay.hi - 1)
	} else {
		lay.groupLo, lay.groupHi = 0, 0
	}
	rt.plan.inputs = all[lay.lo:lay.hi]
	rt.lay = lay
	rt.chans, rt.chanInput = nil, map[string]string{}
	for _, in := range rt.plan.inputs {
		if lay.writers == nil {
			rt.chans = append(rt.chans, in.Name)
			rt.chanInput[in.Name] = in.Name
			continue
		}
		for _, w := range lay.writers {
			c := channelName(in.Name, w)
			rt.chans = append(rt.chans, c)
			rt.chanInput[c] = in.Name
		}
	}
	return nil
}

// channelName names the channel of one writer on one input partition.
func channelName(input, writer string) string { return input + "@" + writer }

// channel returns the channel a message of producer on input belongs to,
// or "" for a writer the assignment does not name (its control records
// are ignored; a fenced zombie's frames never get here).
func (rt *Runtime) channel(input, producer string) string {
	if rt.lay.writers == nil {
		return input
	}
	if slices.Contains(rt.lay.writers, producer) {
		return channelName(input, producer)
	}
	return ""
}

// channelsOf lists the channels of an input partition.
func (rt *Runtime) channelsOf(input string) []string {
	if rt.lay.writers == nil {
		return []string{input}
	}
	out := make([]string, len(rt.lay.writers))
	for i, w := range rt.lay.writers {
		out[i] = channelName(input, w)
	}
	return out
}

// watchAssignment makes the step loop stop when the assignment changes.
// It starts before the assignment is read, so no change is missed.
func (rt *Runtime) watchAssignment(ctx context.Context) error {
	// The channel is this run's: a previous run's watcher, still winding
	// down, signals its own.
	ch := make(chan struct{}, 1)
	rt.reassigned = ch
	rt.layVersion.Store(0)
	return rt.bar.store.WatchAssignment(ctx, func(a checkpoint.Assignment) {
		if a.Version != rt.layVersion.Load() {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	})
}

const metaAssignment = "assignment"

// restoreState decides where the instance's state comes from before the
// store opens, and returns the manifest restored (nil: local state, or a
// first start):
//
//   - local state built under the current assignment wins;
//   - otherwise, on a new host, the latest checkpoint taken under the
//     current assignment, when there is one;
//   - otherwise the checkpoint the assignment names, from which the state
//     of the key groups the instance now owns is assembled.
func (rt *Runtime) restoreState(ctx context.Context, dir string) (*checkpoint.Manifest, error) {
	_, statErr := os.Stat(dir)
	local := statErr == nil
	a := rt.lay.assignment
	if a == nil {
		if local {
			return nil, nil // local state wins: it is as new as the last commit
		}
		return rt.restoreLatest(ctx, dir, 0)
	}
	if local {
		v, err := localAssignment(dir, rt.plan)
		if err != nil {
			return nil, err
		}
		if v == a.Version {
			return nil, nil
		}
		rt.log.Info("assignment changed: rebuilding state", "local", v, "assignment", a.Version, "checkpoint", a.Checkpoint)
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
	}
	if m, err := rt.restoreLatest(ctx, dir, a.Version); m != nil || err != nil {
		return m, err
	}
	// An instance that owns what it owned in the checkpoint restores its own
	// snapshot whole; the others assemble theirs.
	if key := a.Manifests[rt.cfg.Operator+"/"+rt.cfg.Instance]; key != "" {
		m, err := rt.bar.store.Manifest(ctx, key)
		if err != nil {
			return nil, err
		}
		if lo, hi := m.PartitionRange(len(rt.base.inputs)); lo == rt.lay.lo && hi == rt.lay.hi {
			return rt.restoreFrom(ctx, key, dir)
		}
	}
	return rt.rebuild(ctx, dir, a.Checkpoint, a.Manifests)
}

// restoreLatest restores the instance's own snapshot of the latest
// completed checkpoint, if that checkpoint was taken under assignment
// version.
func (rt *Runtime) restoreLatest(ctx context.Context, dir string, version uint64) (*checkpoint.Manifest, error) {
	latest, _, err := rt.bar.store.Latest(ctx)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if latest.Assignment != version || (rt.lay.assignment != nil && latest.Checkpoint <= rt.lay.assignment.Checkpoint) {
		return nil, nil
	}
	key := latest.Manifests[rt.cfg.Operator+"/"+rt.cfg.Instance]
	if key == "" {
		return nil, nil // this instance is new to the pipeline
	}
	return rt.restoreFrom(ctx, key, dir)
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
func (rt *Runtime) rebuild(ctx context.Context, dir string, n uint64, manifests map[string]string) (*checkpoint.Manifest, error) {
	start := time.Now()
	me := rt.cfg.Operator + "/" + rt.cfg.Instance
	tmp := dir + ".restoring"
	_ = os.RemoveAll(tmp)
	dst, err := state.Open(tmp, state.Options{Families: rt.plan.families, KeyGroups: rt.plan.keyGroups, Logger: rt.log})
	if err != nil {
		return nil, fmt.Errorf("stream: rebuild state: %w", err)
	}
	defer func() {
		if dst != nil {
			dst.Close()
		}
		_ = os.RemoveAll(tmp)
	}()
	cut := &checkpoint.Manifest{Operator: rt.cfg.Operator, Instance: rt.cfg.Instance, Checkpoint: n}
	if f, ok, err := rt.bar.store.Fence(ctx, rt.cfg.Operator, rt.cfg.Instance); err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	} else if ok {
		cut.Generation = f.Generation
	}
	var tracker *watermark.Tracker
	if rt.plan.strategy != "" && rt.plan.strategy != watermark.None {
		tracker = watermark.NewTracker(rt.chans, rt.plan.idleTimeout, rt.plan.drift)
	}
	trackers := 0
	positions := map[string]state.Position{}
	var keys int64
	for _, owner := range slices.Sorted(maps.Keys(manifests)) {
		op, _, _ := strings.Cut(owner, "/")
		if op != rt.cfg.Operator {
			continue
		}
		m, err := rt.bar.store.Manifest(ctx, manifests[owner])
		if err != nil {
			return nil, err
		}
		if v := rt.schemaVersion(); m.SchemaVersion != v {
			return nil, fmt.Errorf("stream: refusing to restore: snapshot %s has state schema version %d, operator %s reads version %d; restore a compatible savepoint or migrate the state", m.Key(), m.SchemaVersion, rt.cfg.Operator, v)
		}
		if owner == me {
			cut.Outputs, cut.Generation = m.Outputs, max(cut.Generation, m.Generation)
		}
		lo, hi := m.PartitionRange(len(rt.base.inputs))
		lo, hi = max(lo, rt.lay.lo), min(hi, rt.lay.hi)
		if lo >= hi {
			continue // owned nothing this instance owns now
		}
		src := filepath.Join(tmp+".src", m.Instance)
		_ = os.RemoveAll(src)
		if err := rt.bar.store.Download(ctx, m, src); err != nil {
			return nil, err
		}
		old, err := state.Open(src, state.Options{Families: rt.plan.families, KeyGroups: rt.plan.keyGroups, Logger: rt.log})
		if err != nil {
			return nil, fmt.Errorf("stream: open snapshot %s: %w", m.Key(), err)
		}
		kl := keygroup.Layout{Groups: rt.plan.keyGroups, Partitions: len(rt.base.inputs)}
		k, err := dst.Import(old, func(kg int) bool { p := kl.PartitionOf(kg); return p >= lo && p < hi })
		keys += k
		if err == nil {
			var pos map[string]state.Position
			if pos, err = old.Positions(); err == nil {
				for _, in := range rt.base.inputs[lo:hi] {
					if p, ok := pos[in.Name]; ok {
						positions[in.Name] = p
					}
				}
			}
		}
		if err == nil && tracker != nil {
			if v, ok, merr := old.Meta(metaWatermarks); merr != nil {
				err = merr
			} else if ok {
				if trackers == 0 {
					err = tracker.UnmarshalBinary(v)
				} else {
					err = tracker.Merge(v)
				}
				trackers++
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
	if tracker != nil && trackers > 0 {
		v, err := tracker.MarshalBinary()
		if err != nil {
			return nil, err
		}
		if err := b.PutMeta(metaWatermarks, v); err != nil {
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
	if err := rt.markRestored(cut); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, err
	}
	rt.obs.metrics.Restored(ctx, time.Since(start))
	rt.log.Info("rebuilt state for the assignment", "checkpoint", n, "assignment", rt.lay.version,
		"partitions", strconv.Itoa(rt.lay.lo)+".."+strconv.Itoa(rt.lay.hi-1), "keys", keys, "took", time.Since(start))
	return cut, nil
}
