package stream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/restore"
)

// fence bumps the instance's generation after a restore and publishes the
// cut behind which its older generations' frames stay valid.
func (rn *run) fence(ctx context.Context, m *checkpoint.Manifest, migrations []string) error {
	rn.rt.cfg.Faults.beforeFence()
	// Above every generation this instance ever ran: the one its state
	// holds, the snapshot's, and the one of its last fence (a later
	// restore than the snapshot's).
	gen := max(rn.plan.generation, m.Generation)
	f, ok, err := rn.bar.store.Fence(ctx, rn.rt.cfg.Operator, rn.rt.cfg.Instance)
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	if ok {
		gen = max(gen, f.Generation)
	}
	gen++
	// The generation and the assignment the state now belongs to commit
	// together: until the fence is out, the marker makes a restart fence
	// again rather than run this state as current.
	b := rn.store.NewBatch()
	if err := b.PutMeta(metaGeneration, binary.BigEndian.AppendUint64(nil, gen)); err != nil {
		b.Close()
		return err
	}
	if err := restore.PutFenced(b, rn.lay.version, m.Checkpoint, rn.bar.startedOver); err != nil {
		b.Close()
		return err
	}
	if err := b.Commit(); err != nil {
		return err
	}
	rn.plan.generation = gen
	fence := checkpoint.Fence{Generation: gen, Cut: m.Outputs, Checkpoint: m.Checkpoint, Assignment: rn.lay.version}
	if err := rn.bar.store.PutFence(ctx, rn.rt.cfg.Operator, rn.rt.cfg.Instance, fence); err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	if err := restore.AuditMigration(ctx, rn.conn.js, rn.restoreInstance(), migrations); err != nil {
		return err
	}
	if err := restore.RemoveMarker(rn.rt.cfg.DataDir); err != nil {
		return err
	}
	rn.bar.done = m.Checkpoint
	rn.bar.restoredFrom = m.Checkpoint
	return nil
}

// resumeRestore is the start of an instance from local state that a
// restore, rebuild or start-over put in place, killed before a checkpoint
// completed after it: its writers may not have fenced their old
// generations yet — a rescale restarts them one by one — so it waits for
// their fences before reading their frames, as the restore did (weir chaos
// found it: an instance of a rescale killed and started again at once read
// the frames an upstream instance, not yet restarted, wrote past the
// checkpoint, and again once it had, and counted them twice).
func (rn *run) resumeRestore(ctx context.Context) error {
	n, startedOver, ok, err := restore.LastRestore(rn.store)
	if err != nil || !ok {
		return err
	}
	latest, _, err := rn.bar.store.Latest(ctx)
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
	case err != nil:
		return fmt.Errorf("stream: %w", err)
	case latest.Checkpoint > n:
		return nil // every writer took part in a later checkpoint: fenced
	}
	rn.bar.restoredFrom, rn.bar.startedOver = n, startedOver
	rn.rt.log.Info("started again before a checkpoint completed after its restore: its writers' fences are awaited again", "checkpoint", n)
	return nil
}

// awaitFence is called by a restored instance before it reads the first
// frame of a writer: in a whole-pipeline restore every writer restores from
// the same checkpoint and fences its old generation, and frames of that
// old generation beyond the cut must not be read before the fence is known.
// It waits (bounded) for the writer's fence of a checkpoint at least as new
// as its own. A writer that does not restore (it kept newer local state) is
// read after the wait; such a partial rollback is not supported yet.
func (rn *run) awaitFence(ctx context.Context, writer string) error {
	if rn.bar.restoredFrom == 0 && !rn.bar.startedOver || rn.bar.confirmed[writer] {
		return nil
	}
	op, inst, ok := strings.Cut(writer, "/")
	if !ok {
		rn.bar.confirmed[writer] = true
		return nil
	}
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var failed error // the last read of the fence, when it failed
	for {
		f, ok, err := rn.bar.store.Fence(wait, op, inst)
		if err == nil || wait.Err() == nil {
			failed = err
		}
		if ok && f.Checkpoint >= rn.bar.restoredFrom && f.Assignment == rn.lay.version {
			rn.bar.fences.Lock()
			rn.bar.fences.m[writer] = f
			rn.bar.fences.Unlock()
			rn.bar.confirmed[writer] = true
			return nil
		}
		if sleep(wait, 50*time.Millisecond) != nil {
			if ctx.Err() != nil {
				return ctx.Err() // stopping: the frame is not read
			}
			if failed != nil {
				// A fence that could not be read is not "none": its
				// writer's older frames would be read as current.
				return fmt.Errorf("stream: refusing to read the frames of writer %s: its fence could not be read: %w", writer, failed)
			}
			rn.rt.log.Warn("upstream writer did not restore from the same checkpoint; reading its frames unfenced", "writer", writer, "checkpoint", rn.bar.restoredFrom)
			rn.bar.confirmed[writer] = true
			return nil
		}
	}
}

// loadFences reads the fences of the pipeline's writers.
func (rn *run) loadFences(ctx context.Context) error {
	fences, err := rn.bar.store.Fences(ctx)
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	rn.bar.fences.Lock()
	maps.Copy(rn.bar.fences.m, fences)
	rn.bar.fences.Unlock()
	return nil
}

// fenced reports whether a frame is a zombie's: written by an older
// generation of a restored writer after the restore cut.
func (rn *run) fenced(fh *edge.FrameHeader, partition int) bool {
	rn.bar.fences.Lock()
	f, ok := rn.bar.fences.m[fh.Producer]
	rn.bar.fences.Unlock()
	if !ok || fh.Generation >= f.Generation {
		return false
	}
	cut := uint64(0)
	if partition < len(f.Cut) {
		cut = f.Cut[partition]
	}
	return fh.Seq > cut
}
