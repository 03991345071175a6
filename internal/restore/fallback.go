package restore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/checkpoint"
)

// fallBackSnapshots is how many recent checkpoints a fallback considers.
const fallBackSnapshots = 20

// Replay is what falling back reads again: the stream sequences between
// the two checkpoints' positions, over every input both record (an upper
// bound on the records, since a stream interleaves its partitions), and
// the time between their completions. It is an estimate for the audit
// record: zero where a snapshot could not be read.
type Replay struct {
	Seqs uint64
	Span time.Duration
}

// DecideFallBack plans the answer to restore plan failed, which found its
// checkpoint corrupt (cause wraps checkpoint.ErrCorrupt). One instance
// cannot restore an older checkpoint on its own — its downstream holds
// state from the newer cut — so the whole pipeline restarts from the
// newest older checkpoint that verifies, shares no corrupt file with it,
// and holds state this build reads (Kind FallBack, To). A savepoint
// restored on purpose is never replaced by a checkpoint, and with no
// such checkpoint the instance refuses.
func DecideFallBack(ctx context.Context, st *checkpoint.Store, in Instance, failed Plan, cause error) (Plan, error) {
	n := failed.Checkpoint
	if failed.Kind == RestoreSavepoint {
		return refuse(fmt.Errorf("stream: refusing to start: the savepoint being restored is corrupt: %w; restore another snapshot (weir recover lists them)", cause))
	}
	sns, err := st.Snapshots(ctx, fallBackSnapshots)
	if err != nil {
		return Plan{}, errors.Join(cause, err)
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
			in.log().Warn("an older checkpoint shares the corrupt file", "checkpoint", sn.Checkpoint, "object", bad.Object)
			continue
		}
		if err := st.Verify(ctx, sn); err != nil {
			in.log().Warn("an older checkpoint does not verify either", "checkpoint", sn.Checkpoint, "err", err)
			continue
		}
		why, err := in.unrestorable(ctx, st, sn)
		if err != nil {
			return Plan{}, errors.Join(cause, err)
		}
		if why != "" {
			in.log().Warn("an older checkpoint is of state this build reads otherwise", "checkpoint", sn.Checkpoint, "why", why)
			continue
		}
		return Plan{Kind: FallBack, Checkpoint: n, To: sn, Replay: replayAdded(ctx, st, n, sn), Refusal: cause,
			Why: "checkpoint corrupt: the pipeline falls back to an older one"}, nil
	}
	return refuse(fmt.Errorf("stream: refusing to start: %w; no older checkpoint verifies to fall back to: restore a savepoint or declare what to do with weir recover", cause))
}

// Restart carries out fallback plan p: it restarts the pipeline from
// p.To under a new assignment, if the assignment is still the instance's
// (checkpoint.ErrConflict: another instance fell back first), and
// records the fallback and the replay it adds in the audit stream.
func Restart(ctx context.Context, js jetstream.JetStream, in Instance, p Plan) (checkpoint.Assignment, error) {
	a, err := checkpoint.RestartIf(ctx, js, in.Contract, p.To, in.version())
	if err != nil {
		return a, err
	}
	in.log().Warn("checkpoint corrupt: the pipeline falls back to an older one", "corrupt", p.Checkpoint, "cause", p.Refusal,
		"to", p.To.Checkpoint, "assignment", a.Version, "replay_sequences", p.Replay.Seqs, "replay_span", p.Replay.Span)
	_, aerr := audit.Append(ctx, js, in.Contract.Pipeline, audit.Record{
		Actor: "weir/" + in.key(), Action: audit.ActionFallback, Target: in.Contract.Pipeline,
		From: fmt.Sprintf("checkpoint %d", p.Checkpoint), To: p.To.String(), Reason: p.Refusal.Error(),
		Detail: map[string]any{"assignment": a.Version, "replay_sequences": p.Replay.Seqs, "replay_span": p.Replay.Span.String()},
	})
	if aerr != nil {
		// The restart is committed: the instance restarts under it, and
		// the log keeps what the audit stream could not.
		in.log().Warn("the fallback could not be recorded in the audit stream", "err", aerr)
	}
	return a, nil
}

// replayAdded estimates what falling back from checkpoint n to sn reads
// again (Replay).
func replayAdded(ctx context.Context, st *checkpoint.Store, n uint64, sn checkpoint.Snapshot) Replay {
	var r Replay
	newer, err := st.SnapshotOf(ctx, n, "")
	if err != nil {
		return r
	}
	r.Span = newer.Completed.Sub(sn.Completed)
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
				r.Seqs += h.Seq - o.Seq
			}
		}
	}
	return r
}

// unrestorable says why the instances could not restore sn — state this
// build reads with another meaning, as from before a migration — or ""
// when they could: falling back to it would stop the pipeline rather
// than restart it. A manifest it cannot read is an error: sn verified a
// moment ago.
func (in Instance) unrestorable(ctx context.Context, st *checkpoint.Store, sn checkpoint.Snapshot) (string, error) {
	for inst, key := range sn.Manifests {
		m, err := st.Manifest(ctx, key)
		if err != nil {
			return "", err
		}
		if m.Meaning == nil {
			continue
		}
		want := in.Meaning
		if m.Operator != in.Operator {
			if want, err = in.MeaningOf(m.Operator); err != nil {
				return inst + ": " + err.Error(), nil
			}
		}
		changes := m.Meaning.Changes(want)
		if checkpoint.Incompatible(changes) || (checkpoint.Semantic(changes) && !in.SemanticMigration) {
			return inst + ": " + strings.Join(describe(changes), "; "), nil
		}
	}
	return "", nil
}

// AuditMigration records, once the restored state is in place, the
// semantic migrations it was declared to be (Plan.Migrations, Judge).
func AuditMigration(ctx context.Context, js jetstream.JetStream, in Instance, migrations []string) error {
	if len(migrations) == 0 {
		return nil
	}
	_, err := audit.Append(ctx, js, in.Contract.Pipeline, audit.Record{Actor: "weir/" + in.key(),
		Action: audit.ActionMigrate, Target: in.key(), To: "semantic migration",
		Reason: "declared by -semantic-migration", Detail: map[string]any{"changes": migrations}})
	return err
}
