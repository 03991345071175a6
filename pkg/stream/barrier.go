package stream

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirflow/weir/pkg/checkpoint"
	"github.com/weirflow/weir/pkg/edge"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/telemetry"
)

// barriers is the runtime's part of the checkpoint protocol.
type barriers struct {
	store    *checkpoint.Store
	triggers chan checkpoint.Trigger
	sub      *nats.Subscription

	// Owned by the step loop.
	epoch     uint64          // checkpoint in progress at this operator; 0 none
	savepoint string          // its savepoint name
	first     time.Time       // when its first barrier arrived
	arrived   map[string]bool // inputs that delivered its barrier
	held      []edge.Delivery // deliveries of blocked inputs, in arrival order
	blocked   map[string]bool // inputs not to process until the snapshot
	done      uint64          // last checkpoint snapshotted
	// restoredFrom is the checkpoint this instance restored from; confirmed
	// lists the writers whose fences it has waited for.
	restoredFrom uint64
	confirmed    map[string]bool

	fences struct {
		sync.Mutex
		m map[string]checkpoint.Fence // writer "operator/instance" → fence
	}
}

// startBarriers opens the checkpoint store, registers the instance, loads
// fences and, for a source operator, subscribes to triggers.
func (rt *Runtime) startBarriers(ctx context.Context) error {
	b := &rt.bar
	st := b.store
	var err error
	b.arrived = map[string]bool{}
	b.blocked = map[string]bool{}
	b.fences.m = map[string]checkpoint.Fence{}
	if b.confirmed == nil {
		b.confirmed = map[string]bool{}
	}
	err = st.Register(ctx, checkpoint.Instance{Operator: rt.cfg.Operator, Instance: rt.cfg.Instance, Ingress: rt.plan.ingress, Started: time.Now().UTC()})
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	if err := rt.loadFences(ctx); err != nil {
		return err
	}
	// Source operators start checkpoints on the trigger; in unaligned mode
	// every operator does (see triggered).
	if rt.plan.ingress || !rt.plan.aligned {
		b.triggers = make(chan checkpoint.Trigger, 16)
		b.sub, err = rt.nc.Subscribe(checkpoint.TriggerSubject(rt.plan.pipeline), func(m *nats.Msg) {
			t, err := checkpoint.ParseTrigger(m.Data)
			if err != nil {
				rt.log.Warn("ignoring a malformed checkpoint trigger", "err", err)
				return
			}
			select {
			case b.triggers <- t:
			default: // a backlog of triggers: the coordinator times the extra ones out
			}
		})
		if err != nil {
			return fmt.Errorf("stream: subscribe to checkpoint triggers: %w", err)
		}
	}
	return nil
}

func (rt *Runtime) stopBarriers(clean bool) {
	b := &rt.bar
	if b.sub != nil {
		_ = b.sub.Unsubscribe()
	}
	if clean && b.store != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = b.store.Deregister(ctx, rt.cfg.Operator, rt.cfg.Instance)
	}
}

// loadFences reads the fences of the pipeline's writers.
func (rt *Runtime) loadFences(ctx context.Context) error {
	fences, err := rt.bar.store.Fences(ctx)
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	rt.bar.fences.Lock()
	maps.Copy(rt.bar.fences.m, fences)
	rt.bar.fences.Unlock()
	return nil
}

// fenced reports whether a frame is a zombie's: written by an older
// generation of a restored writer after the restore cut.
func (rt *Runtime) fenced(fh *edge.FrameHeader, partition int) bool {
	rt.bar.fences.Lock()
	f, ok := rt.bar.fences.m[fh.Producer]
	rt.bar.fences.Unlock()
	if !ok || fh.Generation >= f.Generation {
		return false
	}
	cut := uint64(0)
	if partition < len(f.Cut) {
		cut = f.Cut[partition]
	}
	return fh.Seq > cut
}

// barrier handles barrier N arriving on input: the input is blocked until
// the snapshot; in aligned mode the snapshot waits for every input, in
// unaligned mode it is taken at the end of this step.
func (s *step) barrier(input string, n uint64) {
	b := &s.rt.bar
	if n <= b.done {
		return // a barrier of a checkpoint already snapshotted (unaligned)
	}
	if b.epoch != n {
		if b.epoch != 0 && n > b.epoch {
			// A newer checkpoint overtakes one that cannot complete here
			// any more (an upstream skipped it): give up the older one,
			// whose blocked channels would otherwise wait for ever.
			clear(b.blocked)
		}
		b.epoch, b.first = n, time.Now()
		clear(b.arrived)
	}
	b.arrived[input] = true
	b.blocked[input] = true
}

// snapshotDue reports whether the step, which holds held deliveries back,
// must end with checkpoint b.epoch's snapshot.
func (rt *Runtime) snapshotDue(held int) bool {
	b := &rt.bar
	if b.epoch == 0 || b.epoch <= b.done {
		return false
	}
	if !rt.plan.aligned {
		return true
	}
	if len(b.arrived) == len(rt.chans) {
		return true
	}
	// Records held behind a barrier are unacknowledged: past half the
	// consumer's ack budget, a partition's other writers could stall behind
	// them before their barriers arrive. The snapshot is taken now, as an
	// unaligned one: the held records are after the recorded positions.
	if len(b.held)+held >= max(1, rt.plan.maxAckPending/2) {
		rt.log.Warn("alignment holds too many records: snapshotting unaligned", "checkpoint", b.epoch, "held", len(b.held)+held)
		return true
	}
	return false
}

// triggered starts checkpoint t at once: a step that writes barrier N
// behind everything the operator emitted, then the snapshot. Source
// operators do this in both modes. In unaligned mode every other operator
// does too, unless a barrier N reached it first: its state then reflects a
// prefix of each input that ends before the upstream barriers (it stops
// reading a channel at its barrier), and the records between its positions
// and those barriers — the in-flight data Flink persists as channel state —
// are on the durable edges, read again after a restore. So a checkpoint
// does not wait for barriers to travel through a backlog.
func (rt *Runtime) triggered(ctx context.Context, t checkpoint.Trigger) error {
	if t.Checkpoint <= rt.bar.done {
		return nil
	}
	rt.bar.epoch, rt.bar.first, rt.bar.savepoint = t.Checkpoint, time.Now(), t.Savepoint
	s := rt.newStep(rt.now())
	committed := false
	defer func() {
		if !committed {
			s.batch.Close()
		}
	}()
	if err := s.advance(); err != nil {
		return err
	}
	if rt.writer != nil {
		rt.writer.Broadcast(record.Record{Kind: record.Barrier, Epoch: t.Checkpoint})
		rt.writer.SetEpoch(t.Checkpoint + 1)
	}
	if err := s.finish(ctx, &committed); err != nil {
		return err
	}
	return rt.snapshot(ctx)
}

// snapshot takes, uploads and acknowledges the snapshot of checkpoint
// b.epoch, then releases the blocked inputs.
func (rt *Runtime) snapshot(ctx context.Context) error {
	b := &rt.bar
	n := b.epoch
	ack := checkpoint.Ack{Operator: rt.cfg.Operator, Instance: rt.cfg.Instance, FirstBarrier: b.first, Assignment: rt.lay.version}
	ack.Alignment = time.Since(b.first)
	start := time.Now()
	dir := snapshotDir(rt.cfg.DataDir, n)
	_ = os.RemoveAll(dir)
	err := rt.store.Snapshot(dir)
	ack.Snapshot = time.Since(start)
	if err == nil {
		var m checkpoint.Manifest
		m, err = b.store.Upload(ctx, dir, checkpoint.Manifest{
			Operator: rt.cfg.Operator, Instance: rt.cfg.Instance, Checkpoint: n, Savepoint: b.savepoint,
			Generation: rt.plan.generation, SchemaVersion: rt.schemaVersion(), Taken: start.UTC(),
			Snapshot: ack.Snapshot, Outputs: rt.outputSeqs(), Partitions: []int{rt.lay.lo, rt.lay.hi},
		})
		ack.Manifest, ack.Upload, ack.FullBytes, ack.NewBytes = m.Key(), m.Upload, m.FullBytes, m.NewBytes
		if b.savepoint != "" {
			ack.Manifest = checkpoint.SavepointKey(b.savepoint, m.Operator, m.Instance)
		}
	}
	_ = os.RemoveAll(dir)
	if err != nil {
		ack.Error = err.Error()
		rt.log.Warn("checkpoint failed", "checkpoint", n, "err", err)
	}
	ack.Checkpoint = n
	data, _ := json.Marshal(ack)
	if perr := rt.nc.Publish(checkpoint.AckSubject(rt.plan.pipeline), data); perr != nil && err == nil {
		err = perr
	}
	rt.obs.metrics.Checkpoint(ctx, checkpointStats(ack))
	b.done, b.epoch, b.savepoint = n, 0, ""
	clear(b.arrived)
	clear(b.blocked)
	rt.align()
	if err != nil && !errors.Is(err, context.Canceled) {
		rt.obs.metrics.CheckpointFailed(ctx)
	}
	rt.log.Info("checkpoint", "checkpoint", n, "bytes", ack.FullBytes, "new", ack.NewBytes, "snapshot", ack.Snapshot, "upload", ack.Upload)
	return nil
}

func (rt *Runtime) outputSeqs() []uint64 {
	if rt.writer == nil {
		return nil
	}
	return rt.writer.Seqs()
}

// schemaVersion is the operator's state schema version; operators that
// version their state implement operator.Versioned.
func (rt *Runtime) schemaVersion() int {
	if v, ok := rt.op.(operator.Versioned); ok {
		return v.SchemaVersion()
	}
	return 1
}

func checkpointStats(a checkpoint.Ack) telemetry.CheckpointStats {
	return telemetry.CheckpointStats{
		Alignment: a.Alignment, Snapshot: a.Snapshot, Upload: a.Upload,
		Total: a.Alignment + a.Snapshot + a.Upload, Size: a.FullBytes,
	}
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
}

// markRestored writes the marker of a restore about to be put in place.
func (rt *Runtime) markRestored(m *checkpoint.Manifest) error {
	if err := os.MkdirAll(rt.cfg.DataDir, 0o755); err != nil {
		return err
	}
	b, _ := json.Marshal(pendingRestore{Checkpoint: m.Checkpoint, Generation: m.Generation, Outputs: m.Outputs})
	return os.WriteFile(markerPath(rt.cfg.DataDir), b, 0o644)
}

// restoredByHand reads the marker of a restore not yet fenced: a savepoint
// restored by `weir savepoint restore`, or a restore interrupted before its
// fence. A marker without the state it restored is dropped.
func (rt *Runtime) restoredByHand(ctx context.Context, stateDir string) (*checkpoint.Manifest, error) {
	p := markerPath(rt.cfg.DataDir)
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(stateDir); err != nil {
		return nil, os.Remove(p) // the crash came before the state was in place
	}
	var pr pendingRestore
	if json.Unmarshal(data, &pr) == nil {
		return &checkpoint.Manifest{Operator: rt.cfg.Operator, Instance: rt.cfg.Instance,
			Checkpoint: pr.Checkpoint, Generation: pr.Generation, Outputs: pr.Outputs}, nil
	}
	key := string(data)
	m, err := rt.bar.store.Manifest(ctx, key)
	if err != nil {
		return nil, err
	}
	if v := rt.schemaVersion(); m.SchemaVersion != v {
		return nil, fmt.Errorf("stream: refusing to start: the savepoint restored here (%s) has state schema version %d, operator %s reads version %d", key, m.SchemaVersion, rt.cfg.Operator, v)
	}
	return &m, nil
}

// restoreFrom downloads a snapshot into dir after checking that the
// operator can read it.
func (rt *Runtime) restoreFrom(ctx context.Context, key, dir string) (*checkpoint.Manifest, error) {
	m, err := rt.bar.store.Manifest(ctx, key)
	if err != nil {
		return nil, err
	}
	if m.Operator != rt.cfg.Operator {
		return nil, fmt.Errorf("stream: refusing to restore: snapshot %s is of operator %s, not %s", key, m.Operator, rt.cfg.Operator)
	}
	if v := rt.schemaVersion(); m.SchemaVersion != v {
		return nil, fmt.Errorf("stream: refusing to restore: snapshot %s has state schema version %d, operator %s reads version %d; restore a compatible savepoint or migrate the state", key, m.SchemaVersion, rt.cfg.Operator, v)
	}
	start := time.Now()
	tmp := dir + ".restoring"
	_ = os.RemoveAll(tmp)
	if err := rt.bar.store.Download(ctx, m, tmp); err != nil {
		return nil, err
	}
	if err := rt.markRestored(&m); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, err
	}
	rt.obs.metrics.Restored(ctx, time.Since(start))
	rt.log.Info("restored", "manifest", key, "bytes", m.FullBytes, "took", time.Since(start))
	return &m, nil
}

// fence bumps the instance's generation after a restore and publishes the
// cut behind which its older generations' frames stay valid.
func (rt *Runtime) fence(ctx context.Context, m *checkpoint.Manifest) error {
	// Above every generation this instance ever ran: the one its state
	// holds, the snapshot's, and the one of its last fence (a later
	// restore than the snapshot's).
	gen := max(rt.plan.generation, m.Generation)
	f, ok, err := rt.bar.store.Fence(ctx, rt.cfg.Operator, rt.cfg.Instance)
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
	b := rt.store.NewBatch()
	if err := b.PutMeta(metaGeneration, binary.BigEndian.AppendUint64(nil, gen)); err != nil {
		b.Close()
		return err
	}
	if a := rt.lay.assignment; a != nil {
		if err := b.PutMeta(metaAssignment, binary.BigEndian.AppendUint64(nil, a.Version)); err != nil {
			b.Close()
			return err
		}
	}
	if err := b.Commit(); err != nil {
		return err
	}
	rt.plan.generation = gen
	fence := checkpoint.Fence{Generation: gen, Cut: m.Outputs, Checkpoint: m.Checkpoint, Assignment: rt.lay.version}
	if err := rt.bar.store.PutFence(ctx, rt.cfg.Operator, rt.cfg.Instance, fence); err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	if err := os.Remove(markerPath(rt.cfg.DataDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	rt.bar.done = m.Checkpoint
	rt.bar.restoredFrom = m.Checkpoint
	return nil
}

// awaitFence is called by a restored instance before it reads the first
// frame of a writer: in a whole-pipeline restore every writer restores from
// the same checkpoint and fences its old generation, and frames of that
// old generation beyond the cut must not be read before the fence is known.
// It waits (bounded) for the writer's fence of a checkpoint at least as new
// as its own. A writer that does not restore (it kept newer local state) is
// read after the wait; such a partial rollback is not supported yet.
func (rt *Runtime) awaitFence(writer string) {
	if rt.bar.restoredFrom == 0 || rt.bar.confirmed[writer] {
		return
	}
	rt.bar.confirmed[writer] = true
	op, inst, ok := strings.Cut(writer, "/")
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		if f, ok, _ := rt.bar.store.Fence(ctx, op, inst); ok && f.Checkpoint >= rt.bar.restoredFrom && f.Assignment == rt.lay.version {
			rt.bar.fences.Lock()
			rt.bar.fences.m[writer] = f
			rt.bar.fences.Unlock()
			return
		}
		if sleep(ctx, 50*time.Millisecond) != nil {
			rt.log.Warn("upstream writer did not restore from the same checkpoint; reading its frames unfenced", "writer", writer, "checkpoint", rt.bar.restoredFrom)
			return
		}
	}
}

// barrierState is what a step may change of the barrier bookkeeping.
type barrierState struct {
	epoch   uint64
	first   time.Time
	arrived map[string]bool
	blocked map[string]bool
}

func (b *barriers) save() barrierState {
	return barrierState{epoch: b.epoch, first: b.first, arrived: maps.Clone(b.arrived), blocked: maps.Clone(b.blocked)}
}

func (b *barriers) restore(s barrierState) {
	b.epoch, b.first, b.arrived, b.blocked = s.epoch, s.first, s.arrived, s.blocked
}
