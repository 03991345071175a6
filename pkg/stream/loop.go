package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/erasure"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/state"
)

// loop reads steps of input and services timers until ctx ends.
func (rn *run) loop(ctx context.Context, r *edge.Reader) error {
	tick := rn.rt.cfg.TickInterval
	if tick == 0 {
		tick = time.Second
	}
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	batch := make([]edge.Delivery, 0, rn.plan.fetchBatch)
	for {
		if rn.firing {
			select {
			case <-ctx.Done():
				return rn.shutdown()
			case <-rn.watch.reassigned:
				if err := rn.out.commitPublished(); err != nil {
					return err
				}
				return errReassigned
			default:
			}
			if err := rn.retried(ctx, rn.fireLeft); err != nil {
				if ctx.Err() != nil {
					return rn.shutdown()
				}
				return err
			}
			continue
		}
		if held := rn.bar.held; len(held) > 0 && !rn.anyBlocked(held) {
			// Deliveries held back while their input awaited a snapshot
			// come first, in the order they arrived.
			rn.bar.held = nil
			if err := rn.runStep(ctx, held); err != nil {
				if ctx.Err() != nil {
					return rn.shutdown()
				}
				return err
			}
			continue
		}
		waiting := time.Now()
		input := r.C()
		if t := rn.out.txn; t != nil && t.full() {
			// The results of max_pending_epochs checkpoints wait for them
			// to complete: no more input until one does.
			input = nil
		}
		select {
		case <-ctx.Done():
			return rn.shutdown()
		case err := <-r.Err():
			var te *edge.TrimmedError
			if errors.As(err, &te) {
				rn.rt.log.Error("stopping: records were removed before they were read", "err", te,
					"fix", "the instance refuses to start until `weir recover -pipeline "+rn.plan.pipeline+"` decides")
				return errors.Join(rn.ret.lostWhileReading(te), rn.shutdown())
			}
			var rerr error
			if r, rerr = rn.reopenReader(ctx, err); rerr != nil {
				if ctx.Err() != nil {
					return rn.shutdown()
				}
				return errors.Join(rerr, rn.shutdown())
			}
		case <-rn.watch.reassigned:
			// The instance's key groups are another's now: what it
			// staged is left to the store's next owner.
			if err := rn.out.commitPublished(); err != nil {
				return err
			}
			return errReassigned
		case t := <-rn.bar.triggers:
			if err := rn.triggered(ctx, t); err != nil {
				if ctx.Err() != nil {
					return rn.shutdown()
				}
				return err
			}
		case <-ticker.C:
			rn.rt.stats.idle.Add(int64(time.Since(waiting)))
			rn.rt.sampleLoad(time.Now())
			if err := rn.ret.refreshHeads(ctx, time.Now()); err != nil {
				rn.rt.log.Error("stopping: retention removed records before they were read", "err", err,
					"fix", "restart: the instance then refuses to start until `weir recover` decides; give the input more retention or the pipeline more capacity")
				return errors.Join(err, rn.shutdown())
			}
			rn.obs.sweepState(rn.store)
			if t := rn.out.txn; t != nil && len(t.cuts) > 0 && time.Since(t.polled) >= time.Second {
				if err := rn.out.pollCompleted(ctx, rn.bar.store, rn.rt.cfg.Faults); err != nil {
					return err
				}
			}
			if err := rn.serviceTime(ctx); err != nil {
				if ctx.Err() != nil {
					return rn.shutdown()
				}
				return err
			}
		case req := <-rn.erasures.next():
			if err := rn.erase(ctx, []erasure.Request{req}); err != nil {
				if ctx.Err() != nil {
					return rn.shutdown()
				}
				return err
			}
		case err := <-rn.erasures.failed():
			return errors.Join(err, rn.shutdown())
		case c := <-rn.out.txnCompleted():
			if err := rn.out.release(ctx, c, rn.rt.cfg.Faults); err != nil {
				return err
			}
		case d := <-input:
			rn.obs.metrics.Idle(ctx, time.Since(waiting))
			rn.rt.stats.idle.Add(int64(time.Since(waiting)))
			batch = append(batch[:0], d)
			batch = rn.fill(ctx, r, batch)
			if err := rn.runStep(ctx, batch); err != nil {
				if ctx.Err() != nil {
					return rn.shutdown()
				}
				return err
			}
		}
	}
}

// maxStepBatches bounds a step under backlog, in fetch batches of records.
const maxStepBatches = 8

// fill adds deliveries to the step until it holds a fetch batch of
// records or the frame linger has passed since its first delivery. Under
// backlog — the broker holds more of an input than has been delivered — it
// goes on, up to maxStepBatches fetch batches, for as long as deliveries
// keep coming within the linger: the step grows, and its fixed costs — the
// state commit's fsync, the store of its output (overlapped with the next
// step, flight.go), the acknowledgements — are paid once for more records.
// When input is sparse a step stays small and soon. Records, not messages, bound a step: a
// frame carries hundreds, and a step's output is staged whole and its
// length is how long a checkpoint trigger waits.
func (rn *run) fill(ctx context.Context, r *edge.Reader, batch []edge.Delivery) []edge.Delivery {
	var linger <-chan time.Time
	records, backlog := int64(0), false
	add := func(d edge.Delivery) {
		batch = append(batch, d)
		records += d.Records
		backlog = d.Pending > 0
	}
	for _, d := range batch {
		records += d.Records
		backlog = d.Pending > 0
	}
	most := int64(maxStepBatches * rn.plan.fetchBatch)
	for records < most {
		select {
		case d := <-r.C():
			add(d)
			continue
		default:
		}
		// A step holding max_ack_pending messages gets no more: the
		// broker delivers more only once they are acknowledged.
		full := records >= int64(rn.plan.fetchBatch)
		if full && (!backlog || len(batch) >= rn.plan.maxAckPending) || rn.plan.linger <= 0 {
			return batch
		}
		if linger == nil {
			t := time.NewTimer(rn.plan.linger)
			defer t.Stop()
			linger = t.C
		}
		select {
		case d := <-r.C():
			add(d)
		case <-linger:
			return batch
		case <-ctx.Done():
			return batch
		}
	}
	return batch
}

// drainTimeout bounds how long a stop waits to publish the frames its last
// step committed.
const drainTimeout = 5 * time.Second

// shutdown ends a run that was asked to stop. Frames its last step
// committed but had not yet published — the stop cut the publish short —
// are published now, within drainTimeout, so a stopped operator's output
// does not wait for its next start; those it cannot publish stay staged
// and the next start publishes them.
func (rn *run) shutdown() error {
	rn.rt.log.Info("stopping")
	if err := rn.out.commitPublished(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	// Mark, once more, every input that has read all its subject holds:
	// retention removing other subjects' messages while the instance is
	// stopped must not look like a loss when it starts.
	rn.obs.mu.Lock()
	rn.obs.mu.headsAt = time.Time{}
	rn.obs.mu.Unlock()
	if err := rn.ret.refreshHeads(ctx, time.Now()); err != nil {
		rn.rt.log.Warn("stopping: retention removed records before they were read", "err", err)
	}
	if err := rn.out.publishStaged(ctx); err != nil {
		rn.rt.log.Warn("stopping: staged frames left for the next start", "err", err)
	}
	return nil
}

// checkIdle marks inputs silent longer than the idle timeout idle, and
// returns them: none while the broker is out of reach, and none the
// broker has not confirmed since its silence passed the timeout to have
// nothing more for — a broker stalled (a process paused, a disk stuck)
// keeps its connections and looks like silence, and the records it
// then delivers would be late behind a watermark the others carried on.
func (rn *run) checkIdle(now time.Time) []string {
	if rn.conn.down.Load() {
		return nil
	}
	if rn.conn.reconnected.Swap(false) {
		rn.in.touch(rn.lay.chans, rn.rt.now())
	}
	return rn.in.tracker.CheckIdle(now, func(input string, qualified time.Time) bool {
		if !rn.in.caughtUp[input].Before(qualified) {
			return true
		}
		rn.in.wantHeads = true
		return false
	})
}

// serviceTime expires state past its TTL, marks silent inputs idle and
// fires due processing-time timers, as one step when anything changed.
func (rn *run) serviceTime(ctx context.Context) error {
	now := rn.rt.now()
	if _, err := rn.store.Expire(now, 10_000); err != nil {
		return fmt.Errorf("stream: expire state: %w", err)
	}
	changed := false
	if tr := rn.in.tracker; tr != nil {
		// While the broker is out of reach no input is read, and none is
		// silent for it: nothing is marked idle, and once the broker is
		// back each input gets a full idle timeout to speak. Else the
		// first input read again would carry the watermark past the
		// records of the others, which the broker still holds.
		if idled := rn.checkIdle(now); len(idled) > 0 {
			rn.rt.log.Info("inputs idle", "inputs", idled)
			changed = true
		}
		if wm, ok := tr.Watermark(); ok && wm.After(tr.Emitted()) {
			changed = true
		}
		if tr.AllIdle() && !rn.in.idleSent {
			changed = true
		}
	}
	if _, ok := rn.rt.op.(operator.TimerHandler); ok {
		due, err := rn.store.DueTimers(state.ProcessingTime, now, 1)
		if err != nil {
			return err
		}
		changed = changed || len(due) > 0
	}
	if !changed {
		return nil
	}
	s := rn.newStep(now)
	defer s.close()
	if err := s.fireTimers(state.ProcessingTime, now); err != nil {
		return err
	}
	if err := s.advance(); err != nil {
		return err
	}
	return s.finish(ctx)
}

// fireLeft runs one step without input that fires event-time timers a
// step before it left (maxStepTimers), and forwards the watermark once
// none are left. Processing-time timers a step left wait for the next
// tick, so that timers an operator keeps setting cannot hold input off.
func (rn *run) fireLeft(ctx context.Context) error {
	s := rn.newStep(rn.rt.now())
	defer s.close()
	if err := s.advance(); err != nil {
		return err
	}
	return s.finish(ctx)
}

// align pauses inputs that run more than the alignment drift ahead of the
// slowest one, and resumes the others.
func (rn *run) align() {
	r := rn.in.reader.Load()
	if r == nil {
		return
	}
	// A partition is paused when every one of its channels is. A channel
	// blocked by a barrier must not hold back the other writers of its
	// partition: the step holds its deliveries instead. A channel running
	// ahead of the drift is not held: alignment bounds partitions whose
	// every writer runs ahead, not one writer among others.
	for _, in := range rn.plan.inputs {
		paused := true
		for _, c := range rn.lay.channelsOf(in.Name) {
			if !rn.bar.blocked[c] && (rn.in.tracker == nil || !rn.in.tracker.Paused(c)) {
				paused = false
				break
			}
		}
		r.SetPaused(in.Name, paused)
	}
}

// anyBlocked reports whether any of the deliveries' channels still awaits a
// snapshot.
func (rn *run) anyBlocked(ds []edge.Delivery) bool {
	for _, d := range ds {
		if rn.bar.blocked[rn.lay.deliveryChannel(d)] {
			return true
		}
	}
	return false
}
