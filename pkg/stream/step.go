package stream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/keygroup"
	"github.com/weirflow/weir/internal/watermark"
	"github.com/weirflow/weir/pkg/ingress"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
)

// step is the unit of atomic progress: its state changes, positions and
// staged output commit together. A step that does not commit aborts
// (close): its batch is dropped, the writer forgets the frames it cut and
// the barrier bookkeeping is as before it, so a retried step starts afresh.
// Its parts: what it holds behind barriers (stepHolds), what it counts
// (stepTally), its timer budget (stepTimers) and what an abort restores
// (stepUndo).
type step struct {
	run     *run
	started time.Time // wall clock, for step metrics
	now     time.Time
	wm      time.Time // the operator's watermark as the step sees it
	batch   *state.Batch
	touched map[string]state.Position
	letters []deadletter.Letter
	// noDeadLetter is the first record the step could not file, for an
	// operator without a dead-letter stream: it fails the step.
	noDeadLetter error
	// from is the delivery being handled: where its records were read.
	from edge.Delivery
	// chainErr is the first error a record emitted along the chain of
	// operators before the operator met (chained).
	chainErr error
	// envs are the Envs the step hands its operators, one per place in
	// the chain (env.link), reused record after record: an Env is valid
	// only during the call it is given to (operator.Env), and one made
	// per record was the largest allocation of a query service.
	envs []env
	stepHolds
	stepTally
	stepTimers
	stepUndo
	committed bool
}

// stepHolds are deliveries of channels blocked by a barrier: held; floor
// is, per input partition, the least sequence held, in this step or
// before: the partition's position stays below it, and frames of its
// other writers processed past it are recognised by their frame sequences
// when read again.
type stepHolds struct {
	held    []edge.Delivery
	floor   map[string]uint64
	holding map[string]bool // channels with a delivery held
}

// stepTally is what a step counts, for its stats and metrics once it
// commits.
type stepTally struct {
	in, out int
	// erased counts the records the step dropped as an erased key's.
	erased int64
	// stored is, per input, when the broker stored the last message the
	// step takes: what the source lag measures once the step commits.
	stored map[string]time.Time
	// spent is, per input, the time the step spent on its messages.
	spent map[string]time.Duration
}

// stepTimers is a step's timer budget.
type stepTimers struct {
	// timers counts the timers the step fired; past maxStepTimers it fires
	// no more, and firing says it left due ones for the next step.
	timers int
	firing bool
	// pastTimers: the step set an event-time timer at or behind the
	// watermark already forwarded (a late record an operator accepted).
	// No later watermark may come to fire it — the inputs may stay idle —
	// so the step fires it itself.
	pastTimers bool
}

// stepUndo is what a step restores when it aborts.
type stepUndo struct {
	progress watermark.Progress
	seqs     []uint64
	txn      txnState
	barriers barrierState
}

// runStep processes deliveries as one step, retrying in place on Retry.
// env returns the step's Env for place link of the chain (env.link).
func (s *step) env(link int) *env {
	if link >= len(s.envs) {
		// Once, before any is handed out: the chain's length bounds link.
		s.envs = make([]env, max(link+1, len(s.run.rt.before)+1))
	}
	return &s.envs[link]
}

func (rn *run) runStep(ctx context.Context, ds []edge.Delivery) error {
	err := rn.retried(ctx, func(ctx context.Context) error { return rn.tryStep(ctx, ds) })
	var lost *removedError
	if errors.As(err, &lost) {
		// Kept now that the step's batch is closed.
		return rn.ret.lostWhileReading(lost.te)
	}
	return err
}

// removedError is a step's loss of records removed from an input's stream
// before they were read, for runStep to keep (lostWhileReading).
type removedError struct{ te *edge.TrimmedError }

func (e *removedError) Error() string { return e.te.Error() }

// retried runs a step until it does not ask to be retried
// (operator.Retry): discarded and run again in place after a back-off.
func (rn *run) retried(ctx context.Context, try func(context.Context) error) error {
	for attempt := 0; ; attempt++ {
		err := try(ctx)
		var re *operator.RetryError
		if !errors.As(err, &re) {
			return err
		}
		rn.rt.stats.retries.Add(1)
		rn.obs.metrics.Retried(ctx)
		wait := re.After
		if wait <= 0 {
			wait = time.Duration(min(attempt+1, 30)) * 100 * time.Millisecond
		}
		rn.rt.log.Warn("retrying step", "attempt", attempt+1, "after", wait, "err", re.Err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// newStep starts a step at processing time now. Close it when done.
func (rn *run) newStep(now time.Time) *step {
	s := &step{run: rn, started: time.Now(), now: now, batch: rn.store.NewBatch(), touched: map[string]state.Position{},
		stepTally: stepTally{stored: map[string]time.Time{}, spent: map[string]time.Duration{}},
		stepHolds: stepHolds{floor: map[string]uint64{}, holding: map[string]bool{}},
		stepUndo:  stepUndo{barriers: rn.bar.save()}}
	if rn.out.writer != nil {
		s.seqs = rn.out.writer.Seqs()
	}
	if rn.out.txn != nil {
		s.txn = rn.out.txn.txnState.clone()
	}
	for _, d := range rn.bar.held {
		s.held1(d, rn.lay.deliveryChannel(d))
	}
	if rn.in.tracker != nil {
		s.wm = rn.in.tracker.Emitted()
		s.progress = rn.in.tracker.Save()
	}
	return s
}

// close aborts the step unless it committed.
func (s *step) close() {
	if s.committed {
		return
	}
	s.batch.Close()
	if w := s.run.out.writer; w != nil {
		w.Reset(s.seqs)
	}
	if tr := s.run.in.tracker; tr != nil {
		// The watermarks the step moved, and the one it forwarded, are
		// as before it: a retry fires the same timers and sees the same
		// records on time.
		tr.Restore(s.progress)
	}
	if t := s.run.out.txn; t != nil {
		t.txnState = s.txn
	}
	s.run.bar.restore(s.barriers) // a retried step sees its barriers afresh
}

func (rn *run) tryStep(ctx context.Context, ds []edge.Delivery) error {
	s := rn.newStep(rn.rt.now())
	defer s.close()
	jumps := rn.ret.jumps(ctx, ds)
	heldAt := map[int]bool{} // by index: a redelivered copy has the same input and sequence
	for i, d := range ds {
		// A channel's deliveries keep their order: behind a held one,
		// the next is held too.
		ch := rn.lay.deliveryChannel(d)
		if rn.bar.blocked[ch] || s.holding[ch] {
			s.hold(d, ch)
			heldAt[i] = true
			continue
		}
		if err := s.deliver(ctx, d, ch); err != nil {
			var gap *FrameGapError
			if errors.As(err, &gap) {
				// Frames missing because records were removed from the
				// stream are a loss to declare, found by the jumps.
				if jerr := rn.ret.checkJumps(jumps); jerr != nil {
					return jerr
				}
				te, rerr := rn.ret.removedBefore(ctx, *d.Input, d.Seq)
				if rerr != nil {
					return operator.Retry(fmt.Errorf("%w (and reading the stream, to tell whether records were removed, failed: %v)", err, rerr), time.Second)
				}
				if te != nil {
					rn.rt.log.Error("stopping: records were removed before they were read", "err", te, "gap", err,
						"fix", "the instance refuses to start until `weir recover -pipeline "+rn.plan.pipeline+"` decides")
					return &removedError{te}
				}
			}
			return err
		}
	}
	held := s.held
	if err := s.advance(); err != nil {
		return err
	}
	snap := rn.bar.snapshotDue(held, &rn.plan, len(rn.lay.chans), rn.rt.log)
	if snap && rn.out.writer != nil {
		// The barrier goes downstream behind everything this operator
		// emitted before its snapshot.
		rn.out.writer.Broadcast(record.Record{Kind: record.Barrier, Epoch: rn.bar.epoch})
		rn.out.writer.SetEpoch(rn.bar.epoch + 1)
	}
	if err := rn.ret.checkJumps(jumps); err != nil {
		return err
	}
	if err := s.finish(ctx); err != nil {
		return err
	}
	rn.in.noteSeen(jumps)
	// Acks only release flow control: the committed position decides
	// where reading resumes, so a lost ack costs a redelivery that the
	// position check drops. The consumers acknowledge all, so the last
	// delivery of each input acknowledges the step's others; a held
	// delivery is acknowledged again when processed, which changes
	// nothing. A bounded input's End has no message to acknowledge: the
	// last delivery before it is acknowledged instead.
	last := make(map[*edge.Input]int, len(rn.plan.inputs))
	for i, d := range ds {
		if !heldAt[i] && !d.End {
			last[d.Input] = i
		}
	}
	for i, d := range ds {
		switch {
		case heldAt[i]:
		case last[d.Input] == i:
			_ = d.Ack()
		default:
			d.Release()
		}
	}
	rn.bar.held = append(rn.bar.held, held...)
	if snap {
		return rn.snapshot(ctx)
	}
	return nil
}

// hold keeps a delivery of a blocked channel for after the snapshot.
func (s *stepHolds) hold(d edge.Delivery, ch string) {
	s.held = append(s.held, d)
	s.held1(d, ch)
}

// held1 notes a delivery held, in this step or before: its channel holds
// back, and its partition's position stays below it.
func (s *stepHolds) held1(d edge.Delivery, ch string) {
	s.holding[ch] = true
	if f, ok := s.floor[d.Input.Name]; !ok || d.Seq < f {
		s.floor[d.Input.Name] = d.Seq
	}
}

// deliver handles one input message of channel ch: every record in it is
// processed or dead-lettered before the position moves past it.
func (s *step) deliver(ctx context.Context, d edge.Delivery, ch string) error {
	name := d.Input.Name
	if d.End {
		s.end(name)
		return nil
	}
	pos := s.position(name)
	if d.Seq <= pos.Seq {
		s.run.rt.stats.redelivered.Add(1)
		return nil
	}
	if f, ok := s.floor[name]; !ok || d.Seq < f {
		pos.Seq = d.Seq
	}
	s.from = d
	data := int64(1)
	var err error
	began := time.Now()
	if s.run.plan.ingress {
		err = s.ingress(d)
	} else {
		data, err = s.frame(ctx, d, ch, &pos)
	}
	if err != nil {
		return err
	}
	s.spent[name] += time.Since(began)
	s.touched[name] = pos
	if d.Stored.After(s.stored[name]) {
		s.stored[name] = d.Stored
	}
	s.run.obs.metrics.In(context.Background(), name, data, int64(len(d.Msg.Data())))
	s.run.obs.noteInput(name, time.Time{}, int64(d.Pending), true)
	return nil
}

// end handles the end of a bounded input: its watermark goes to the end
// of time, so that once every input has ended, every window and event-time
// timer fires.
func (s *step) end(input string) {
	if !s.run.in.ended[input] {
		s.run.in.ended[input] = true
		s.run.rt.stats.ended.Store(int64(len(s.run.in.ended)))
		s.run.rt.log.Info("input ended: the replay read its range", "input", input)
	}
	if tr := s.run.in.tracker; tr != nil {
		tr.Touch(input, s.now)
		tr.Advance(input, watermark.End)
	}
}

// frame handles a frame of an edge: dropped if its writer published it
// before (by frame sequence) or if it is a fenced zombie's, otherwise each
// of its records in order. It moves the writer's frame sequence in pos and
// returns how many data records it held.
//
// A writer numbers its frames of a partition 1, 2, 3, … and its frames
// are stored in that order, so a frame whose sequence skips past the
// next one expected means frames are missing, or stored behind it —
// where, read on, they would be dropped as seen. Either way reading on
// loses them: the run stops with a FrameGapError instead, unless a
// declared loss of the input's records (allowGaps) explains the skip.
func (s *step) frame(ctx context.Context, d edge.Delivery, ch string, pos *state.Position) (int64, error) {
	fh := d.Frame
	if fh == nil {
		return 0, fmt.Errorf("stream: %s seq %d: edge message without frame headers", d.Input.Name, d.Seq)
	}
	writer := fh.Writer()
	if err := s.run.in.fencing.awaitFence(ctx, fh.Producer, s.run.lay.version); err != nil {
		return 0, err
	}
	last := pos.Frames[writer]
	switch {
	case fh.Seq <= last:
		s.run.rt.stats.duplicateFrames.Add(1)
		return 0, nil
	case s.run.in.fencing.fenced(fh, d.Input.Partition):
		s.run.rt.stats.fencedFrames.Add(1)
		return 0, nil
	case last > 0 && fh.Seq > last+1 && !gapExcused(pos.Frames, writer):
		return 0, &FrameGapError{Input: d.Input.Name, Stream: d.Input.Stream, Writer: writer, Last: last, Seq: fh.Seq, At: d.Seq}
	}
	recs, err := edge.DecodeFrame(d.Msg.Data())
	if err != nil {
		return 0, fmt.Errorf("stream: %s seq %d: %w", d.Input.Name, d.Seq, err)
	}
	data := int64(0)
	for _, r := range recs {
		if r.Kind == record.Data {
			data++
		}
		if err := s.framed(ch, r); err != nil {
			return data, err
		}
	}
	frames := make(map[string]uint64, len(pos.Frames)+1)
	for k, v := range pos.Frames {
		frames[k] = v
	}
	frames[writer] = fh.Seq
	if lost, ok := frames[lossMark]; ok && d.Seq > lost {
		if past := pastLossMark + writer; frames[past] == 0 {
			frames[past] = 1 // its frames from here on are whole again
		}
	}
	pos.Frames = frames
	return data, nil
}

// FrameGapError stops a reader at a frame that skips past the next one its
// writer numbered for the partition: frames Last+1 … Seq-1 are missing
// from the input's stream, or stored behind this one (at stream sequence
// At). Read on, they would be lost.
type FrameGapError struct {
	Input, Stream, Writer string
	Last, Seq, At         uint64
}

func (e *FrameGapError) Error() string {
	missing := fmt.Sprintf("frame %d", e.Last+1)
	if e.Seq > e.Last+2 {
		missing = fmt.Sprintf("frames %d–%d", e.Last+1, e.Seq-1)
	}
	return fmt.Sprintf("stream: input %s: writer %s's frame %d (stream %s sequence %d) follows its frame %d: %s missing or stored out of order; refusing to read on, which would lose them (a record removed from the stream is found and declared with `weir recover`)",
		e.Input, e.Writer, e.Seq, e.Stream, e.At, e.Last, missing)
}

// After a declared loss of an input's records is accepted — frames may be
// among them — each writer's first frame past the loss may skip
// sequences. Position.Frames records it under two kinds of key no writer
// name begins with: lossMark, the last stream sequence lost, and
// pastLossMark+writer for each writer read past it since.
const (
	lossMark     = "\x00lost"
	pastLossMark = "\x00past "
)

// gapExcused reports whether a declared loss explains a gap in writer's
// frames: none of its frames has been read past the loss yet.
func gapExcused(frames map[string]uint64, writer string) bool {
	_, lossy := frames[lossMark]
	return lossy && frames[pastLossMark+writer] == 0
}

// allowGaps returns frames marked for a declared loss through stream
// sequence lost: every writer's next frame read past it may skip.
func allowGaps(frames map[string]uint64, lost uint64) map[string]uint64 {
	out := make(map[string]uint64, len(frames)+1)
	for k, v := range frames {
		if !strings.HasPrefix(k, pastLossMark) {
			out[k] = v
		}
	}
	out[lossMark] = max(out[lossMark], lost)
	return out
}

// framed handles one record of a frame from channel ch — the one dispatch
// on record kind. Data goes to the operator and makes its channel active;
// watermarks advance the channel and idle markers idle it; a barrier blocks
// it until the snapshot. ch is "" for a writer the assignment does not
// name: only its data counts.
func (s *step) framed(ch string, r record.Record) error {
	tr := s.run.in.tracker
	switch r.Kind {
	case record.Data:
		if ch != "" && tr != nil {
			tr.Observe(ch, r.Time, s.now)
		}
		return s.data(r)
	case record.Barrier:
		if ch != "" {
			s.run.bar.arrive(ch, r.Epoch)
		}
		return nil
	}
	if ch == "" {
		return nil
	}
	// Watermarks, idleness and end of input are consumed by the
	// event-time machinery, which forwards its own.
	s.run.rt.stats.control.Add(1)
	if tr == nil {
		return nil
	}
	switch r.Kind {
	case record.Watermark:
		tr.Touch(ch, s.now)
		tr.Advance(ch, r.Time)
	case record.Idle:
		tr.SetIdle(ch, true)
	}
	return nil
}

// ingress handles one ingress message: decoded into a record, or filed as
// bad input; its event time (and, if the source provides watermarks, the
// one it carries) move its input's watermark.
func (s *step) ingress(d edge.Delivery) error {
	m := ingress.Message{Stream: d.Input.Stream, Subject: d.Msg.Subject(), Header: d.Msg.Headers(), Data: d.Msg.Data(), Seq: d.Seq, Stored: d.Stored}
	r, err := s.run.plan.decoder.Decode(m, s.now)
	var fe *ingress.FieldError
	if errors.As(err, &fe) {
		s.deadLetterAs(record.Record{At: fe.At, ID: fe.ID, Tenant: fe.Tenant, Value: m.Data}, fe.Schema, fe.Field, fe.Reason, fe.SideOutput)
		if tr := s.run.in.tracker; tr != nil {
			tr.Touch(d.Input.Name, s.now)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if tr := s.run.in.tracker; tr != nil {
		err := s.run.plan.progress.Observe(tr, d.Input.Name, r.Time, s.now, m.Header.Get(watermark.ProvidedHeader))
		if err != nil {
			s.deadLetter(r, "header "+watermark.ProvidedHeader, err.Error(), false)
			return nil
		}
	}
	if sh := s.run.in.shed; sh != nil {
		if lag, ok := sh.drop(d.Input.Name, d.Pending, m.Data); ok {
			// Its time still moved the watermark: the record existed.
			s.letters = append(s.letters, deadletter.Letter{At: r.At, ID: r.ID, Tenant: r.Tenant, Operator: s.run.rt.cfg.Operator, Shed: true,
				Field: "overload", Reason: fmt.Sprintf("shed: %d records behind, more than overload.max_lag %d, and optional (%s)", lag, sh.maxLag, sh.optional)})
			return nil
		}
	}
	return s.data(r)
}

// data hands one data record to the operator, with the state scoped to its
// key, and files it if the operator calls it poison or a state bound says
// so.
func (s *step) data(r record.Record) error {
	if s.run.erasures.drops(r, s.from) {
		s.erased++
		return nil
	}
	s.in++
	if len(s.run.rt.before) > 0 {
		return s.chain(0, r)
	}
	return s.handle(r, false)
}

// chain hands r to the i-th operator chained before the operator
// (operators[].before), whose every emitted record goes on to the next,
// and from the last to the operator (handle). A record it calls poison
// is filed; an error of a later link stops the step even if the chained
// operator does not return it from Emit.
func (s *step) chain(i int, r record.Record) error {
	if i == len(s.run.rt.before) {
		// The key the chain gave the record may be erased, as the
		// operator reading it from an edge would find.
		if s.run.erasures.drops(r, s.from) {
			s.erased++
			return nil
		}
		return s.handle(r, true)
	}
	// A chained operator is stateless: its scope names no key group, so
	// any state it reached for would fail.
	c := s.env(i + 1)
	*c = env{s: s, rec: r, kg: keygroup.Of(r.Key, s.run.plan.keyGroups), key: r.Key, scope: s.batch.Scope(-1, r.Key, s.now), trace: r.Trace, link: i + 1}
	err := s.run.rt.before[i].Process(c, r)
	if s.chainErr != nil {
		err, s.chainErr = s.chainErr, nil
		return err
	}
	var pe *operator.PoisonError
	if errors.As(err, &pe) {
		s.deadLetter(r, pe.Field, fmt.Sprintf("%s (operator %s, chained before %s)", pe.Err, s.run.rt.beforeNames[i], s.run.rt.cfg.Operator), false)
		return nil
	}
	if err != nil {
		return fmt.Errorf("stream: operator %s, chained before %s: %w", s.run.rt.beforeNames[i], s.run.rt.cfg.Operator, err)
	}
	return nil
}

// chained hands r, emitted by the link-th operator chained before the
// operator, to what follows it. An error is kept for chain to return as
// well, so that a chained operator dropping Emit's error drops nothing.
func (s *step) chained(link int, r record.Record) error {
	err := s.chain(link, r)
	if err != nil && s.chainErr == nil {
		s.chainErr = err
	}
	return err
}

// handle is data's work for one record the operator handles: its state
// scoped to its key, the operator called, and the record filed if the
// operator calls it poison or a state bound says so. A record that
// operators chained before it handed on (chained) lies in a key group the
// instance owns: a chained operator runs as one instance (loadLayout).
func (s *step) handle(r record.Record, chained bool) error {
	key := r.Key
	if s.run.plan.keyByID {
		key = []byte(r.ID)
		if s.run.plan.tenantScoped && r.Tenant != "" {
			// Two tenants' events may share an ID.
			key = keygroup.Scoped(r.Tenant, key)
		}
	} else if s.run.plan.split > 1 {
		key = keygroup.Split(key, r.ID, s.run.plan.split)
	}
	kg := keygroup.Of(key, s.run.plan.keyGroups)
	s.run.rt.groups.add(kg)
	if chained && len(s.run.plan.families) > 0 && !s.run.lay.owns(kg) {
		// The start refuses a chained operator that does not own every
		// key group; a record here would be kept by no instance.
		return fmt.Errorf("stream: the operators chained before %s (operators[].before: %s) keyed the record at %s into key group %d, which instance %s does not own ([%d, %d))",
			s.run.rt.cfg.Operator, strings.Join(s.run.rt.beforeNames, ", "), r.At, kg, s.run.rt.cfg.Instance, s.run.lay.groupLo, s.run.lay.groupHi)
	}
	if len(s.run.plan.families) > 0 && !s.run.lay.owns(kg) {
		// Keyed state lives with the instance owning the key group; a
		// record routed elsewhere would split it.
		s.deadLetter(r, "key", fmt.Sprintf("key %q is in key group %d, which instance %s does not own (it owns key groups [%d, %d) through its input partitions): the input must be partitioned by key group of the state key",
			key, kg, s.run.rt.cfg.Instance, s.run.lay.groupLo, s.run.lay.groupHi), false)
		return nil
	}
	c := s.env(0)
	*c = env{s: s, rec: r, kg: kg, key: key, scope: s.batch.Scope(kg, key, s.now)}
	span, tr := s.run.obs.span(r)
	c.trace = tr
	late := s.run.in.tracker != nil && !s.wm.IsZero() && !r.Time.After(s.wm)
	letters := len(s.letters)
	err := s.run.rt.op.Process(c, r)
	if span != nil {
		endSpan(span, s.run.obs.redacted(r, err))
	}
	if err == nil {
		// On time, late but accepted, or late and dropped to the side
		// output. Lateness applies where state lives by window (the
		// contract's bound: window); elsewhere a record behind the
		// watermark is simply handled.
		ctx := context.Background()
		switch {
		case s.run.in.tracker == nil:
		case !late:
			s.run.obs.metrics.OnTime(ctx, 1)
		case !s.run.plan.windowed:
		case len(s.letters) > letters:
			s.run.obs.metrics.LateDropped(ctx, 1)
		default:
			s.run.obs.metrics.LateAccepted(ctx, 1)
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
		return fmt.Errorf("stream: %s: state bound crossed and the contract says fail: %w", r.At, err)
	}
	return err
}

// emit adds a record the operator emitted to the step's output, with the
// erasure names that reach it (an outbox's intent: Context.erasable); a
// record leaving the pipeline on a json result edge ends its trace there.
func (s *step) emit(r record.Record, erasable []string) error {
	w := s.run.out.writer
	if w == nil {
		return operator.ErrNoOutput
	}
	if s.run.plan.outputJSON {
		r.Trace = s.run.obs.sinkSpan(r)
	}
	w.WriteErasable(r, erasable)
	s.out++
	return nil
}

// deadLetter files r — its source coordinate, ID and payload — with the
// field and reason it failed on, on the side output when side is set.
//
// An operator without a dead-letter stream (operators[].dead_letter: false)
// files nothing: the step fails before it commits, naming the record, so
// the record is neither dropped nor passed, and a restart meets it again.
func (s *step) deadLetter(r record.Record, field, reason string, side bool) {
	s.deadLetterAs(r, "", field, reason, side)
}

// deadLetterAs is deadLetter for an ingress message read as schema.
func (s *step) deadLetterAs(r record.Record, schema, field, reason string, side bool) {
	// What the contract declares sensitive leaves neither in the copy of
	// the payload nor in the reason, which may quote a value — nor in the
	// error that stops an operator without a dead-letter stream.
	payload, secrets := s.run.plan.redact.Payload(r.Value, r.Key)
	reason = s.run.plan.redact.Text(reason, secrets)
	if !s.run.plan.deadLetter {
		if s.noDeadLetter == nil {
			s.noDeadLetter = fmt.Errorf("stream: operator %s has no dead-letter stream (operators[].dead_letter: false in %s), and the record at %s (id %q) would be filed there: field %s: %s; stopping rather than dropping it",
				s.run.rt.cfg.Operator, s.run.plan.contract.File, r.At, r.ID, field, reason)
		}
		return
	}
	s.run.rt.log.Warn("dead letter", "at", r.At.String(), "field", field, "reason", reason, "side_output", side)
	// Its ID and tenant name it (the tenant keeps it within the tenant's
	// boundary), hashed where they are what the contract keeps secret.
	red := s.run.plan.redact
	s.letters = append(s.letters, deadletter.Letter{
		At: r.At, ID: red.Name(r.ID, secrets), Tenant: red.Name(r.Tenant, secrets), Operator: s.run.rt.cfg.Operator, Contract: s.run.plan.fingerprint, Schema: schema, Field: field, Reason: reason, Payload: payload, SideOutput: side,
	})
}

// advance moves the operator's watermark to the minimum over its active
// inputs: event-time timers up to it fire, in this step, before the
// watermark is forwarded behind the step's output. When every input is
// idle the operator forwards an idle marker once.
func (s *step) advance() error {
	tr := s.run.in.tracker
	if tr == nil {
		return nil
	}
	w := s.run.out.writer
	if wm, ok := tr.Watermark(); ok && wm.After(tr.Emitted()) {
		s.wm = wm
		if err := s.fireTimers(state.EventTime, wm); err != nil {
			return err
		}
		if s.firing {
			// Timers up to wm are left for the next steps: the watermark
			// goes downstream once they have fired, behind their output.
			b, err := tr.MarshalBinary()
			if err != nil {
				return err
			}
			return s.batch.PutMeta(metaWatermarks, b)
		}
		tr.SetEmitted(wm)
		s.run.rt.stats.watermark.Store(wm.UnixMilli())
		if w != nil {
			w.Broadcast(record.Record{Kind: record.Watermark, Time: wm})
		}
		s.run.in.idleSent = false
	} else if (s.pastTimers || s.run.firing) && !tr.Emitted().IsZero() {
		// Timers behind the forwarded watermark: due now, their output
		// late like the record that set them.
		if err := s.fireTimers(state.EventTime, tr.Emitted()); err != nil {
			return err
		}
	}
	if tr.AllIdle() {
		if !s.run.in.idleSent && w != nil {
			w.Broadcast(record.Record{Kind: record.Idle})
		}
		s.run.in.idleSent = true
	}
	for _, n := range s.run.lay.chans {
		s.run.obs.noteInput(n, tr.Input(n).Watermark, 0, false)
	}
	b, err := tr.MarshalBinary()
	if err != nil {
		return err
	}
	return s.batch.PutMeta(metaWatermarks, b)
}

// fireTimers fires the due timers of a domain, including those set while
// firing, in time order: at most maxStepTimers in a step, so that a
// watermark passing a million windows does not make one step's output a
// million results held in memory. A step that leaves due timers sets
// firing, and the run fires them in the steps that follow, before it
// reads more input (run.fireLeft). The due timers are fetched as a list;
// one a callback sets is merged into what is left of it (state.Merge).
func (s *step) fireTimers(d state.Domain, upTo time.Time) error {
	th, ok := s.run.rt.op.(operator.TimerHandler)
	if !ok {
		return nil
	}
	s.batch.Note(d, true)
	defer s.batch.Note(d, false)
	budget := s.run.plan.maxStepTimers()
	for {
		room := budget - s.timers
		timers, err := s.batch.DueTimers(d, upTo, max(1, room))
		if err != nil || len(timers) == 0 {
			return err
		}
		if room <= 0 {
			s.firing = true
			return nil
		}
		var last *state.Timer
		if len(timers) == room {
			l := timers[len(timers)-1]
			last = &l
		}
		for len(timers) > 0 {
			if s.timers == budget {
				// Timers merged in made the list longer than the room.
				s.firing = true
				return nil
			}
			t := timers[0]
			timers = timers[1:]
			s.timers++
			// An earlier timer's callback may have cancelled this one.
			if ok, err := s.batch.TakeTimer(t); err != nil || !ok {
				if err != nil {
					return err
				}
				continue
			}
			c := s.env(0)
			*c = env{s: s, kg: t.KeyGroup, key: t.Key, scope: s.batch.Scope(t.KeyGroup, t.Key, s.now)}
			if err := th.OnTimer(c, t); err != nil {
				return fmt.Errorf("stream: timer %s of key %q: %w", t.Name, t.Key, err)
			}
			s.run.rt.stats.timersFired.Add(1)
			s.run.obs.metrics.TimersFired(context.Background(), 1)
			timers = s.batch.Merge(d, timers, upTo, last)
		}
	}
}

// finish files the step's dead letters, commits its batch, publishes its
// frames and counts it.
func (s *step) finish(ctx context.Context) error {
	rn := s.run
	if s.noDeadLetter != nil {
		return s.noDeadLetter
	}
	// The last step's frames were being stored while this one ran: its
	// commit deletes them from the stage, so they must be stored first.
	// If the run is stopping they may not be: they stay staged, and so do
	// this step's (flight.go): its error is rn.halted, which keeps launch
	// from starting another flight, so the step goes on to commit.
	_ = rn.out.land(ctx)
	frames, err := s.stage()
	if err != nil {
		return err
	}
	// Dead letters are filed before the commit: their IDs derive from the
	// source coordinate, so filing again after a crash is harmless, and a
	// position never passes a record that is neither handled nor filed.
	if len(s.letters) > 0 {
		if err := deadletter.Publish(ctx, rn.conn.js, rn.plan.pipeline, s.letters); err != nil {
			return operator.Retry(err, time.Second)
		}
	}
	rn.rt.cfg.Faults.beforeCommit(rn.rt.stats.steps.Load())
	committing := time.Now()
	if err := s.batch.Commit(); err != nil {
		return fmt.Errorf("stream: commit step: %w", err)
	}
	rn.rt.stats.stateIO.Add(int64(time.Since(committing)))
	rn.rt.stats.addInputBusy(s.spent)
	s.committed = true
	rn.firing = s.firing
	rn.rt.cfg.Faults.afterCommit(rn.rt.stats.steps.Load())
	for name, p := range s.touched {
		rn.in.positions[name] = p
	}
	rn.obs.noteProcessed(s.stored)
	rn.out.published = nil
	rn.out.noteOutput(frames)
	if len(frames) > 0 {
		// Committed and staged, the frames are stored while the next step
		// runs (flight.go).
		rn.out.launch(ctx, frames, int64(s.out))
	} else {
		rn.rt.stats.out.Add(int64(s.out))
	}
	rn.align()
	var dead, side, shed int64
	for _, l := range s.letters {
		switch {
		case l.Shed:
			shed++
		case l.SideOutput:
			side++
		default:
			dead++
		}
	}
	rn.obs.metrics.DeadLettered(ctx, dead)
	rn.obs.metrics.SideOutput(ctx, side)
	rn.obs.metrics.Shed(ctx, shed)
	took := time.Since(s.started)
	rn.obs.metrics.Step(ctx, took)
	rn.obs.metrics.Busy(ctx, took)
	rn.rt.stats.busy.Add(int64(took))
	rn.rt.stats.steps.Add(1)
	rn.rt.stats.in.Add(int64(s.in))
	rn.rt.stats.deadLettered.Add(dead)
	rn.rt.stats.sideOutput.Add(side)
	rn.rt.stats.shed.Add(shed)
	rn.rt.stats.erased.Add(s.erased)
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
	for _, id := range s.run.out.published {
		if err := b.DeleteOutput(id); err != nil {
			return nil, err
		}
	}
	if s.run.out.writer == nil {
		return nil, nil
	}
	frames := s.run.out.writer.Flush()
	if t := s.run.out.txn; t != nil && len(frames) > 0 {
		// Results wait in the state for their checkpoint (txn.go).
		if err := b.PutMeta(metaFrameSeqs, encodeSeqs(s.run.out.writer.Seqs())); err != nil {
			return nil, err
		}
		return nil, t.hold(b, frames)
	}
	for _, f := range frames {
		data, _ := f.MarshalBinary()
		if err := b.StageOutput(stagedID(f), data); err != nil {
			return nil, err
		}
	}
	if len(frames) > 0 {
		if err := b.PutMeta(metaFrameSeqs, encodeSeqs(s.run.out.writer.Seqs())); err != nil {
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
	return s.run.in.positions[name]
}
