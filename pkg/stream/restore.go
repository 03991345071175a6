package stream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/keygroup"
	"github.com/weirflow/weir/internal/restore"
	"github.com/weirflow/weir/internal/watermark"
	"github.com/weirflow/weir/pkg/state"
)

// RestoredMarker is the file in an instance's data directory that names
// the restore its state came from, not yet fenced (restore.MarkerFile).
const RestoredMarker = restore.MarkerFile

// restorer carries out, for a run, where package restore decides its
// state comes from (restore.Plan): downloading, assembling key groups,
// opening Pebble, marking the restore; then fencing the restored
// generation (fence.go) and judging local state's meaning (meaning.go).
// It is a phase of a start, not a part of the run: the run makes one with
// what it needs (run.restorer).
type restorer struct {
	cfg    *Config
	plan   *plan
	base   *plan // the contract's, for every input partition
	lay    *layout
	schema int // the operator's state schema version
	conn   *conn
	ckpts  *checkpoint.Store
	store  *state.Store // nil until the store opens
	// fencing's startedOver and restoredFrom say what the restore was.
	fencing *fencing
	log     *slog.Logger
	obs     *observer
}

// restorer is the run's restorer, as the run stands.
func (rn *run) restorer() *restorer {
	return &restorer{cfg: &rn.rt.cfg, plan: &rn.plan, base: &rn.rt.base, lay: &rn.lay, schema: rn.rt.schemaVersion(),
		conn: &rn.conn, ckpts: rn.bar.store, store: rn.store, fencing: &rn.in.fencing, log: rn.rt.log, obs: &rn.obs}
}

// restoreInstance is this instance as package restore plans for it.
func (rs *restorer) restoreInstance() restore.Instance {
	in := restore.Instance{
		Operator: rs.cfg.Operator, Instance: rs.cfg.Instance, Contract: rs.plan.contract,
		Assignment: rs.lay.assignment, Partitions: len(rs.base.inputs), Lo: rs.lay.lo, Hi: rs.lay.hi,
		SchemaVersion: rs.schema, Meaning: rs.meaning(),
		MeaningOf: func(op string) (checkpoint.Meaning, error) {
			return MeaningOf(rs.plan.contract, op, nil)
		},
		SemanticMigration: rs.cfg.SemanticMigration, Log: rs.log,
	}
	if o := rs.plan.output; o != nil && !rs.plan.outputView {
		in.Output = o.StreamName()
	}
	return in
}

// placeState has package restore decide where the instance's state comes
// from, before the store opens, and carries the plan out. It returns the
// plan and the cut to fence: nil when the state is local or a first
// start's. A restore that finds its checkpoint corrupt falls back.
func (rs *restorer) placeState(ctx context.Context, dir string) (restore.Plan, *checkpoint.Manifest, error) {
	in := rs.restoreInstance()
	opts := state.Options{Families: rs.plan.families, KeyGroups: rs.plan.keyGroups}
	local, err := restore.ReadLocal(rs.cfg.DataDir, dir, opts, rs.lay.assignment != nil)
	if err != nil {
		return restore.Plan{}, nil, err
	}
	p, err := restore.Decide(ctx, rs.conn.js, rs.ckpts, in, local)
	var cut *checkpoint.Manifest
	if err == nil {
		cut, err = rs.carryOut(ctx, p, dir)
	}
	if errors.Is(err, checkpoint.ErrCorrupt) {
		return p, nil, rs.fallBack(ctx, in, p, err)
	}
	return p, cut, err
}

// carryOut puts the state plan p names in place in dir.
func (rs *restorer) carryOut(ctx context.Context, p restore.Plan, dir string) (*checkpoint.Manifest, error) {
	// The state goes before its marker: a crash in between must not
	// leave a start-over's state without the marker that disowns it.
	if p.Wipe {
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
	}
	if p.DropMarker {
		if err := restore.RemoveMarker(rs.cfg.DataDir); err != nil {
			return nil, err
		}
	}
	switch {
	case p.Kind == restore.Refuse:
		return nil, p.Err()
	case p.Kind == restore.Reopen, p.Kind == restore.StartOver && !p.Ran:
		return nil, nil
	case p.Kind == restore.StartOver:
		rs.log.Warn(p.Why)
		// Marked like a restore, before the store makes the state
		// directory: a start-over killed before its fence starts over
		// again, rather than take what it began for local state of the
		// lost generation.
		rs.fencing.startedOver = true
		return p.Cut, rs.markRestored(p.Cut)
	case p.InPlace:
		return p.Cut, nil
	case p.Whole != "":
		return p.Cut, rs.restoreWhole(ctx, p.Cut, dir)
	}
	return p.Cut, rs.rebuild(ctx, dir, p)
}

// fallBack answers a restore that found its checkpoint corrupt (cause
// wraps checkpoint.ErrCorrupt) as restore.DecideFallBack plans: the pipeline
// restarts from an older checkpoint, and this run ends to start again
// under the new assignment — or the instance refuses to start.
func (rs *restorer) fallBack(ctx context.Context, in restore.Instance, failed restore.Plan, cause error) error {
	p, err := restore.DecideFallBack(ctx, rs.ckpts, in, failed, cause)
	if err != nil {
		return err
	}
	if p.Kind == restore.Refuse {
		return p.Err()
	}
	_, err = restore.Restart(ctx, rs.conn.js, in, p)
	if errors.Is(err, checkpoint.ErrConflict) {
		return errReassigned // another instance fell back first
	}
	if err != nil {
		return errors.Join(cause, err)
	}
	return errReassigned
}

// rebuild assembles the instance's state in dir from the parts of plan p
// (restore.Part): the key groups it owns, with their timers, from the
// snapshots of every instance of its operator that owned any of them,
// the positions of its input partitions from their previous owners, and
// their watermarks. No parts start empty, at p.Cut.
func (rs *restorer) rebuild(ctx context.Context, dir string, pl restore.Plan) error {
	start := time.Now()
	tmp := dir + ".restoring"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	dst, err := state.Open(tmp, state.Options{FS: rs.cfg.Faults.stateFS(), Families: rs.plan.families, KeyGroups: rs.plan.keyGroups, Logger: rs.log})
	if err != nil {
		return fmt.Errorf("stream: rebuild state: %w", err)
	}
	defer func() {
		if dst != nil {
			dst.Close()
		}
		if err := os.RemoveAll(tmp); err != nil {
			rs.log.Warn("could not remove what a rebuild left", "dir", tmp, "err", err)
		}
	}()
	cut := pl.Cut
	var tracker *watermark.Tracker
	if rs.plan.strategy != "" && rs.plan.strategy != watermark.None {
		tracker = watermark.NewTracker(rs.lay.chans, rs.plan.idleTimeout, rs.plan.drift)
	}
	var trackers [][]byte
	var ingressStreams []byte // the snapshots' metaIngressStreams
	positions := map[string]state.Position{}
	// Results an old instance held for a transactional sink go to one heir,
	// the new instance owning its first partition, which publishes them
	// under the old writer's commit markers (txn.go).
	var carried [][]byte
	var keys int64
	for _, part := range pl.Parts {
		m, lo, hi := part.Manifest, part.Lo, part.Hi
		src := filepath.Join(tmp+".src", m.Instance)
		if err := os.RemoveAll(src); err != nil {
			return err
		}
		if err := rs.ckpts.Download(ctx, m, src); err != nil {
			return err
		}
		old, err := state.Open(src, state.Options{Families: rs.plan.families, KeyGroups: rs.plan.keyGroups, Logger: rs.log})
		if err != nil {
			return fmt.Errorf("stream: open snapshot %s: %w", m.Key(), err)
		}
		kl := keygroup.Layout{Groups: rs.plan.keyGroups, Partitions: len(rs.base.inputs)}
		k, err := dst.Import(old, func(kg int) bool { p := kl.PartitionOf(kg); return p >= lo && p < hi })
		keys += k
		if err == nil {
			var pos map[string]state.Position
			if pos, err = old.Positions(); err == nil {
				err = rs.plan.checkInputName(pos, rs.cfg.Operator)
			}
			if err == nil {
				for _, in := range rs.base.inputs[lo:hi] {
					if p, ok := pos[in.Name]; ok {
						positions[in.Name] = p
					}
				}
			}
		}
		if err == nil && rs.plan.output != nil && rs.plan.output.Transactional && lo == part.First {
			err = old.HeldOutputs(0, func(_ uint64, v []byte) error {
				carried = append(carried, v)
				return nil
			})
		}
		if err == nil {
			var v []byte
			var ok bool
			if v, ok, err = old.Meta(metaIngressStreams); ok && ingressStreams == nil {
				ingressStreams = v
			}
		}
		if err == nil && tracker != nil {
			if v, ok, merr := old.Meta(metaWatermarks); merr != nil {
				err = merr
			} else if ok {
				trackers = append(trackers, v)
			}
		}
		old.Close()
		if err != nil {
			return fmt.Errorf("stream: rebuild from %s: %w", m.Key(), err)
		}
	}
	if err := os.RemoveAll(tmp + ".src"); err != nil {
		return err
	}
	// The batch holds the store's writer, which Import needs: it opens now.
	b := dst.NewBatch()
	defer b.Close()
	for name, p := range positions {
		if err := b.SetPosition(name, p); err != nil {
			return err
		}
	}
	if tracker != nil && len(trackers) > 0 {
		// A channel is one writer's on one input partition: its progress
		// comes from every channel of that partition in the snapshots,
		// whichever writers the old layout had (Relayout).
		err := tracker.Relayout(trackers, func(input, saved string) bool {
			part, _, _ := strings.Cut(saved, "@")
			return rs.lay.chanInput[input] == part
		})
		if err != nil {
			return fmt.Errorf("stream: rebuild watermarks: %w", err)
		}
		v, err := tracker.MarshalBinary()
		if err != nil {
			return err
		}
		if err := b.PutMeta(metaWatermarks, v); err != nil {
			return err
		}
	}
	if len(carried) > 0 {
		// Checkpoint n completed: every carried result is released at start.
		held := txnState{hseq: uint64(len(carried)), cutThrough: uint64(len(carried)), cuts: []txnCut{{pl.Checkpoint, uint64(len(carried))}}}
		for i, v := range carried {
			if err := b.HoldOutput(uint64(i+1), v); err != nil {
				return err
			}
		}
		if err := b.PutMeta(metaTxn, held.marshal()); err != nil {
			return err
		}
	}
	if len(cut.Outputs) > 0 {
		if err := b.PutMeta(metaFrameSeqs, encodeSeqs(cut.Outputs)); err != nil {
			return err
		}
	}
	if err := b.PutMeta(metaGeneration, binary.BigEndian.AppendUint64(nil, max(cut.Generation, 1))); err != nil {
		return err
	}
	if ingressStreams != nil {
		// The positions are sequences of the snapshots' streams.
		if err := b.PutMeta(metaIngressStreams, ingressStreams); err != nil {
			return err
		}
	}
	if err := b.Commit(); err != nil {
		return err
	}
	if err := dst.Close(); err != nil {
		return err
	}
	dst = nil
	if err := rs.markRestored(cut); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	rs.obs.metrics.Restored(ctx, time.Since(start))
	rs.log.Info("rebuilt state for the assignment", "checkpoint", pl.Checkpoint, "assignment", rs.lay.version,
		"partitions", strconv.Itoa(rs.lay.lo)+".."+strconv.Itoa(rs.lay.hi-1), "keys", keys, "took", time.Since(start))
	return nil
}

// markRestored writes the marker of a restore about to be put in place.
func (rs *restorer) markRestored(m *checkpoint.Manifest) error {
	return restore.WriteMarker(rs.cfg.DataDir, restore.MarkerOf(*m, rs.fencing.startedOver))
}

// restoreWhole downloads snapshot m into dir.
func (rs *restorer) restoreWhole(ctx context.Context, m *checkpoint.Manifest, dir string) error {
	start := time.Now()
	tmp := dir + ".restoring"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := rs.ckpts.Download(ctx, *m, tmp); err != nil {
		return err
	}
	if err := rs.markRestored(m); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	rs.obs.metrics.Restored(ctx, time.Since(start))
	rs.log.Info("restored", "manifest", m.Key(), "bytes", m.FullBytes, "took", time.Since(start))
	return nil
}
