package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/natsconn"
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
}

// startBarriers opens the checkpoint store, registers the instance, loads
// fences and, for a source operator, subscribes to triggers.
func (rn *run) startBarriers(ctx context.Context) error {
	b := &rn.bar
	st := b.store
	var err error
	b.arrived = map[string]bool{}
	b.blocked = map[string]bool{}
	rn.in.fencing.fences.m = map[string]checkpoint.Fence{}
	if rn.in.fencing.confirmed == nil {
		rn.in.fencing.confirmed = map[string]bool{}
	}
	err = st.Register(ctx, checkpoint.Instance{Operator: rn.rt.cfg.Operator, Instance: rn.rt.cfg.Instance, Ingress: rn.plan.ingress, Started: time.Now().UTC()})
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	if err := rn.in.fencing.loadFences(ctx, rn.plan.upstream); err != nil {
		return err
	}
	// Source operators start checkpoints on the trigger; in unaligned mode
	// every operator does (see triggered), and so does a transactional
	// sink holding all the epochs it may (see snapshotsAtTrigger).
	if rn.plan.ingress || !rn.plan.aligned || (rn.plan.output != nil && rn.plan.output.Transactional) {
		b.triggers = make(chan checkpoint.Trigger, 16)
		b.sub, err = rn.conn.nc.Subscribe(checkpoint.TriggerSubject(rn.plan.pipeline), func(m *nats.Msg) {
			if !natsconn.Published(m) {
				rn.rt.log.Warn("ignoring a checkpoint trigger a stream's consumer delivered", "subject", m.Subject)
				return
			}
			t, err := checkpoint.ParseTrigger(m.Data)
			if err != nil {
				rn.rt.log.Warn("ignoring a malformed checkpoint trigger", "err", err)
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

// arrive handles barrier N arriving on input: the input is blocked until
// the snapshot; in aligned mode the snapshot waits for every input, in
// unaligned mode it is taken at the end of this step.
func (b *barriers) arrive(input string, n uint64) {
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

// triggered starts checkpoint t at once: a step that writes barrier N
// behind everything the operator emitted, then the snapshot. Source
// operators do this in both modes. In unaligned mode every other operator
// does too, unless a barrier N reached it first: its state then reflects a
// prefix of each input that ends before the upstream barriers (it stops
// reading a channel at its barrier), and the records between its positions
// and those barriers — the in-flight data Flink persists as channel state —
// are on the durable edges, read again after a restore. So a checkpoint
// does not wait for barriers to travel through a backlog.
func (rn *run) triggered(ctx context.Context, t checkpoint.Trigger) error {
	if t.Checkpoint <= rn.bar.done || !rn.snapshotsAtTrigger() {
		return nil
	}
	rn.bar.epoch, rn.bar.first, rn.bar.savepoint = t.Checkpoint, time.Now(), t.Savepoint
	s := rn.newStep(rn.rt.now())
	defer s.close()
	if err := s.advance(); err != nil {
		return err
	}
	if rn.out.writer != nil {
		rn.out.writer.Broadcast(record.Record{Kind: record.Barrier, Epoch: t.Checkpoint})
		rn.out.writer.SetEpoch(t.Checkpoint + 1)
	}
	if err := s.finish(ctx); err != nil {
		return err
	}
	return rn.snapshot(ctx)
}

// snapshotsAtTrigger reports whether the operator snapshots when a trigger
// arrives rather than when barriers do: a source operator, every operator
// in unaligned mode, and a transactional sink that holds max_pending_epochs
// epochs. That sink reads no input until a checkpoint completes, so no
// barrier would reach it: it snapshots unaligned, at the trigger, as any
// operator of an unaligned checkpoint does, and the checkpoint can complete.
func (rn *run) snapshotsAtTrigger() bool {
	return rn.plan.ingress || !rn.plan.aligned || (rn.out.txn != nil && rn.out.txn.full())
}

// snapshot takes, uploads and acknowledges the snapshot of checkpoint
// b.epoch, then releases the blocked inputs.
func (rn *run) snapshot(ctx context.Context) error {
	b := &rn.bar
	n := b.epoch
	ack := checkpoint.Ack{Operator: rn.rt.cfg.Operator, Instance: rn.rt.cfg.Instance, FirstBarrier: b.first, Assignment: rn.lay.version}
	ack.Alignment = time.Since(b.first)
	start := time.Now()
	dir := snapshotDir(rn.rt.cfg.DataDir, n)
	// A leftover that cannot be removed makes the snapshot fail below,
	// and the acknowledgement says why.
	_ = os.RemoveAll(dir)
	// The frames of the steps the snapshot covers are stored first: a
	// rescale restores its state without the staged ones (flight.go).
	err := rn.out.land(ctx)
	if err == nil && rn.out.txn != nil {
		err = rn.out.cut(n)
	}
	if err == nil {
		err = rn.store.Snapshot(dir)
	}
	ack.Snapshot = time.Since(start)
	if err == nil {
		var m checkpoint.Manifest
		m, err = b.store.Upload(ctx, dir, checkpoint.Manifest{
			Operator: rn.rt.cfg.Operator, Instance: rn.rt.cfg.Instance, Checkpoint: n, Savepoint: b.savepoint,
			Generation: rn.plan.generation, SchemaVersion: rn.rt.schemaVersion(), Taken: start.UTC(),
			Snapshot: ack.Snapshot, Outputs: rn.out.outputSeqs(), Partitions: []int{rn.lay.lo, rn.lay.hi},
			Positions: rn.in.held(rn.plan.inputs), Meaning: ptr(rn.meaning()),
		})
		ack.Upload, ack.FullBytes, ack.NewBytes = m.Upload, m.FullBytes, m.NewBytes
		if err == nil {
			ack.Manifest = m.Key()
			if b.savepoint != "" {
				ack.Manifest = checkpoint.SavepointKey(b.savepoint, m.Operator, m.Instance)
			}
		}
	}
	if rerr := os.RemoveAll(dir); rerr != nil {
		rn.rt.log.Warn("removing a snapshot's local copy", "dir", dir, "err", rerr)
	}
	if err != nil {
		ack.Error = err.Error()
		rn.rt.log.Warn("checkpoint failed", "checkpoint", n, "err", err)
	}
	ack.Checkpoint = n
	data, perr := checkpoint.EncodeAck(ack)
	if perr == nil {
		perr = rn.conn.nc.Publish(checkpoint.AckSubject(rn.plan.pipeline, rn.rt.cfg.Operator, rn.rt.cfg.Instance), data)
	}
	if perr != nil && err == nil {
		err = perr
	}
	rn.obs.metrics.Checkpoint(ctx, checkpointStats(ack))
	b.done, b.epoch, b.savepoint = n, 0, ""
	clear(b.arrived)
	clear(b.blocked)
	rn.align()
	if err != nil && !errors.Is(err, context.Canceled) {
		rn.obs.metrics.CheckpointFailed(ctx)
	}
	rn.rt.log.Info("checkpoint", "checkpoint", n, "bytes", ack.FullBytes, "new", ack.NewBytes, "snapshot", ack.Snapshot, "upload", ack.Upload)
	return nil
}

func ptr[T any](v T) *T { return &v }

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

// snapshotDue reports whether the step, which holds held deliveries back,
// must end with checkpoint b.epoch's snapshot.
func (b *barriers) snapshotDue(held []edge.Delivery, p *plan, chans int, log *slog.Logger) bool {
	if b.epoch == 0 || b.epoch <= b.done {
		return false
	}
	if !p.aligned {
		return true
	}
	if len(b.arrived) == chans {
		return true
	}
	// Records held behind a barrier are unacknowledged: past half the
	// consumer's ack budget, a partition's other writers could stall behind
	// them before their barriers arrive. The snapshot is taken now, as an
	// unaligned one: the held records are after the recorded positions.
	// Likewise when the reader's byte budget could not take one more
	// message of the largest size: it would hand out nothing more, and the
	// barriers could never arrive.
	var bytes int64
	for _, ds := range [][]edge.Delivery{b.held, held} {
		for _, d := range ds {
			bytes += d.Size
		}
	}
	if n := len(b.held) + len(held); n >= max(1, p.maxAckPending/2) || bytes+p.largestMessage() > inputHeld || bytes >= inputHeld/2 {
		log.Warn("alignment holds too many records: snapshotting unaligned", "checkpoint", b.epoch, "held", n, "bytes", bytes)
		return true
	}
	return false
}

// stop ends the instance's part in checkpoints: no more triggers, and,
// after a clean stop, the instance deregistered, so that checkpoints do
// not wait for it.
func (b *barriers) stop(clean bool, operator, instance string, log *slog.Logger) {
	if b.sub != nil {
		_ = b.sub.Unsubscribe() // at the stop: the connection closes next, taking the subscription
	}
	if clean && b.store != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := b.store.Deregister(ctx, operator, instance); err != nil {
			log.Warn("still registered after a clean stop: checkpoints wait for this instance until it starts again or is deregistered", "err", err)
		}
	}
}
