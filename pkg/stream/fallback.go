package stream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/weirflow/weir/pkg/audit"
	"github.com/weirflow/weir/pkg/checkpoint"
)

// fallBackSnapshots is how many recent checkpoints a fallback considers.
const fallBackSnapshots = 20

// fallBack answers a restore that found its checkpoint corrupt (cause
// wraps checkpoint.ErrCorrupt). One instance cannot restore an older
// checkpoint on its own — its downstream holds state from the newer cut —
// so it restarts the whole pipeline from the newest older checkpoint that
// verifies (checkpoint.Restart), records the fallback and the replay it
// adds in the audit stream, and restarts under the new assignment. A
// savepoint restored on purpose is never replaced by a checkpoint.
func (rn *run) fallBack(ctx context.Context, cause error) error {
	n := rn.restoring
	st := rn.bar.store
	if rn.restoringSavepoint {
		return fmt.Errorf("stream: refusing to start: the savepoint being restored is corrupt: %w; restore another snapshot (weir recover lists them)", cause)
	}
	sns, err := st.Snapshots(ctx, fallBackSnapshots)
	if err != nil {
		return errors.Join(cause, err)
	}
	// A file damaged in place passes Verify, and table files are shared
	// by the checkpoints of a generation: skip every one that has it.
	var bad *checkpoint.CorruptObject
	errors.As(cause, &bad)
	for _, sn := range sns {
		if sn.Savepoint != "" || sn.Checkpoint >= n {
			continue
		}
		if bad != nil && st.Refers(ctx, sn, bad.Object) {
			rn.log.Warn("an older checkpoint shares the corrupt file", "checkpoint", sn.Checkpoint, "object", bad.Object)
			continue
		}
		if err := st.Verify(ctx, sn); err != nil {
			rn.log.Warn("an older checkpoint does not verify either", "checkpoint", sn.Checkpoint, "err", err)
			continue
		}
		if why := rn.unrestorable(ctx, sn); why != "" {
			rn.log.Warn("an older checkpoint is of state this build reads otherwise", "checkpoint", sn.Checkpoint, "why", why)
			continue
		}
		seqs, span := rn.replayAdded(ctx, n, sn)
		a, err := checkpoint.RestartIf(ctx, rn.js, rn.plan.contract, sn, rn.lay.version)
		if errors.Is(err, checkpoint.ErrConflict) {
			return errReassigned // another instance fell back first
		}
		if err != nil {
			return errors.Join(cause, err)
		}
		rn.log.Warn("checkpoint corrupt: the pipeline falls back to an older one", "corrupt", n, "cause", cause,
			"to", sn.Checkpoint, "assignment", a.Version, "replay_sequences", seqs, "replay_span", span)
		_, aerr := audit.Append(ctx, rn.js, rn.plan.pipeline, audit.Record{
			Actor: "weir/" + rn.cfg.Operator + "/" + rn.cfg.Instance, Action: audit.ActionFallback, Target: rn.plan.pipeline,
			From: fmt.Sprintf("checkpoint %d", n), To: sn.String(), Reason: cause.Error(),
			Detail: map[string]any{"assignment": a.Version, "replay_sequences": seqs, "replay_span": span.String()},
		})
		if aerr != nil {
			rn.log.Warn("the fallback could not be recorded in the audit stream", "err", aerr)
		}
		return errReassigned
	}
	return fmt.Errorf("stream: refusing to start: %w; no older checkpoint verifies to fall back to: restore a savepoint or declare what to do with weir recover", cause)
}

// replayAdded estimates what falling back from checkpoint n to sn reads
// again: the stream sequences between their positions, over every input
// both record (an upper bound on the records, since a stream interleaves
// its partitions), and the time between their completions.
func (rn *run) replayAdded(ctx context.Context, n uint64, sn checkpoint.Snapshot) (seqs uint64, span time.Duration) {
	st := rn.bar.store
	newer, err := st.SnapshotOf(ctx, n, "")
	if err != nil {
		return 0, 0
	}
	span = newer.Completed.Sub(sn.Completed)
	for inst, key := range newer.Manifests {
		nm, err := st.Manifest(ctx, key)
		if err != nil {
			continue
		}
		om, err := st.Manifest(ctx, sn.Manifests[inst])
		if err != nil {
			continue
		}
		for in, h := range nm.Positions {
			if o, ok := om.Positions[in]; ok && h.Seq > o.Seq {
				seqs += h.Seq - o.Seq
			}
		}
	}
	return seqs, span
}

// unrestorable says why the instances could not restore sn — state this
// build reads with another meaning, as from before a migration — or ""
// when they could: falling back to it would stop the pipeline rather
// than restart it.
func (rn *run) unrestorable(ctx context.Context, sn checkpoint.Snapshot) string {
	for inst, key := range sn.Manifests {
		m, err := rn.bar.store.Manifest(ctx, key)
		if err != nil || m.Meaning == nil {
			continue
		}
		want := rn.meaning()
		if m.Operator != rn.cfg.Operator {
			if want, err = MeaningOf(rn.plan.contract, m.Operator, nil); err != nil {
				return inst + ": " + err.Error()
			}
		}
		changes := m.Meaning.Changes(want)
		if checkpoint.Incompatible(changes) || (checkpoint.Semantic(changes) && !rn.cfg.SemanticMigration) {
			var lines []string
			for _, c := range changes {
				lines = append(lines, c.String())
			}
			return inst + ": " + strings.Join(lines, "; ")
		}
	}
	return ""
}
