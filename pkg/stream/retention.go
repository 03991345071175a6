package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/state"
)

// Retention must never make an input skip records silently. Three things
// see to it — and, for a mirror of the ingress, a fourth (mirrorGaps):
//
//   - every input has a position from its first start, whose clear mark
//     is where its stream began (markStarted);
//   - the reader refuses to open an input whose stream no longer holds
//     what lies past its position (edge.TrimmedError), unless a data loss
//     covering the gap was declared in the audit stream (weir recover);
//   - while reading, the tick raises each caught-up input's clear mark to
//     the stream's last sequence, and stops the instance when retention
//     has removed what an input's consumer had not yet been sent.

// openReader opens the input consumers at the committed positions. An
// input whose position retention has passed is refused, and the refusal
// reported where `weir recover` finds it, unless a declared data loss
// covers the gap: then its clear mark is raised past the gap and the
// reader opened again.
func (rn *run) openReader(ctx context.Context) (*edge.Reader, error) {
	if err := rn.lostBefore(ctx); err != nil {
		return nil, err
	}
	infos := map[string]*jetstream.StreamInfo{}
	for _, in := range rn.plan.inputs {
		if _, ok := infos[in.Stream]; ok {
			continue
		}
		st, err := rn.conn.js.Stream(ctx, in.Stream)
		if err != nil {
			return nil, fmt.Errorf("stream: input stream %s: %w", in.Stream, err)
		}
		infos[in.Stream] = st.CachedInfo()
	}
	gapped, err := rn.mirrorGaps(ctx, infos)
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	if gapped != nil {
		if err := rn.acceptDeclaredLoss(ctx, gapped); err != nil {
			return nil, err
		}
	}
	r, err := rn.openConsumers(ctx)
	var te *edge.TrimmedError
	if errors.As(err, &te) {
		if err := rn.acceptDeclaredLoss(ctx, te); err != nil {
			return nil, err
		}
		r, err = rn.openConsumers(ctx)
	}
	if err != nil {
		return nil, err
	}
	if err := rn.markStarted(r.Started()); err != nil {
		r.Close()
		return nil, err
	}
	rn.forgetTrimmed(ctx)
	return r, nil
}

// forgetTrimmed removes the instance's refusal report, if it left one: it
// reads again.
func (rn *run) forgetTrimmed(ctx context.Context) {
	reports, err := rn.bar.store.TrimmedReports(ctx)
	if err != nil {
		return
	}
	if _, ok := reports[rn.rt.cfg.Operator+"/"+rn.rt.cfg.Instance]; ok {
		_ = rn.bar.store.DeleteTrimmed(ctx, rn.rt.cfg.Operator, rn.rt.cfg.Instance)
	}
}

func (rn *run) openConsumers(ctx context.Context) (*edge.Reader, error) {
	return edge.OpenReader(ctx, rn.conn.js, edge.ReaderConfig{
		Consumer:      rn.consumerPrefix(),
		Inputs:        rn.inputs(),
		FetchBatch:    rn.plan.fetchBatch,
		MaxAckPending: rn.plan.maxAckPending,
		MaxBytes:      inputHeld,
	})
}

// acceptDeclaredLoss raises the clear marks of the inputs te names past
// their gaps when a declared data loss covers each of them; otherwise it
// reports the refusal in the checkpoint store and returns te for the
// inputs no declaration covers.
func (rn *run) acceptDeclaredLoss(ctx context.Context, te *edge.TrimmedError) error {
	var open []edge.Trimmed
	accepted := map[string]state.Position{}
	for _, t := range te.Inputs {
		d, ok, err := audit.Declared(ctx, rn.conn.js, rn.plan.pipeline, t.Stream)
		if err != nil {
			return fmt.Errorf("stream: %w (and reading the declared losses failed: %v)", te, err)
		}
		if !ok || !d.Covers(t.Known()+1, t.First-1) {
			open = append(open, t)
			continue
		}
		// The clear mark moves to the gap's end, never to the declared
		// sequence: records after the gap are still this input's to read.
		// A loss counted ahead of the reader moves nothing: the records
		// still held there are the input's to read.
		p := rn.in.positions[t.Input]
		if !t.Ahead {
			p.Clear = max(p.Clear, t.First-1)
		}
		accepted[t.Input] = p
		rec := d.Record
		rn.rt.log.Warn("starting past records retention removed: the data loss was declared",
			"input", t.Input, "stream", t.Stream, "committed", t.Committed, "first", t.First, "removed", t.Removed,
			"declared_by", rec.Actor, "declared_at", rec.Time, "reason", rec.Reason, "audit_seq", rec.Seq)
	}
	if len(open) > 0 {
		refused := &edge.TrimmedError{Inputs: open}
		rn.rt.log.Error("refusing to start: retention removed records this instance had not read", "err", refused,
			"fix", "run `weir recover -pipeline "+rn.plan.pipeline+"` to choose: restore an older snapshot whose positions are still held, or declare the loss")
		rn.reportTrimmed(refused)
		return refused
	}
	return rn.commitPositions(accepted)
}

// markStarted gives every input without a position one: nothing before
// where its consumer started was the input's to read. From then on the
// reader checks it.
func (rn *run) markStarted(started map[string]uint64) error {
	fresh := map[string]state.Position{}
	for _, in := range rn.plan.inputs {
		if _, ok := rn.in.positions[in.Name]; !ok {
			fresh[in.Name] = state.Position{Clear: started[in.Name]}
		}
	}
	return rn.commitPositions(fresh)
}

// commitPositions commits positions outside a step.
func (rn *run) commitPositions(ps map[string]state.Position) error {
	if len(ps) == 0 {
		return nil
	}
	b := rn.store.NewBatch()
	for name, p := range ps {
		if err := b.SetPosition(name, p); err != nil {
			b.Close()
			return err
		}
	}
	if err := b.Commit(); err != nil {
		return fmt.Errorf("stream: commit positions: %w", err)
	}
	for name, p := range ps {
		rn.in.positions[name] = p
	}
	return nil
}

// watchRetention is the tick's part: with the streams' state read before
// and after each input's newest message, it raises the clear mark of
// every input that has read all its subject holds, and returns a
// TrimmedError when retention has removed records an input's consumer
// was never sent. heads holds each input's newest message, absent when
// its subject holds none.
func (rn *run) watchRetention(ctx context.Context, before, after map[string]*jetstream.StreamInfo, heads map[string]uint64) error {
	te, err := rn.mirrorGaps(ctx, after)
	if err != nil {
		return nil // the broker is away: nothing can be said of this tick
	}
	if te != nil {
		rn.reportTrimmed(te)
		return te
	}
	raised := map[string]state.Position{}
	var lost []edge.Trimmed
	for _, in := range rn.plan.inputs {
		b, a := before[in.Stream], after[in.Stream]
		if b == nil || a == nil {
			continue
		}
		p, ok := rn.in.positions[in.Name]
		if !ok {
			continue
		}
		known := max(p.Seq, p.Clear)
		if a.State.FirstSeq > known+1 {
			// Retention passed the committed position: fine if the
			// consumer was sent what it removed.
			sent, err := rn.sentOf(ctx, in)
			if err != nil {
				continue
			}
			ein := in
			ein.After, ein.Clear = p.Seq, p.Clear
			if t, ok := edge.TrimmedWhileReading(ein, a, sent); ok {
				lost = append(lost, t)
			}
			continue
		}
		// Nothing past the position is gone. With the stream's last
		// sequence read first, a newest message at or before the position
		// — or none, when the stream still began there afterwards — means
		// the subject holds nothing to read up to that last sequence.
		if head, ok := heads[in.Name]; ok && head > p.Seq {
			continue
		}
		if last := b.State.LastSeq; last > p.Clear {
			p.Clear = last
			raised[in.Name] = p
		}
	}
	if len(lost) > 0 {
		err := &edge.TrimmedError{Inputs: lost}
		rn.reportTrimmed(err)
		return err
	}
	return rn.commitPositions(raised)
}

// mirrorGaps returns a TrimmedError naming each input that reads a
// mirror — the ingress, read in a pipeline's own account (ingress.Mirror)
// — which has skipped, inside itself, sequences past the input's
// position: a JetStream mirror marks deleted what its origin no longer
// held when it came to copy it, and its first sequence does not move, so
// the checks of where a stream begins do not see the loss. Skipped
// sequences are of any subject: each counts against every input of the
// stream past whose position it lies. infos are the input streams'
// states; only a mirror with deleted sequences is asked for them.
func (rn *run) mirrorGaps(ctx context.Context, infos map[string]*jetstream.StreamInfo) (*edge.TrimmedError, error) {
	deleted := map[string][]uint64{}
	for name, info := range infos {
		if info == nil || info.Mirror == nil || info.State.NumDeleted == 0 {
			continue
		}
		st, err := rn.conn.js.Stream(ctx, name)
		if err != nil {
			return nil, err
		}
		detail, err := st.Info(ctx, jetstream.WithDeletedDetails(true))
		if err != nil {
			return nil, err
		}
		deleted[name] = detail.State.Deleted
	}
	if len(deleted) == 0 {
		return nil, nil
	}
	var lost []edge.Trimmed
	for _, in := range rn.plan.inputs {
		p, ok := rn.in.positions[in.Name]
		if !ok {
			continue
		}
		known := max(p.Seq, p.Clear)
		var n, last uint64
		for _, d := range deleted[in.Stream] {
			if d > known {
				n, last = n+1, max(last, d)
			}
		}
		if n > 0 {
			lost = append(lost, edge.Trimmed{Input: in.Name, Partition: in.Partition, Stream: in.Stream, Subject: in.Subject,
				Committed: p.Seq, Clear: p.Clear, First: last + 1, Removed: n, Skipped: true})
		}
	}
	if len(lost) == 0 {
		return nil, nil
	}
	return &edge.TrimmedError{Inputs: lost}, nil
}

// sentOf is the last stream sequence the input's consumer was sent.
func (rn *run) sentOf(ctx context.Context, in edge.Input) (uint64, error) {
	cons, err := rn.conn.js.Consumer(ctx, in.Stream, edge.ConsumerName(rn.consumerPrefix(), in.Name))
	if err != nil {
		return 0, err
	}
	return cons.CachedInfo().Delivered.Stream, nil
}

// gaps are the jumps of a step's deliveries past what their inputs were
// known to have nothing more of: per input, the least sequence after which
// the next delivery skipped sequences, and the highest delivered.
type gaps struct {
	from  map[string]uint64 // input → least sequence a delivery jumped from
	seen  map[string]uint64 // input → highest sequence delivered
	first chan map[string]uint64
	// deleted are, per mirror among the streams, the sequences it skipped;
	// written before first is sent.
	deleted map[string][]uint64
}

// jumps finds, in a step's deliveries (held ones too: they were received),
// each input's delivery that skipped sequences past the highest seen, the
// committed position and the clear mark. A stream's sequences interleave
// its subjects, so a jump is the rule; it hides a loss only when the stream
// has since removed what lay after the sequence jumped from. checkJumps
// decides with the streams' first sequences, read in the background from
// now: after every delivery of the step was received.
func (rn *run) jumps(ctx context.Context, ds []edge.Delivery) *gaps {
	g := &gaps{from: map[string]uint64{}, seen: map[string]uint64{}}
	for _, d := range ds {
		name := d.Input.Name
		prev, ok := g.seen[name]
		if !ok {
			p := rn.in.positions[name]
			prev = max(rn.in.seen[name], p.Seq, p.Clear)
		}
		if d.Seq <= prev {
			g.seen[name] = prev
			continue // a redelivery
		}
		if d.Seq > prev+1 {
			if f, ok := g.from[name]; !ok || prev < f {
				g.from[name] = prev
			}
		}
		g.seen[name] = d.Seq
	}
	if len(g.from) == 0 {
		return g
	}
	streams := map[string]bool{}
	for _, in := range rn.plan.inputs {
		if _, ok := g.from[in.Name]; ok {
			streams[in.Stream] = true
		}
	}
	g.first = make(chan map[string]uint64, 1)
	go func() {
		firsts := map[string]uint64{}
		for name := range streams {
			st, err := rn.conn.js.Stream(ctx, name)
			if err != nil {
				break
			}
			info := st.CachedInfo()
			if info.Mirror != nil && info.State.NumDeleted > 0 {
				// A mirror skips inside itself what its origin no
				// longer held (mirrorGaps).
				detail, err := st.Info(ctx, jetstream.WithDeletedDetails(true))
				if err != nil {
					break
				}
				if g.deleted == nil {
					g.deleted = map[string][]uint64{}
				}
				g.deleted[name] = detail.State.Deleted
			}
			firsts[name] = info.State.FirstSeq
		}
		g.first <- firsts
	}()
	return g
}

// checkJumps returns a TrimmedError when a stream has removed sequences
// after one its input's deliveries jumped from: records of the input may
// be among them, and the step must not move its position past them. A
// stream whose first sequence could not be read fails the step, to be
// retried.
func (rn *run) checkJumps(g *gaps) error {
	if g.first == nil {
		return nil
	}
	firsts := <-g.first
	var lost []edge.Trimmed
	for _, in := range rn.plan.inputs {
		from, ok := g.from[in.Name]
		if !ok {
			continue
		}
		first, ok := firsts[in.Stream]
		if !ok {
			return operator.Retry(fmt.Errorf("stream: input %s: could not read where stream %s begins, to tell a jump from a loss", in.Name, in.Stream), time.Second)
		}
		if first > from+1 {
			p := rn.in.positions[in.Name]
			lost = append(lost, edge.Trimmed{Input: in.Name, Partition: in.Partition, Stream: in.Stream, Subject: in.Subject,
				Committed: p.Seq, Clear: max(p.Clear, from), First: first, Removed: first - 1 - from})
			continue
		}
		// A mirror that skipped sequences the deliveries jumped over.
		var n, last uint64
		for _, d := range g.deleted[in.Stream] {
			if d > from && d <= g.seen[in.Name] {
				n, last = n+1, max(last, d)
			}
		}
		if n > 0 {
			p := rn.in.positions[in.Name]
			lost = append(lost, edge.Trimmed{Input: in.Name, Partition: in.Partition, Stream: in.Stream, Subject: in.Subject,
				Committed: p.Seq, Clear: max(p.Clear, from), First: last + 1, Removed: n, Skipped: true})
		}
	}
	if len(lost) == 0 {
		return nil
	}
	err := &edge.TrimmedError{Inputs: lost}
	rn.reportTrimmed(err)
	return err
}

// reportTrimmed records an instance stopping for records retention
// removed, where weir recover finds it.
func (rn *run) reportTrimmed(te *edge.TrimmedError) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rn.bar.store.PutTrimmed(ctx, checkpoint.TrimmedReport{
		Operator: rn.rt.cfg.Operator, Instance: rn.rt.cfg.Instance, At: time.Now().UTC(), Inputs: te.Inputs,
	}); err != nil {
		rn.rt.log.Warn("could not report the refusal for weir recover", "err", err)
	}
}

// metaLost holds the losses a reader saw while reading (lostWhileReading),
// as JSON: a restart refuses until a declaration covers them.
const metaLost = "lost"

// lostWhileReading makes final a loss the reader counted while reading —
// a removal that need not move where the stream begins (a purge of one
// subject, a deleted message), so that a start would not see it: it is
// kept in the state, reported for weir recover and returned.
func (rn *run) lostWhileReading(te *edge.TrimmedError) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var unread []error
	for i := range te.Inputs {
		t := &te.Inputs[i]
		t.Committed = rn.in.positions[t.Input].Seq
		var last uint64
		st, err := rn.conn.js.Stream(ctx, t.Stream)
		if err == nil {
			last = st.CachedInfo().State.LastSeq
		} else {
			unread = append(unread, fmt.Errorf("stream: read where %s ends, to bound the loss: %w", t.Stream, err))
		}
		t.First = lossEnd(*t, last)
	}
	kept, err := rn.lostMarks()
	if err != nil {
		return errors.Join(te, err)
	}
	b, err := json.Marshal(append(kept, te.Inputs...))
	if err != nil {
		return err
	}
	batch := rn.store.NewBatch()
	if err := batch.PutMeta(metaLost, b); err != nil {
		batch.Close()
		return err
	}
	if err := batch.Commit(); err != nil {
		return errors.Join(te, fmt.Errorf("stream: record the loss: %w", err))
	}
	rn.reportTrimmed(te)
	return errors.Join(append([]error{te}, unread...)...)
}

// lossEnd is the first sequence past a loss counted while reading: what was
// removed had been stored, so it lies at or before the stream's end
// (last, 0 when it could not be read); and the Removed sequences of it
// lie after Known, so the range a declaration must cover is never shorter
// than them, whether or not the end could be read.
func lossEnd(t edge.Trimmed, last uint64) uint64 {
	return max(t.Known()+t.Removed+1, last+1)
}

// lostMarks reads the losses kept by lostWhileReading. A marker that
// cannot be read or decoded is an error, never "no loss": it is what
// keeps an instance from starting past a loss nobody declared.
func (rn *run) lostMarks() ([]edge.Trimmed, error) {
	v, ok, err := rn.store.Meta(metaLost)
	if err != nil {
		return nil, fmt.Errorf("stream: read the losses seen while reading: %w", err)
	}
	if !ok {
		return nil, nil
	}
	var lost []edge.Trimmed
	if err := json.Unmarshal(v, &lost); err != nil {
		return nil, fmt.Errorf("stream: the losses seen while reading are recorded in a form this build cannot read (%w); refusing to start past them: run weir recover", err)
	}
	return lost, nil
}

// lostBefore refuses to start while a kept loss is not covered by a
// declaration, and forgets the ones that are.
func (rn *run) lostBefore(ctx context.Context) error {
	lost, err := rn.lostMarks()
	if err != nil {
		return err
	}
	if len(lost) == 0 {
		return nil
	}
	if err := rn.acceptDeclaredLoss(ctx, &edge.TrimmedError{Inputs: lost}); err != nil {
		return err
	}
	b := rn.store.NewBatch()
	if err := b.DeleteMeta(metaLost); err != nil {
		b.Close()
		return err
	}
	return b.Commit()
}
