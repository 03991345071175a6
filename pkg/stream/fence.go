package stream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/restore"
)

// fencing is what an input reader knows of its writers' fences: the
// checkpoint this instance restored from, and startedOver set when it lost
// its state before the pipeline's first checkpoint (restore.StartOver);
// confirmed lists the writers whose fences it has waited for, and fences
// the fences of the pipeline's writers, by which a zombie's frames are
// dropped (fenced).
type fencing struct {
	restoredFrom uint64
	startedOver  bool
	confirmed    map[string]bool

	fences struct {
		sync.Mutex
		m map[string]checkpoint.Fence // writer "operator/instance" → fence
	}
	// store is where the fences are read; log where a writer read
	// unfenced is said.
	store *checkpoint.Store
	log   *slog.Logger
}

// awaitFence is called by a restored instance before it reads the first
// frame of a writer: in a whole-pipeline restore every writer restores from
// the same checkpoint and fences its old generation, and frames of that
// old generation beyond the cut must not be read before the fence is known.
// It waits (bounded) for the writer's fence of a checkpoint at least as new
// as its own. A writer that does not restore (it kept newer local state) is
// read after the wait; such a partial rollback is not supported yet.
func (fc *fencing) awaitFence(ctx context.Context, writer string, assignment uint64) error {
	if fc.restoredFrom == 0 && !fc.startedOver || fc.confirmed[writer] {
		return nil
	}
	op, inst, ok := strings.Cut(writer, "/")
	if !ok {
		fc.confirmed[writer] = true
		return nil
	}
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var failed error // the last read of the fence, when it failed
	for {
		f, ok, err := fc.store.Fence(wait, op, inst)
		if err == nil || wait.Err() == nil {
			failed = err
		}
		if ok && f.Checkpoint >= fc.restoredFrom && f.Assignment == assignment {
			fc.fences.Lock()
			fc.fences.m[writer] = f
			fc.fences.Unlock()
			fc.confirmed[writer] = true
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
			fc.log.Warn("upstream writer did not restore from the same checkpoint; reading its frames unfenced", "writer", writer, "checkpoint", fc.restoredFrom)
			fc.confirmed[writer] = true
			return nil
		}
	}
}

// loadFences reads the fences of the writers of the input: the upstream
// operator's instances (none for the ingress, which holds no frames).
func (fc *fencing) loadFences(ctx context.Context, upstream string) error {
	if upstream == "" {
		return nil
	}
	fences, err := fc.store.FencesOf(ctx, upstream)
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	fc.fences.Lock()
	maps.Copy(fc.fences.m, fences)
	fc.fences.Unlock()
	return nil
}

// fenced reports whether a frame is a zombie's: written by an older
// generation of a restored writer after the restore cut.
func (fc *fencing) fenced(fh *edge.FrameHeader, partition int) bool {
	fc.fences.Lock()
	f, ok := fc.fences.m[fh.Producer]
	fc.fences.Unlock()
	if !ok || fh.Generation >= f.Generation {
		return false
	}
	cut := uint64(0)
	if partition < len(f.Cut) {
		cut = f.Cut[partition]
	}
	return fh.Seq > cut
}

// fence bumps the instance's generation after a restore and publishes the
// cut behind which its older generations' frames stay valid.
func (rs *restorer) fence(ctx context.Context, m *checkpoint.Manifest, migrations []string) error {
	rs.cfg.Faults.beforeFence()
	// Above every generation this instance ever ran: the one its state
	// holds, the snapshot's, and the one of its last fence (a later
	// restore than the snapshot's).
	gen := max(rs.plan.generation, m.Generation)
	f, ok, err := rs.ckpts.Fence(ctx, rs.cfg.Operator, rs.cfg.Instance)
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
	b := rs.store.NewBatch()
	if err := b.PutMeta(metaGeneration, binary.BigEndian.AppendUint64(nil, gen)); err != nil {
		b.Close()
		return err
	}
	if err := restore.PutFenced(b, rs.lay.version, m.Checkpoint, rs.fencing.startedOver); err != nil {
		b.Close()
		return err
	}
	if err := b.Commit(); err != nil {
		return err
	}
	rs.plan.generation = gen
	fence := checkpoint.Fence{Generation: gen, Cut: m.Outputs, Checkpoint: m.Checkpoint, Assignment: rs.lay.version}
	if err := rs.ckpts.PutFence(ctx, rs.cfg.Operator, rs.cfg.Instance, fence); err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	if err := restore.AuditMigration(ctx, rs.conn.js, rs.restoreInstance(), migrations); err != nil {
		return err
	}
	if err := restore.RemoveMarker(rs.cfg.DataDir); err != nil {
		return err
	}
	rs.fencing.restoredFrom = m.Checkpoint
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
func (rs *restorer) resumeRestore(ctx context.Context) error {
	n, startedOver, ok, err := restore.LastRestore(rs.store)
	if err != nil || !ok {
		return err
	}
	latest, _, err := rs.ckpts.Latest(ctx)
	var fenced []string
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
	case err != nil:
		return fmt.Errorf("stream: %w", err)
	case latest.Checkpoint > n && latest.Assignment == rs.lay.version:
		// A writer that took part in a later checkpoint of this
		// assignment had fenced by then: its snapshot is in it. A later
		// checkpoint of an older assignment proves nothing — one
		// triggered before a rescale may complete after the rescale
		// chose an earlier one to restart from (weir chaos, q5 aligned,
		// seed 1: a writer not yet restarted was read unfenced, and a
		// frame it wrote past the cut was counted, its records then
		// filed late when written anew). A writer it does not name is
		// awaited.
		fenced = slices.Collect(maps.Keys(latest.Manifests))
	}
	rs.fencing.restoredFrom, rs.fencing.startedOver = n, startedOver
	if rs.fencing.confirmed == nil {
		rs.fencing.confirmed = map[string]bool{}
	}
	for _, w := range fenced {
		rs.fencing.confirmed[w] = true
	}
	if len(fenced) == 0 {
		rs.log.Info("started again before a checkpoint completed after its restore: its writers' fences are awaited again", "checkpoint", n)
	}
	return nil
}
