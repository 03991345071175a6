package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weirflow/weir/pkg/deadletter"
	"github.com/weirflow/weir/pkg/edge"
	"github.com/weirflow/weir/pkg/keygroup"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/source"
	"github.com/weirflow/weir/pkg/state"
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
		select {
		case <-ctx.Done():
			return rt.shutdown()
		case err := <-r.Err():
			return err
		case <-ticker.C:
			if err := rt.serviceTime(ctx); err != nil {
				return err
			}
		case d := <-r.C():
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

// fill adds deliveries to the step until it holds a fetch batch or the
// frame linger has passed since its first delivery.
func (rt *Runtime) fill(ctx context.Context, r *edge.Reader, batch []edge.Delivery) []edge.Delivery {
	var linger <-chan time.Time
	for len(batch) < rt.plan.fetchBatch {
		select {
		case d := <-r.C():
			batch = append(batch, d)
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
	now     time.Time
	batch   *state.Batch
	touched map[string]state.Position
	letters []deadletter.Letter
	in, out int
}

// runStep processes deliveries as one step, retrying in place on Retry.
func (rt *Runtime) runStep(ctx context.Context, ds []edge.Delivery) error {
	for attempt := 0; ; attempt++ {
		err := rt.tryStep(ctx, ds)
		var re *RetryError
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

func (rt *Runtime) tryStep(ctx context.Context, ds []edge.Delivery) error {
	s := &step{rt: rt, now: rt.now(), batch: rt.store.NewBatch(), touched: map[string]state.Position{}}
	var seqs []uint64
	if rt.writer != nil {
		seqs = rt.writer.Seqs()
	}
	committed := false
	defer func() {
		if !committed {
			s.batch.Close()
			if rt.writer != nil {
				rt.writer.Reset(seqs)
			}
		}
	}()
	for _, d := range ds {
		if err := s.deliver(d); err != nil {
			return err
		}
	}
	frames, err := s.stage()
	if err != nil {
		return err
	}
	// Dead letters are filed before the commit: their IDs derive from the
	// source coordinate, so filing again after a crash is harmless, and a
	// position never passes a record that is neither handled nor filed.
	if len(s.letters) > 0 {
		if err := deadletter.Publish(ctx, rt.js, rt.plan.pipeline, s.letters); err != nil {
			return Retry(err, time.Second)
		}
	}
	if err := s.batch.Commit(); err != nil {
		return fmt.Errorf("stream: commit step: %w", err)
	}
	committed = true
	for name, p := range s.touched {
		rt.positions[name] = p
	}
	rt.published = nil
	if len(frames) > 0 {
		if err := edge.Publish(ctx, rt.js, frames, rt.plan.maxInFlight()); err != nil {
			// The frames stay staged; a restart publishes them.
			return fmt.Errorf("stream: publish output: %w", err)
		}
		for _, f := range frames {
			rt.published = append(rt.published, stagedID(f))
		}
	}
	for _, d := range ds {
		// Acks only release flow control: the committed position decides
		// where reading resumes, so a lost ack costs a redelivery that the
		// position check drops.
		_ = d.Msg.Ack()
	}
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

// deliver handles one input message: every record in it is processed or
// dead-lettered before the position moves past it.
func (s *step) deliver(d edge.Delivery) error {
	name := d.Input.Name
	pos := s.position(name)
	if d.Seq <= pos.Seq {
		s.rt.stats.redelivered.Add(1)
		return nil
	}
	pos.Seq = d.Seq
	if s.rt.plan.ingress {
		if err := s.ingress(d); err != nil {
			return err
		}
	} else {
		writer, fseq, ok := edge.FrameSeq(d.Msg)
		if !ok {
			return fmt.Errorf("stream: %s seq %d: edge message without frame headers", name, d.Seq)
		}
		if fseq <= pos.Frames[writer] {
			s.rt.stats.duplicateFrames.Add(1)
		} else {
			recs, err := edge.DecodeFrame(d.Msg.Data())
			if err != nil {
				return fmt.Errorf("stream: %s seq %d: %w", name, d.Seq, err)
			}
			for _, r := range recs {
				if err := s.record(r); err != nil {
					return err
				}
			}
			frames := make(map[string]uint64, len(pos.Frames)+1)
			for k, v := range pos.Frames {
				frames[k] = v
			}
			frames[writer] = fseq
			pos.Frames = frames
		}
	}
	s.touched[name] = pos
	return nil
}

func (s *step) ingress(d edge.Delivery) error {
	meta, _ := d.Msg.Metadata()
	m := source.Message{Subject: d.Msg.Subject(), Header: d.Msg.Headers(), Data: d.Msg.Data(), Seq: d.Seq}
	if meta != nil {
		m.Stored = meta.Timestamp
	}
	r, err := s.rt.plan.decoder.Decode(m, s.now)
	var fe *source.FieldError
	if errors.As(err, &fe) {
		s.deadLetter(fe.At, fe.Field, fe.Reason, m.Data, fe.SideOutput)
		return nil
	}
	if err != nil {
		return err
	}
	return s.record(r)
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
	c := &Context{s: s, rec: r, kg: kg, key: key, scope: s.batch.Scope(kg, key, s.now)}
	err := s.rt.op.Process(c, r)
	if err == nil {
		return nil
	}
	var pe *PoisonError
	var le *state.LimitError
	switch {
	case errors.As(err, &pe):
		s.deadLetter(r.Source, pe.Field, pe.Err.Error(), r.Value, false)
		return nil
	case errors.As(err, &le) && le.Action == state.LimitDeadLetter:
		s.deadLetter(r.Source, "state."+le.Family, le.Error(), r.Value, false)
		return nil
	case errors.As(err, &le):
		return fmt.Errorf("stream: %s: state bound crossed and the contract says fail: %w", r.Source, err)
	}
	return err
}

func (s *step) deadLetter(at record.Coordinate, field, reason string, payload []byte, side bool) {
	s.rt.log.Warn("dead letter", "at", at.String(), "field", field, "reason", reason, "side_output", side)
	s.letters = append(s.letters, deadletter.Letter{
		At: at, Operator: s.rt.cfg.Operator, Field: field, Reason: reason, Payload: payload, SideOutput: side,
	})
}

// serviceTime expires state past its TTL and fires due processing-time
// timers, each batch of them as one step.
func (rt *Runtime) serviceTime(ctx context.Context) error {
	now := rt.now()
	if _, err := rt.store.Expire(now, 10_000); err != nil {
		return fmt.Errorf("stream: expire state: %w", err)
	}
	th, ok := rt.op.(TimerHandler)
	if !ok {
		return nil
	}
	timers, err := rt.store.DueTimers(state.ProcessingTime, now, rt.plan.fetchBatch)
	if err != nil || len(timers) == 0 {
		return err
	}
	s := &step{rt: rt, now: now, batch: rt.store.NewBatch(), touched: map[string]state.Position{}}
	defer s.batch.Close()
	for _, t := range timers {
		if err := s.batch.DeleteTimer(t); err != nil {
			return err
		}
		c := &Context{s: s, kg: t.KeyGroup, key: t.Key, scope: s.batch.Scope(t.KeyGroup, t.Key, now)}
		if err := th.OnTimer(c, t); err != nil {
			return fmt.Errorf("stream: timer %s: %w", t.Name, err)
		}
		rt.stats.timersFired.Add(1)
	}
	frames, err := s.stage()
	if err != nil {
		return err
	}
	if err := s.batch.Commit(); err != nil {
		return err
	}
	rt.published = nil
	if err := edge.Publish(ctx, rt.js, frames, rt.plan.maxInFlight()); err != nil {
		return err
	}
	for _, f := range frames {
		rt.published = append(rt.published, stagedID(f))
	}
	rt.stats.out.Add(int64(s.out))
	return nil
}
