package stream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/pkg/state"
)

// txn is the writer side of a transactional result edge (sink.effect:
// transactional). A step does not publish its results: it holds them in
// its state batch, numbered in order (the store's held sequence), each
// tagged with its writer and the writer's own result sequence. Before each
// snapshot the runtime records a cut — checkpoint N holds results up to
// held sequence H — in the state, so the snapshot of N holds exactly the
// results of epochs up to N. When N completes, the results up to its cut
// are published in atomic batches, each with a commit marker on the
// writer's commit subject that names the writer's last result in it and
// expects the writer's previous marker; then they are released from the
// state. So:
//
//   - a reader of the result stream never sees a result whose checkpoint
//     did not complete: an aborted epoch's results are never published,
//     and a restore to an older checkpoint drops them with the state;
//   - a crash after a batch is stored and before its results are released
//     leaves them held: at start the writer's last marker says which
//     results are stored, and those are released unpublished — however
//     long after, with no reliance on JetStream's duplicate window;
//   - a second process publishing as the same writer is refused by the
//     marker's expected sequence, stops, and recovers.
//
// An operator holding max_pending_epochs cuts stops reading input until a
// checkpoint completes: held results are bounded by the contract.
type txn struct {
	spec   edge.Spec
	writer string
	max    int

	txnState
	// markers holds, per writer, the stream sequence of its last commit
	// marker: what its next marker expects.
	markers map[string]uint64
	// latest is the highest checkpoint known complete; polled when the
	// store was last asked.
	latest uint64
	polled time.Time
	// from is where the next release scan starts: every held result
	// below it is released (their deletions would only slow the scan).
	from      uint64
	completed chan uint64
	sub       *nats.Subscription
	// stored are the IDs of results this writer stored after the
	// snapshot it restored from (txnState.rewound): recomputed, they are
	// dropped instead of held, and counted in alreadyStored.
	stored        map[string]bool // ID → recognized
	recognized    int
	alreadyStored *atomic.Int64
}

// txnState is what a step changes and the state persists (metaTxn).
type txnState struct {
	wseq uint64   // the writer's last result sequence
	hseq uint64   // the store's last held sequence
	cuts []txnCut // not yet released, ascending
	// cutThrough is the held sequence of the last cut made.
	cutThrough uint64
	// rewound, when not zero, is one more than the writer sequence the
	// state had when it started behind what the writer had stored — restored from a
	// savepoint or an older checkpoint: the results stored after it are
	// recognized by their IDs when the replay recomputes them. Kept, so
	// that a restart during the replay still recognizes them.
	rewound uint64
}

// txnCut says that checkpoint's snapshot holds results up to held sequence
// hseq.
type txnCut struct{ checkpoint, hseq uint64 }

const metaTxn = "txn"

// maxCommitBatch bounds the results of one atomic batch, with its marker
// within the default batch limit of every nats-server.
const maxCommitBatch = 999

func (s txnState) marshal() []byte {
	b := binary.AppendUvarint(nil, s.wseq)
	b = binary.AppendUvarint(b, s.hseq)
	b = binary.AppendUvarint(b, s.cutThrough)
	b = binary.AppendUvarint(b, uint64(len(s.cuts)))
	for _, c := range s.cuts {
		b = binary.AppendUvarint(b, c.checkpoint)
		b = binary.AppendUvarint(b, c.hseq)
	}
	if s.rewound > 0 {
		b = binary.AppendUvarint(b, s.rewound)
	}
	return b
}

func (s *txnState) unmarshal(b []byte) error {
	var vals []uint64
	for len(b) > 0 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return errors.New("stream: corrupt transactional sink state")
		}
		vals = append(vals, v)
		b = b[n:]
	}
	if len(vals) < 4 || (uint64(len(vals)) != 4+2*vals[3] && uint64(len(vals)) != 5+2*vals[3]) {
		return errors.New("stream: corrupt transactional sink state")
	}
	s.wseq, s.hseq, s.cutThrough = vals[0], vals[1], vals[2]
	s.cuts, s.rewound = nil, 0
	end := 4 + 2*int(vals[3])
	for i := 4; i < end; i += 2 {
		s.cuts = append(s.cuts, txnCut{vals[i], vals[i+1]})
	}
	if len(vals) > end {
		s.rewound = vals[end]
	}
	return nil
}

func (s txnState) clone() txnState {
	s.cuts = slices.Clone(s.cuts)
	return s
}

// full reports whether the operator holds as many epochs as it may.
func (t *txn) full() bool { return len(t.cuts) >= t.max }

// heldValue encodes a held result: its writer, the writer's sequence and
// the staged message.
func heldValue(writer string, wseq uint64, m []byte) []byte {
	b := binary.AppendUvarint(nil, uint64(len(writer)))
	b = append(b, writer...)
	b = binary.AppendUvarint(b, wseq)
	return append(b, m...)
}

func parseHeld(v []byte) (writer string, wseq uint64, m edge.Message, err error) {
	n, w := binary.Uvarint(v)
	if w <= 0 || uint64(len(v)-w) < n {
		return "", 0, m, errors.New("stream: corrupt held result")
	}
	writer = string(v[w : w+int(n)])
	v = v[w+int(n):]
	wseq, w = binary.Uvarint(v)
	if w <= 0 {
		return "", 0, m, errors.New("stream: corrupt held result")
	}
	err = m.UnmarshalBinary(v[w:])
	return writer, wseq, m, err
}

// hold puts a step's results in its batch instead of publishing them,
// but for those a replay recomputes that the writer stored before.
func (t *txn) hold(b *state.Batch, frames []edge.Message) error {
	for _, f := range frames {
		if seen, ok := t.stored[f.ID]; ok {
			// Kept after it is recognized: an input replayed twice (a frame
			// delivered again) recomputes it twice.
			if !seen {
				t.stored[f.ID] = true
				if t.recognized++; t.recognized == len(t.stored) {
					t.rewound = 0 // every one recognized: the replay has caught up
				}
			}
			t.alreadyStored.Add(1)
			continue
		}
		data, _ := f.MarshalBinary()
		t.wseq++
		t.hseq++
		if err := b.HoldOutput(t.hseq, heldValue(t.writer, t.wseq, data)); err != nil {
			return err
		}
	}
	return b.PutMeta(metaTxn, t.marshal())
}

// errBatchFull ends a scan of held results.
var errBatchFull = errors.New("batch full")

// cut records, before checkpoint n's snapshot, that n holds the results
// held so far.
func (o *output) cut(n uint64) error {
	t := o.txn
	if t.hseq <= t.cutThrough {
		return nil // nothing held since the last cut: that cut covers n too
	}
	t.cuts = append(t.cuts, txnCut{n, t.hseq})
	t.cutThrough = t.hseq
	o.stats.heldEpochs.Store(int64(len(t.cuts)))
	b := o.store.NewBatch()
	defer b.Close()
	if err := b.PutMeta(metaTxn, t.marshal()); err != nil {
		return err
	}
	return b.Commit()
}

func (o *output) stopTxn() {
	if o.txn != nil && o.txn.sub != nil {
		_ = o.txn.sub.Unsubscribe() // at the stop: the connection closes next, taking the subscription
	}
}

// txnCompleted is the channel of completed checkpoints; nil without a
// transactional sink.
func (o *output) txnCompleted() <-chan uint64 {
	if o.txn == nil {
		return nil
	}
	return o.txn.completed
}

// startTxn loads the sink's state, listens for completed checkpoints, reads
// the last commit marker of every writer whose results it holds and
// releases those already stored; then the run publishes what completed
// checkpoints allow (pollCompleted). writer is this instance's name.
func (o *output) startTxn(ctx context.Context, writer string, replicas int) error {
	t := &txn{spec: *o.plan.output, writer: writer, max: o.plan.maxPendingEpochs,
		markers: map[string]uint64{}, completed: make(chan uint64, 16), alreadyStored: &o.stats.alreadyStored}
	t.spec.Replicas = replicas
	if v, ok, err := o.store.Meta(metaTxn); err != nil {
		return err
	} else if ok {
		if err := t.unmarshal(v); err != nil {
			return err
		}
	}
	o.stats.heldEpochs.Store(int64(len(t.cuts)))
	var err error
	t.sub, err = o.conn.nc.Subscribe(checkpoint.CompleteSubject(o.plan.pipeline), func(m *nats.Msg) {
		if !natsconn.Published(m) {
			return // a stream's message a consumer delivered here (natsconn.Published)
		}
		n, err := checkpoint.ParseCompleted(m.Data)
		if err != nil {
			o.log.Warn("ignoring a malformed announcement of a completed checkpoint; the tick polls the store", "err", err)
			return
		}
		select {
		case t.completed <- n:
		default: // the tick polls the store
		}
	})
	if err != nil {
		return fmt.Errorf("stream: subscribe to completed checkpoints: %w", err)
	}
	o.txn = t

	// What each writer has stored, by its last marker.
	stored := map[string]uint64{}
	mark := func(w string) error {
		if _, ok := stored[w]; ok {
			return nil
		}
		c, err := edge.LastCommit(ctx, o.conn.js, t.spec, w)
		if err != nil {
			return err
		}
		stored[w], t.markers[w] = c.Seq, c.StreamSeq
		return nil
	}
	if err := mark(t.writer); err != nil {
		return err
	}
	// A state behind what this writer stored was restored from a savepoint
	// or an older checkpoint (or is new, the writer's name reused): the
	// input it replays recomputes results already stored, which their IDs
	// give away.
	if stored[t.writer] > t.wseq && t.rewound == 0 {
		t.rewound = t.wseq + 1
		o.log.Info("the state is older than the results this writer stored: a replay recomputes them, and they are recognized by their IDs",
			"state_seq", t.wseq, "stored_seq", stored[t.writer])
	}
	if t.rewound > 0 {
		if t.stored, err = edge.StoredSince(ctx, o.conn.js, t.spec, t.writer, t.rewound-1); err != nil {
			return fmt.Errorf("stream: results stored since the restored state: %w", err)
		}
		o.log.Info("results already stored, to recognize when recomputed", "results", len(t.stored), "since_seq", t.rewound-1)
	}
	t.wseq = max(t.wseq, stored[t.writer])
	b := o.store.NewBatch()
	defer b.Close()
	dropped := 0
	err = o.store.HeldOutputs(0, func(h uint64, v []byte) error {
		w, ws, _, err := parseHeld(v)
		if err != nil {
			return err
		}
		if err := mark(w); err != nil {
			return err
		}
		if w == t.writer {
			t.wseq = max(t.wseq, ws)
		}
		if ws <= stored[w] {
			dropped++
			return b.ReleaseOutput(h)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("stream: read held results: %w", err)
	}
	if err := b.PutMeta(metaTxn, t.marshal()); err != nil {
		return err
	}
	if err := b.Commit(); err != nil {
		return err
	}
	o.stats.alreadyStored.Add(int64(dropped))
	if dropped > 0 {
		o.log.Info("released held results the result stream already holds", "results", dropped)
	}
	return nil
}

// pollCompleted asks the checkpoint store for the latest completed
// checkpoint — an announcement may have been missed — and releases what
// it allows.
func (o *output) pollCompleted(ctx context.Context, ckpts *checkpoint.Store, faults *Faults) error {
	o.txn.polled = time.Now()
	l, _, err := ckpts.Latest(ctx)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return nil
	}
	if err != nil {
		o.log.Warn("reading the latest checkpoint", "err", err)
		return nil
	}
	return o.release(ctx, l.Checkpoint, faults)
}

// release publishes the results of every cut whose checkpoint is at or
// below completed, in held order, in atomic batches of one writer and one
// epoch with their commit markers, and releases them from the state. A
// publish that fails is retried at the next completion or tick; a marker
// conflict stops the run.
func (o *output) release(ctx context.Context, completed uint64, faults *Faults) error {
	t := o.txn
	t.latest = max(t.latest, completed)
	noticed := time.Now()
	for len(t.cuts) > 0 && t.cuts[0].checkpoint <= t.latest {
		c := t.cuts[0]
		for {
			n, err := o.releaseBatch(ctx, c, faults)
			if errors.Is(err, edge.ErrCommitConflict) {
				return fmt.Errorf("stream: %w", err)
			}
			if err != nil {
				o.log.Warn("publishing committed results; retrying later", "checkpoint", c.checkpoint, "err", err)
				return nil
			}
			if n == 0 {
				break
			}
		}
		t.cuts = t.cuts[1:]
		o.stats.heldEpochs.Store(int64(len(t.cuts)))
		// From learning that its checkpoint completed to its results
		// stored: what a reader waits beyond the checkpoint.
		o.obs.metrics.SinkCommitted(ctx, time.Since(noticed))
		b := o.store.NewBatch()
		err := b.PutMeta(metaTxn, t.marshal())
		if err == nil {
			err = b.Commit()
		}
		b.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// releaseBatch publishes the first held results of cut c — those of one
// writer, at most maxCommitBatch — under the completed checkpoint that
// releases them, and releases them; 0 when c holds no more.
func (o *output) releaseBatch(ctx context.Context, c txnCut, faults *Faults) (int, error) {
	t := o.txn
	var (
		writer string
		last   uint64
		hseqs  []uint64
		msgs   []edge.Message
	)
	err := o.store.HeldOutputs(t.from, func(h uint64, v []byte) error {
		if h > c.hseq || len(msgs) == maxCommitBatch {
			return errBatchFull
		}
		w, ws, m, err := parseHeld(v)
		if err != nil {
			return err
		}
		if writer != "" && w != writer {
			return errBatchFull
		}
		writer, last = w, ws
		hseqs, msgs = append(hseqs, h), append(msgs, m)
		return nil
	})
	if err != nil && !errors.Is(err, errBatchFull) {
		return 0, err
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	// The epoch a reader sees is the completed checkpoint that releases
	// the results: a cut of a checkpoint that aborted is released by a
	// later one, which covers it.
	seq, err := edge.PublishCommitted(ctx, o.conn.js, t.spec, edge.Commit{Writer: writer, Seq: last, Epoch: t.latest}, t.markers[writer], msgs)
	if err != nil {
		return 0, err
	}
	t.markers[writer] = seq
	faults.afterRelease(int64(len(msgs)))
	b := o.store.NewBatch()
	defer b.Close()
	for _, h := range hseqs {
		if err := b.ReleaseOutput(h); err != nil {
			return 0, err
		}
	}
	if err := b.Commit(); err != nil {
		return 0, err
	}
	t.from = hseqs[len(hseqs)-1] + 1
	for _, m := range msgs {
		o.obs.metrics.Out(ctx, m.Subject, 1, int64(len(m.Data)))
	}
	o.stats.released.Add(int64(len(msgs)))
	return len(msgs), nil
}
