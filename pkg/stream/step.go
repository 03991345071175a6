package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/weirflow/weir/pkg/deadletter"
	"github.com/weirflow/weir/pkg/edge"
	"github.com/weirflow/weir/pkg/keygroup"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/source"
	"github.com/weirflow/weir/pkg/state"
	"github.com/weirflow/weir/pkg/watermark"
)

// loop reads steps of input and services timers until ctx ends.
func (rt *Runtime) loop(ctx context.Context, r *edge.Reader) error {
	tick := rt.cfg.TickInterval
	if tick == 0 {
		tick = time.Second
	}
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	batch := make([]edge.Delivery, 0, rt.plan.fetchBatch)
	for {
		if held := rt.bar.held; len(held) > 0 && !rt.anyBlocked(held) {
			// Deliveries held back while their input awaited a snapshot
			// come first, in the order they arrived.
			rt.bar.held = nil
			if err := rt.runStep(ctx, held); err != nil {
				if ctx.Err() != nil {
					return rt.shutdown()
				}
				return err
			}
			continue
		}
		waiting := time.Now()
		select {
		case <-ctx.Done():
			return rt.shutdown()
		case err := <-r.Err():
			var rerr error
			if r, rerr = rt.reopenReader(ctx, err); rerr != nil {
				return rt.shutdown()
			}
		case <-rt.reassigned:
			if err := rt.shutdown(); err != nil {
				return err
			}
			return errReassigned
		case t := <-rt.bar.triggers:
			if err := rt.triggered(ctx, t); err != nil {
				if ctx.Err() != nil {
					return rt.shutdown()
				}
				return err
			}
		case <-ticker.C:
			if err := rt.serviceTime(ctx); err != nil {
				if ctx.Err() != nil {
					return rt.shutdown()
				}
				return err
			}
		case d := <-r.C():
			rt.obs.metrics.Idle(ctx, time.Since(waiting))
			batch = append(batch[:0], d)
			batch = rt.fill(ctx, r, batch)
			if err := rt.runStep(ctx, batch); err != nil {
				if ctx.Err() != nil {
					return rt.shutdown()
				}
				return err
			}
		}
	}
}

// fill adds deliveries to the step until it holds a fetch batch of records
// or the frame linger has passed since its first delivery. Records, not
// messages, bound a step: a frame carries hundreds, and a step's output is
// staged whole and its length is how long a checkpoint trigger waits.
func (rt *Runtime) fill(ctx context.Context, r *edge.Reader, batch []edge.Delivery) []edge.Delivery {
	var linger <-chan time.Time
	records := int64(0)
	for _, d := range batch {
		records += d.Records
	}
	for records < int64(rt.plan.fetchBatch) {
		select {
		case d := <-r.C():
			batch = append(batch, d)
			records += d.Records
			continue
		default:
		}
		if rt.plan.linger <= 0 {
			return batch
		}
		if linger == nil {
			t := time.NewTimer(rt.plan.linger)
			defer t.Stop()
			linger = t.C
		}
		select {
		case d := <-r.C():
			batch = append(batch, d)
			records += d.Records
		case <-linger:
			return batch
		case <-ctx.Done():
			return batch
		}
	}
	return batch
}

func (rt *Runtime) shutdown() error {
	rt.log.Info("stopping")
	return rt.commitPublished()
}

// step is the unit of atomic progress: its state changes, positions and
// staged output commit together.
type step struct {
	rt      *Runtime
	started time.Time // wall clock, for step metrics
	now     time.Time
	wm      time.Time // the operator's watermark as the step sees it
	batch   *state.Batch
	touched map[string]state.Position
	letters []deadletter.Letter
	in, out int
	// held are deliveries of channels blocked by a barrier; floor is, per
	// input partition, the least sequence held, in this step or before:
	// the partition's position stays below it, and frames of its other
	// writers processed past it are recognised by their frame sequences
	// when read again.
	held    []edge.Delivery
	floor   map[string]uint64
	holding map[string]bool // channels with a delivery held
}

// runStep processes deliveries as one step, retrying in place on Retry.
func (rt *Runtime) runStep(ctx context.Context, ds []edge.Delivery) error {
	for attempt := 0; ; attempt++ {
		err := rt.tryStep(ctx, ds)
		var re *operator.RetryError
		if !errors.As(err, &re) {
			return err
		}
		rt.stats.retries.Add(1)
		wait := re.After
		if wait <= 0 {
			wait = time.Duration(min(attempt+1, 30)) * 100 * time.Millisecond
		}
		rt.log.Warn("retrying step", "attempt", attempt+1, "after", wait, "err", re.Err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (rt *Runtime) newStep(now time.Time) *step {
	s := &step{rt: rt, started: time.Now(), now: now, batch: rt.store.NewBatch(), touched: map[string]state.Position{},
		floor: map[string]uint64{}, holding: map[string]bool{}}
	for _, d := range rt.bar.held {
		s.held1(d, rt.deliveryChannel(d))
	}
	if rt.tracker != nil {
		s.wm = rt.tracker.Emitted()
	}
	return s
}

func (rt *Runtime) tryStep(ctx context.Context, ds []edge.Delivery) error {
	s := rt.newStep(rt.now())
	var seqs []uint64
	if rt.writer != nil {
		seqs = rt.writer.Seqs()
	}
	committed := false
	barSaved := rt.bar.save()
	defer func() {
		if !committed {
			s.batch.Close()
			if rt.writer != nil {
				rt.writer.Reset(seqs)
			}
			rt.bar.restore(barSaved) // a retried step sees its barriers afresh
		}
	}()
	for _, d := range ds {
		// A channel's deliveries keep their order: behind a held one,
		// the next is held too.
		ch := rt.deliveryChannel(d)
		if rt.bar.blocked[ch] || s.holding[ch] {
			s.hold(d, ch)
			continue
		}
		if err := s.deliver(d, ch); err != nil {
			return err
		}
	}
	held := s.held
	if err := s.advance(); err != nil {
		return err
	}
	snap := rt.snapshotDue(len(held))
	if snap && rt.writer != nil {
		// The barrier goes downstream behind everything this operator
		// emitted before its snapshot.
		rt.writer.Broadcast(record.Record{Kind: record.Barrier, Epoch: rt.bar.epoch})
		rt.writer.SetEpoch(rt.bar.epoch + 1)
	}
	if err := s.finish(ctx, &committed); err != nil {
		return err
	}
	for _, d := range ds {
		if containsDelivery(held, d) {
			continue // acknowledged when processed
		}
		// Acks only release flow control: the committed position decides
		// where reading resumes, so a lost ack costs a redelivery that the
		// position check drops.
		_ = d.Msg.Ack()
	}
	rt.bar.held = append(rt.bar.held, held...)
	if snap {
		return rt.snapshot(ctx)
	}
	return nil
}

func containsDelivery(ds []edge.Delivery, d edge.Delivery) bool {
	for _, h := range ds {
		if h.Input == d.Input && h.Seq == d.Seq {
			return true
		}
	}
	return false
}

// anyBlocked reports whether any of the deliveries' channels still awaits a
// snapshot.
func (rt *Runtime) anyBlocked(ds []edge.Delivery) bool {
	for _, d := range ds {
		if rt.bar.blocked[rt.deliveryChannel(d)] {
			return true
		}
	}
	return false
}

// deliveryChannel is the channel a delivery belongs to.
func (rt *Runtime) deliveryChannel(d edge.Delivery) string {
	if d.Frame == nil {
		return d.Input.Name // ingress, or a malformed frame that deliver refuses
	}
	return rt.channel(d.Input.Name, d.Frame.Producer)
}

// hold keeps a delivery of a blocked channel for after the snapshot.
func (s *step) hold(d edge.Delivery, ch string) {
	s.held = append(s.held, d)
	s.held1(d, ch)
}

// held1 notes a delivery held, in this step or before: its channel holds
// back, and its partition's position stays below it.
func (s *step) held1(d edge.Delivery, ch string) {
	s.holding[ch] = true
	if f, ok := s.floor[d.Input.Name]; !ok || d.Seq < f {
		s.floor[d.Input.Name] = d.Seq
	}
}

// finish files the step's dead letters, commits its batch, publishes its
// frames and counts it. committed is set once the batch is committed.
func (s *step) finish(ctx context.Context, committed *bool) error {
	rt := s.rt
	frames, err := s.stage()
	if err != nil {
		return err
	}
	// Dead letters are filed before the commit: their IDs derive from the
	// source coordinate, so filing again after a crash is harmless, and a
	// position never passes a record that is neither handled nor filed.
	if len(s.letters) > 0 {
		if err := deadletter.Publish(ctx, rt.js, rt.plan.pipeline, s.letters); err != nil {
			return operator.Retry(err, time.Second)
		}
	}
	if h := rt.cfg.BeforeCommit; h != nil {
		h(rt.stats.steps.Load())
	}
	if err := s.batch.Commit(); err != nil {
		return fmt.Errorf("stream: commit step: %w", err)
	}
	*committed = true
	if h := rt.cfg.AfterCommit; h != nil {
		h(rt.stats.steps.Load())
	}
	for name, p := range s.touched {
		rt.positions[name] = p
	}
	rt.published = nil
	if len(frames) > 0 {
		start := time.Now()
		// The step is committed and its frames staged: publishing them is
		// retried until it succeeds (the broker may be restarting); only a
		// stop gives up, and the next start publishes them.
		for attempt := 1; ; attempt++ {
			err := edge.Publish(ctx, rt.js, frames, rt.plan.maxInFlight())
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("stream: publish output: %w", err)
			}
			rt.log.Warn("publishing output", "attempt", attempt, "err", err)
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
		}
		// Waiting for downstream storage is where backpressure shows.
		rt.obs.metrics.Backpressured(ctx, time.Since(start))
		for _, f := range frames {
			rt.published = append(rt.published, stagedID(f))
			rt.obs.metrics.Out(ctx, f.Subject, int64(f.Records), int64(len(f.Data)))
		}
	}
	rt.align()
	var dead, side int64
	for _, l := range s.letters {
		if l.SideOutput {
			side++
		} else {
			dead++
		}
	}
	rt.obs.metrics.DeadLettered(ctx, dead)
	rt.obs.metrics.SideOutput(ctx, side)
	rt.obs.metrics.Step(ctx, time.Since(s.started))
	rt.obs.metrics.Busy(ctx, time.Since(s.started))
	rt.stats.steps.Add(1)
	rt.stats.in.Add(int64(s.in))
	rt.stats.out.Add(int64(s.out))
	for _, l := range s.letters {
		if l.SideOutput {
			rt.stats.sideOutput.Add(1)
		} else {
			rt.stats.deadLettered.Add(1)
		}
	}
	return nil
}

// advance moves the operator's watermark to the minimum over its active
// inputs: event-time timers up to it fire, in this step, before the
// watermark is forwarded behind the step's output. When every input is
// idle the operator forwards an idle marker once.
func (s *step) advance() error {
	tr := s.rt.tracker
	if tr == nil {
		return nil
	}
	w := s.rt.writer
	if wm, ok := tr.Watermark(); ok && wm.After(tr.Emitted()) {
		s.wm = wm
		if err := s.fireTimers(state.EventTime, wm); err != nil {
			return err
		}
		tr.SetEmitted(wm)
		s.rt.stats.watermark.Store(wm.UnixMilli())
		if w != nil {
			w.Broadcast(record.Record{Kind: record.Watermark, Time: wm})
		}
		s.rt.idleSent = false
	}
	if tr.AllIdle() {
		if !s.rt.idleSent && w != nil {
			w.Broadcast(record.Record{Kind: record.Idle})
		}
		s.rt.idleSent = true
	}
	for _, n := range s.rt.chans {
		s.rt.noteInput(n, tr.Input(n).Watermark, 0, false)
	}
	b, err := tr.MarshalBinary()
	if err != nil {
		return err
	}
	return s.batch.PutMeta(metaWatermarks, b)
}

// fireTimers fires the due timers of a domain, including those set while
// firing, in time order.
func (s *step) fireTimers(d state.Domain, upTo time.Time) error {
	th, ok := s.rt.op.(operator.TimerHandler)
	if !ok {
		return nil
	}
	for {
		timers, err := s.batch.DueTimers(d, upTo, 256)
		if err != nil || len(timers) == 0 {
			return err
		}
		for _, t := range timers {
			if err := s.batch.DeleteTimer(t); err != nil {
				return err
			}
			c := &Context{s: s, kg: t.KeyGroup, key: t.Key, scope: s.batch.Scope(t.KeyGroup, t.Key, s.now)}
			if err := th.OnTimer(c, t); err != nil {
				return fmt.Errorf("stream: timer %s of key %q: %w", t.Name, t.Key, err)
			}
			s.rt.stats.timersFired.Add(1)
			s.rt.obs.metrics.TimersFired(context.Background(), 1)
		}
	}
}

// stage puts the step's positions, output frames and frame sequences into
// its batch, together with deletions of frames the last step published.
func (s *step) stage() ([]edge.Message, error) {
	b := s.batch
	for name, p := range s.touched {
		if err := b.SetPosition(name, p); err != nil {
			return nil, err
		}
	}
	for _, id := range s.rt.published {
		if err := b.DeleteOutput(id); err != nil {
			return nil, err
		}
	}
	if s.rt.writer == nil {
		return nil, nil
	}
	frames := s.rt.writer.Flush()
	for _, f := range frames {
		data, _ := f.MarshalBinary()
		if err := b.StageOutput(stagedID(f), data); err != nil {
			return nil, err
		}
	}
	if len(frames) > 0 {
		if err := b.PutMeta(metaFrameSeqs, encodeSeqs(s.rt.writer.Seqs())); err != nil {
			return nil, err
		}
	}
	return frames, nil
}

// stagedID orders staged frames by partition and sequence.
func stagedID(m edge.Message) string { return fmt.Sprintf("%s/%020d", m.Subject, m.Seq) }

// position is the input's position as of this step.
func (s *step) position(name string) state.Position {
	if p, ok := s.touched[name]; ok {
		return p
	}
	return s.rt.positions[name]
}

// deliver handles one input message of channel ch: every record in it is processed or
// dead-lettered before the position moves past it.
func (s *step) deliver(d edge.Delivery, ch string) error {
	name := d.Input.Name
	pos := s.position(name)
	if d.Seq <= pos.Seq {
		s.rt.stats.redelivered.Add(1)
		return nil
	}
	if f, ok := s.floor[name]; !ok || d.Seq < f {
		pos.Seq = d.Seq
	}
	if s.rt.plan.ingress {
		if err := s.ingress(d); err != nil {
			return err
		}
	} else {
		fh := d.Frame
		if fh == nil {
			return fmt.Errorf("stream: %s seq %d: edge message without frame headers", name, d.Seq)
		}
		writer := fh.Writer()
		s.rt.awaitFence(fh.Producer)
		switch {
		case fh.Seq <= pos.Frames[writer]:
			s.rt.stats.duplicateFrames.Add(1)
		case s.rt.fenced(fh, d.Input.Partition):
			s.rt.stats.fencedFrames.Add(1)
		default:
			recs, err := edge.DecodeFrame(d.Msg.Data())
			if err != nil {
				return fmt.Errorf("stream: %s seq %d: %w", name, d.Seq, err)
			}
			for _, r := range recs {
				if ch == "" {
					if r.Kind != record.Data {
						continue // a writer the assignment does not name: data only
					}
				} else {
					s.control(ch, r)
				}
				if r.Kind == record.Barrier {
					s.barrier(ch, r.Epoch)
					continue
				}
				if err := s.record(r); err != nil {
					return err
				}
			}
			frames := make(map[string]uint64, len(pos.Frames)+1)
			for k, v := range pos.Frames {
				frames[k] = v
			}
			frames[writer] = fh.Seq
			pos.Frames = frames
		}
	}
	s.touched[name] = pos
	s.rt.obs.metrics.In(context.Background(), name, d.Records, int64(len(d.Msg.Data())))
	s.rt.noteInput(name, time.Time{}, int64(d.Pending), true)
	return nil
}

func (s *step) ingress(d edge.Delivery) error {
	m := source.Message{Subject: d.Msg.Subject(), Header: d.Msg.Headers(), Data: d.Msg.Data(), Seq: d.Seq, Stored: d.Stored}
	r, err := s.rt.plan.decoder.Decode(m, s.now)
	var fe *source.FieldError
	if errors.As(err, &fe) {
		s.deadLetter(record.Record{Source: fe.At, Value: m.Data}, fe.Field, fe.Reason, fe.SideOutput)
		if tr := s.rt.tracker; tr != nil {
			tr.Touch(d.Input.Name, s.now)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if tr := s.rt.tracker; tr != nil {
		name := d.Input.Name
		tr.Observe(name, r.Time, s.now)
		switch s.rt.plan.strategy {
		case watermark.BoundedOutOfOrderness:
			tr.Advance(name, tr.Input(name).MaxEventTime.Add(-s.rt.plan.outOfOrder-time.Millisecond))
		case watermark.SourceProvided:
			if v := m.Header.Get(HeaderWatermark); v != "" {
				ms, err := strconv.ParseInt(v, 10, 64)
				wm := time.UnixMilli(ms).UTC()
				if err == nil {
					err = record.CheckTime(wm)
				}
				if err != nil {
					s.deadLetter(r, "header "+HeaderWatermark, fmt.Sprintf("%q is not Unix milliseconds in the event-time domain: %v", v, err), false)
					return nil
				}
				tr.Advance(name, wm)
			}
		}
	}
	return s.record(r)
}

// HeaderWatermark carries a source-provided watermark on an ingress
// message, in Unix milliseconds, when the contract's progress.watermark is
// source-provided.
const HeaderWatermark = "Weir-Watermark"

// control feeds an edge record to the watermark tracker: data makes its
// input active, watermarks advance it, idle markers idle it.
func (s *step) control(input string, r record.Record) {
	tr := s.rt.tracker
	if tr == nil {
		return
	}
	switch r.Kind {
	case record.Data:
		tr.Observe(input, r.Time, s.now)
	case record.Watermark:
		tr.Touch(input, s.now)
		tr.Advance(input, r.Time)
	case record.Idle:
		tr.SetIdle(input, true)
	}
}

// record routes one record: data to the operator, control records to the
// runtime.
func (s *step) record(r record.Record) error {
	if r.Kind != record.Data {
		// Watermarks, idleness, barriers and end of input are consumed by
		// the event-time and checkpoint machinery, which forwards its own.
		s.rt.stats.control.Add(1)
		return nil
	}
	s.in++
	key := r.Key
	if s.rt.plan.keyByID {
		key = []byte(r.ID)
	}
	kg := keygroup.Of(key, s.rt.plan.keyGroups)
	if len(s.rt.plan.families) > 0 && !s.rt.lay.owns(kg) {
		// Keyed state lives with the instance owning the key group; a
		// record routed elsewhere would split it.
		s.deadLetter(r, "key", fmt.Sprintf("key %q is in key group %d, which instance %s does not own (it owns key groups [%d, %d) through its input partitions): the input must be partitioned by key group of the state key",
			key, kg, s.rt.cfg.Instance, s.rt.lay.groupLo, s.rt.lay.groupHi), false)
		return nil
	}
	c := &Context{s: s, rec: r, kg: kg, key: key, scope: s.batch.Scope(kg, key, s.now)}
	span, tr := s.rt.span(r)
	c.trace = tr
	late := s.rt.tracker != nil && !s.wm.IsZero() && !r.Time.After(s.wm)
	letters := len(s.letters)
	err := s.rt.op.Process(c, r)
	endSpan(span, err)
	if err == nil {
		// On time, late but accepted, or late and dropped to the side output.
		ctx := context.Background()
		switch {
		case s.rt.tracker == nil:
		case !late:
			s.rt.obs.metrics.OnTime(ctx, 1)
		case len(s.letters) > letters:
			s.rt.obs.metrics.LateDropped(ctx, 1)
		default:
			s.rt.obs.metrics.LateAccepted(ctx, 1)
		}
		return nil
	}
	var pe *operator.PoisonError
	var le *state.LimitError
	switch {
	case errors.As(err, &pe):
		s.deadLetter(r, pe.Field, pe.Err.Error(), false)
		return nil
	case errors.As(err, &le) && le.Action == state.LimitDeadLetter:
		s.deadLetter(r, "state."+le.Family, le.Error(), false)
		return nil
	case errors.As(err, &le):
		return fmt.Errorf("stream: %s: state bound crossed and the contract says fail: %w", r.Source, err)
	}
	return err
}

// deadLetter files r — its source coordinate, ID and payload — with the
// field and reason it failed on, on the side output when side is set.
func (s *step) deadLetter(r record.Record, field, reason string, side bool) {
	s.rt.log.Warn("dead letter", "at", r.Source.String(), "field", field, "reason", reason, "side_output", side)
	s.letters = append(s.letters, deadletter.Letter{
		At: r.Source, ID: r.ID, Operator: s.rt.cfg.Operator, Field: field, Reason: reason, Payload: r.Value, SideOutput: side,
	})
}

// serviceTime expires state past its TTL, marks silent inputs idle and
// fires due processing-time timers, as one step when anything changed.
func (rt *Runtime) serviceTime(ctx context.Context) error {
	now := rt.now()
	if _, err := rt.store.Expire(now, 10_000); err != nil {
		return fmt.Errorf("stream: expire state: %w", err)
	}
	changed := false
	if tr := rt.tracker; tr != nil {
		if idled := tr.CheckIdle(now); len(idled) > 0 {
			rt.log.Info("inputs idle", "inputs", idled)
			changed = true
		}
		if wm, ok := tr.Watermark(); ok && wm.After(tr.Emitted()) {
			changed = true
		}
		if tr.AllIdle() && !rt.idleSent {
			changed = true
		}
	}
	if _, ok := rt.op.(operator.TimerHandler); ok {
		due, err := rt.store.DueTimers(state.ProcessingTime, now, 1)
		if err != nil {
			return err
		}
		changed = changed || len(due) > 0
	}
	if !changed {
		return nil
	}
	s := rt.newStep(now)
	committed := false
	defer func() {
		if !committed {
			s.batch.Close()
		}
	}()
	if err := s.fireTimers(state.ProcessingTime, now); err != nil {
		return err
	}
	if err := s.advance(); err != nil {
		return err
	}
	return s.finish(ctx, &committed)
}
