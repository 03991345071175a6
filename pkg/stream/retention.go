package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
//
// retention is that watch: input reading's part that opens the consumers
// at the committed positions and holds them to what the streams still
// have, with what it needs of the run named in it.
type retention struct {
	in    *inputs
	conn  *conn
	plan  *plan
	cfg   *Config
	log   *slog.Logger
	store *state.Store
	// ckpts is where a refusal is reported for weir recover.
	ckpts *checkpoint.Store
	// obs keeps the heads' times, for the source lag; now is the
	// processing-time clock.
	obs *observer
	now func() time.Time
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

// metaLost holds the losses a reader saw while reading (lostWhileReading),
// as JSON: a restart refuses until a declaration covers them.
const metaLost = "lost"

// lossEnd is the first sequence past a loss counted while reading: what was
// removed had been stored, so it lies at or before the stream's end
// (last, 0 when it could not be read); and the Removed sequences of it
// lie after Known, so the range a declaration must cover is never shorter
// than them, whether or not the end could be read.
func lossEnd(t edge.Trimmed, last uint64) uint64 {
	return max(t.Known()+t.Removed+1, last+1)
}

// inputStreams reads the input streams, each once, with their state.
func (ret *retention) inputStreams(ctx context.Context) (map[string]jetstream.Stream, map[string]*jetstream.StreamInfo, error) {
	streams, infos := map[string]jetstream.Stream{}, map[string]*jetstream.StreamInfo{}
	for _, in := range ret.plan.inputs {
		if _, ok := infos[in.Stream]; ok {
			continue
		}
		st, err := ret.conn.js.Stream(ctx, in.Stream)
		if err != nil {
			return nil, nil, fmt.Errorf("stream: input stream %s: %w", in.Stream, err)
		}
		streams[in.Stream], infos[in.Stream] = st, st.CachedInfo()
	}
	return streams, infos, nil
}

// openReader opens the input consumers at the committed positions. An
// input whose position retention has passed is refused, and the refusal
// reported where `weir recover` finds it, unless a declared data loss
// covers the gap: then its clear mark is raised past the gap and the
// reader opened again.
func (ret *retention) openReader(ctx context.Context) (*edge.Reader, error) {
	if err := ret.lostBefore(ctx); err != nil {
		return nil, err
	}
	_, infos, err := ret.inputStreams(ctx)
	if err != nil {
		return nil, err
	}
	gapped, err := ret.mirrorGaps(ctx, infos)
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	if gapped != nil {
		if err := ret.acceptDeclaredLoss(ctx, gapped); err != nil {
			return nil, err
		}
	}
	r, err := ret.openConsumers(ctx)
	var te *edge.TrimmedError
	if errors.As(err, &te) {
		if err := ret.acceptDeclaredLoss(ctx, te); err != nil {
			return nil, err
		}
		r, err = ret.openConsumers(ctx)
	}
	if err != nil {
		return nil, err
	}
	if err := ret.markStarted(r.Started()); err != nil {
		r.Close()
		return nil, err
	}
	ret.forgetTrimmed(ctx)
	return r, nil
}

// forgetTrimmed removes the instance's refusal report, if it left one: it
// reads again.
func (ret *retention) forgetTrimmed(ctx context.Context) {
	reports, err := ret.ckpts.TrimmedReports(ctx)
	if err != nil {
		return
	}
	if _, ok := reports[ret.cfg.Operator+"/"+ret.cfg.Instance]; ok {
		_ = ret.ckpts.DeleteTrimmed(ctx, ret.cfg.Operator, ret.cfg.Instance)
	}
}

func (ret *retention) openConsumers(ctx context.Context) (*edge.Reader, error) {
	return edge.OpenReader(ctx, ret.conn.js, edge.ReaderConfig{
		Consumer:      ret.consumerPrefix(),
		Inputs:        ret.inputs(),
		FetchBatch:    ret.plan.fetchBatch,
		MaxAckPending: ret.plan.maxAckPending,
		MaxBytes:      inputHeld,
		Log:           ret.log,
	})
}

// acceptDeclaredLoss raises the clear marks of the inputs te names past
// their gaps when a declared data loss covers each of them; otherwise it
// reports the refusal in the checkpoint store and returns te for the
// inputs no declaration covers.
func (ret *retention) acceptDeclaredLoss(ctx context.Context, te *edge.TrimmedError) error {
	var open []edge.Trimmed
	accepted := map[string]state.Position{}
	for _, t := range te.Inputs {
		d, ok, err := audit.Declared(ctx, ret.conn.js, ret.plan.pipeline, t.Stream)
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
		p := ret.in.positions[t.Input]
		if !t.Ahead {
			p.Clear = max(p.Clear, t.First-1)
		}
		// Frames may be among the records lost: each writer's next frame
		// may skip sequences.
		if !ret.plan.ingress {
			p.Frames = allowGaps(p.Frames, t.First-1)
		}
		accepted[t.Input] = p
		rec := d.Record
		ret.log.Warn("starting past records retention removed: the data loss was declared",
			"input", t.Input, "stream", t.Stream, "committed", t.Committed, "first", t.First, "removed", t.Removed,
			"declared_by", rec.Actor, "declared_at", rec.Time, "reason", rec.Reason, "audit_seq", rec.Seq)
	}
	if len(open) > 0 {
		refused := &edge.TrimmedError{Inputs: open}
		ret.log.Error("refusing to start: retention removed records this instance had not read", "err", refused,
			"fix", "run `weir recover -pipeline "+ret.plan.pipeline+"` to choose: restore an older snapshot whose positions are still held, or declare the loss")
		ret.reportTrimmed(refused)
		return refused
	}
	return ret.commitPositions(accepted)
}

// markStarted gives every input without a position one: nothing before
// where its consumer started was the input's to read. From then on the
// reader checks it.
func (ret *retention) markStarted(started map[string]uint64) error {
	fresh := map[string]state.Position{}
	for _, in := range ret.plan.inputs {
		if _, ok := ret.in.positions[in.Name]; !ok {
			fresh[in.Name] = state.Position{Clear: started[in.Name]}
		}
	}
	return ret.commitPositions(fresh)
}

// commitPositions commits positions outside a step.
func (ret *retention) commitPositions(ps map[string]state.Position) error {
	if len(ps) == 0 {
		return nil
	}
	b := ret.store.NewBatch()
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
		ret.in.positions[name] = p
	}
	return nil
}

// watchRetention is the tick's part: with the streams' state read before
// and after each input's newest message, it raises the clear mark of
// every input that has read all its subject holds, and returns a
// TrimmedError when retention has removed records an input's consumer
// was never sent. heads holds each input's newest message, absent when
// its subject holds none.
func (ret *retention) watchRetention(ctx context.Context, before, after map[string]*jetstream.StreamInfo, heads map[string]uint64) error {
	te, err := ret.mirrorGaps(ctx, after)
	if err != nil {
		return nil // the broker is away: nothing can be said of this tick
	}
	if te != nil {
		ret.reportTrimmed(te)
		return te
	}
	raised := map[string]state.Position{}
	var lost []edge.Trimmed
	for _, in := range ret.plan.inputs {
		b, a := before[in.Stream], after[in.Stream]
		if b == nil || a == nil {
			continue
		}
		p, ok := ret.in.positions[in.Name]
		if !ok {
			continue
		}
		known := max(p.Seq, p.Clear)
		if a.State.FirstSeq > known+1 {
			// Retention passed the committed position: fine if the
			// consumer was sent what it removed.
			sent, err := ret.sentOf(ctx, in)
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
		ret.reportTrimmed(err)
		return err
	}
	return ret.commitPositions(raised)
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
func (ret *retention) mirrorGaps(ctx context.Context, infos map[string]*jetstream.StreamInfo) (*edge.TrimmedError, error) {
	deleted := map[string][]uint64{}
	for name, info := range infos {
		if info == nil || info.Mirror == nil || info.State.NumDeleted == 0 {
			continue
		}
		st, err := ret.conn.js.Stream(ctx, name)
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
	for _, in := range ret.plan.inputs {
		p, ok := ret.in.positions[in.Name]
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
func (ret *retention) sentOf(ctx context.Context, in edge.Input) (uint64, error) {
	cons, err := ret.conn.js.Consumer(ctx, in.Stream, edge.ConsumerName(ret.consumerPrefix(), in.Name))
	if err != nil {
		return 0, err
	}
	return cons.CachedInfo().Delivered.Stream, nil
}

// jumps finds, in a step's deliveries (held ones too: they were received),
// each input's delivery that skipped sequences past the highest seen, the
// committed position and the clear mark. A stream's sequences interleave
// its subjects, so a jump is the rule; it hides a loss only when the stream
// has since removed what lay after the sequence jumped from. checkJumps
// decides with the streams' first sequences, read in the background from
// now: after every delivery of the step was received.
func (ret *retention) jumps(ctx context.Context, ds []edge.Delivery) *gaps {
	g := &gaps{from: map[string]uint64{}, seen: map[string]uint64{}}
	for _, d := range ds {
		name := d.Input.Name
		prev, ok := g.seen[name]
		if !ok {
			p := ret.in.positions[name]
			prev = max(ret.in.seen[name], p.Seq, p.Clear)
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
	for _, in := range ret.plan.inputs {
		if _, ok := g.from[in.Name]; ok {
			streams[in.Stream] = true
		}
	}
	g.first = make(chan map[string]uint64, 1)
	go func() {
		firsts := map[string]uint64{}
		for name := range streams {
			st, err := ret.conn.js.Stream(ctx, name)
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
func (ret *retention) checkJumps(g *gaps) error {
	if g.first == nil {
		return nil
	}
	firsts := <-g.first
	var lost []edge.Trimmed
	for _, in := range ret.plan.inputs {
		from, ok := g.from[in.Name]
		if !ok {
			continue
		}
		first, ok := firsts[in.Stream]
		if !ok {
			return operator.Retry(fmt.Errorf("stream: input %s: could not read where stream %s begins, to tell a jump from a loss", in.Name, in.Stream), time.Second)
		}
		if first > from+1 {
			p := ret.in.positions[in.Name]
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
			p := ret.in.positions[in.Name]
			lost = append(lost, edge.Trimmed{Input: in.Name, Partition: in.Partition, Stream: in.Stream, Subject: in.Subject,
				Committed: p.Seq, Clear: max(p.Clear, from), First: last + 1, Removed: n, Skipped: true})
		}
	}
	if len(lost) == 0 {
		return nil
	}
	err := &edge.TrimmedError{Inputs: lost}
	ret.reportTrimmed(err)
	return err
}

// removedBefore returns, for a frame gap found at stream sequence seq of
// input in, the loss that explains it: sequences of the input's stream
// after the input's known position and before seq that the stream no
// longer holds — removed by retention, a purge or a delete before the
// reader's consumer began, where neither the consumer's count nor a jump
// shows them; nil when none is gone. Deleted sequences of any subject
// count: the stream no longer says which subject they held.
func (ret *retention) removedBefore(ctx context.Context, in edge.Input, seq uint64) (*edge.TrimmedError, error) {
	st, err := ret.conn.js.Stream(ctx, in.Stream)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx, jetstream.WithDeletedDetails(true))
	if err != nil {
		return nil, err
	}
	p := ret.in.positions[in.Name]
	known := max(p.Seq, p.Clear)
	var n uint64
	if first := info.State.FirstSeq; first > known+1 {
		n = min(first, seq) - known - 1
	}
	for _, d := range info.State.Deleted {
		if d > known && d < seq && d >= info.State.FirstSeq {
			n++
		}
	}
	if n == 0 {
		return nil, nil
	}
	return &edge.TrimmedError{Inputs: []edge.Trimmed{{Input: in.Name, Partition: in.Partition, Stream: in.Stream, Subject: in.Subject,
		Committed: p.Seq, Clear: p.Clear, First: seq, Removed: n, Ahead: true}}}, nil
}

// reportTrimmed records an instance stopping for records retention
// removed, where weir recover finds it.
func (ret *retention) reportTrimmed(te *edge.TrimmedError) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ret.ckpts.PutTrimmed(ctx, checkpoint.TrimmedReport{
		Operator: ret.cfg.Operator, Instance: ret.cfg.Instance, At: time.Now().UTC(), Inputs: te.Inputs,
	}); err != nil {
		ret.log.Warn("could not report the refusal for weir recover", "err", err)
	}
}

// lostWhileReading makes final a loss the reader counted while reading —
// a removal that need not move where the stream begins (a purge of one
// subject, a deleted message), so that a start would not see it: it is
// kept in the state, reported for weir recover and returned.
func (ret *retention) lostWhileReading(te *edge.TrimmedError) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var unread []error
	for i := range te.Inputs {
		t := &te.Inputs[i]
		t.Committed = ret.in.positions[t.Input].Seq
		var last uint64
		st, err := ret.conn.js.Stream(ctx, t.Stream)
		if err == nil {
			last = st.CachedInfo().State.LastSeq
		} else {
			unread = append(unread, fmt.Errorf("stream: read where %s ends, to bound the loss: %w", t.Stream, err))
		}
		t.First = lossEnd(*t, last)
	}
	kept, err := ret.lostMarks()
	if err != nil {
		return errors.Join(te, err)
	}
	b, err := json.Marshal(append(kept, te.Inputs...))
	if err != nil {
		return err
	}
	batch := ret.store.NewBatch()
	if err := batch.PutMeta(metaLost, b); err != nil {
		batch.Close()
		return err
	}
	if err := batch.Commit(); err != nil {
		return errors.Join(te, fmt.Errorf("stream: record the loss: %w", err))
	}
	ret.reportTrimmed(te)
	return errors.Join(append([]error{te}, unread...)...)
}

// lostMarks reads the losses kept by lostWhileReading. A marker that
// cannot be read or decoded is an error, never "no loss": it is what
// keeps an instance from starting past a loss nobody declared.
func (ret *retention) lostMarks() ([]edge.Trimmed, error) {
	v, ok, err := ret.store.Meta(metaLost)
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
func (ret *retention) lostBefore(ctx context.Context) error {
	lost, err := ret.lostMarks()
	if err != nil {
		return err
	}
	if len(lost) == 0 {
		return nil
	}
	if err := ret.acceptDeclaredLoss(ctx, &edge.TrimmedError{Inputs: lost}); err != nil {
		return err
	}
	b := ret.store.NewBatch()
	if err := b.DeleteMeta(metaLost); err != nil {
		b.Close()
		return err
	}
	return b.Commit()
}

func (ret *retention) inputs() []edge.Input {
	ins := make([]edge.Input, len(ret.plan.inputs))
	copy(ins, ret.plan.inputs)
	for i := range ins {
		p, ok := ret.in.positions[ins[i].Name]
		ins[i].After, ins[i].Clear, ins[i].Positioned = p.Seq, p.Clear, ok
		if r := ret.cfg.Replay; r != nil && ret.plan.ingress {
			// A replay reads its range: from its first sequence, which the
			// stream must still hold.
			ins[i].Until = r.Until
			ins[i].After, ins[i].Positioned = max(ins[i].After, r.From-1), true
		}
		ins[i].Pull = ret.plan.pull(ins[i])
	}
	return ins
}

// consumerPrefix starts the names of the instance's durable consumers.
func (ret *retention) consumerPrefix() string {
	return edge.ConsumerPrefix(ret.plan.pipeline, ret.cfg.Operator, ret.cfg.Instance)
}

// headsEvery is how often the step loop reads the time of each input's
// newest message, for the source lag.
const headsEvery = 5 * time.Second

// refreshHeads reads, at most every headsEvery, when the broker stored
// each input partition's newest message, for the source lag, notes the
// inputs that have read all their subject holds (caughtUp: an ingress
// input is idled only so), and watches retention (watchRetention). An
// ingress input silent past the idle timeout has the heads read sooner
// (wantHeads), without retention. An input it cannot read keeps its last
// head; a broker it cannot reach skips the tick. The error is a
// TrimmedError.
func (ret *retention) refreshHeads(ctx context.Context, now time.Time) error {
	ret.obs.mu.Lock()
	due := now.Sub(ret.obs.mu.headsAt) >= headsEvery
	if due {
		ret.obs.mu.headsAt = now
	}
	ret.obs.mu.Unlock()
	// A look for idleness alone reads the heads, not retention: that
	// keeps its own pace, so that a broker's passing state — a cluster
	// stream's new leader — is judged no more often than before.
	look := ret.in.wantHeads && now.Sub(ret.in.lookedAt) >= max(time.Second, ret.plan.idleTimeout/2)
	if !due && !look {
		return nil
	}
	ret.in.wantHeads, ret.in.lookedAt = false, now
	began := ret.now()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	streams, before, err := ret.inputStreams(ctx)
	if err != nil {
		ret.obs.headsFailed("the input streams' state could not be read")
		return nil
	}
	heads := map[string]uint64{}
	for _, in := range ret.plan.inputs {
		m, err := streams[in.Stream].GetLastMsgForSubject(ctx, in.Subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			ret.obs.headsFailed("input " + in.Name + "'s newest message could not be read: " + err.Error())
			return nil // the broker is away: nothing can be said of this tick
		}
		heads[in.Name] = m.Sequence
		ret.obs.mu.Lock()
		ret.obs.mu.head[in.Name] = m.Time
		ret.obs.mu.Unlock()
	}
	_, after, err := ret.inputStreams(ctx)
	if err != nil {
		ret.obs.headsFailed("the input streams' state could not be read")
		return nil
	}
	for _, in := range ret.plan.inputs {
		if heads[in.Name] <= max(ret.in.seen[in.Name], ret.in.positions[in.Name].Seq) {
			ret.in.caughtUp[in.Name] = began
		}
	}
	if !due {
		return nil
	}
	return ret.watchRetention(ctx, before, after, heads)
}
