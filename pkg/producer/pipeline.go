package producer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// DefaultDepth is the number of atomic batches a Pipeline keeps in flight
// when NewPipeline is given 0.
const DefaultDepth = 4

// A Pipeline stores atomic batches without waiting for one to be stored
// before sending the next: while the server writes and syncs batch N, the
// producer builds and sends batch N+1. Up to depth batches are in flight;
// their acknowledgements are read in the order the batches were sent.
//
// Batches go out on one connection in the order Send is called, so the
// stream stores them in that order. A refused batch is the exception the
// Pipeline guards against: the server refuses a batch holding a message ID
// it has stored, and the Pipeline then stores it message by message (see
// Publish) — after any batch sent behind it. Such duplicates come at the
// start of a run that resumes where an earlier one stopped, so a Pipeline
// sends one batch at a time until a batch is stored whole, and again after
// any refusal. A batch that fails outright is reported by Send or Flush
// while later ones may be stored; a producer that resumes from the count
// its Pipeline reported re-sends those, and the stream drops them as
// duplicates by their Nats-Msg-Id.
//
// A Pipeline of NewSequenced needs no Nats-Msg-Id on its messages.
//
// A Pipeline is not safe for concurrent use.
type Pipeline struct {
	js          jetstream.JetStream
	depth       int
	maxInFlight int
	ackTimeout  time.Duration
	// plainBelow is PlainBelow, or 0 where every batch of two or more
	// is atomic.
	plainBelow int
	sent       []*sentBatch // in flight, oldest first
	stats      Stats
	// stored is set when the last batch acknowledged was stored whole: only
	// then does the Pipeline keep more than one in flight.
	stored bool
	// sequenced is set by NewSequenced, with the header naming the
	// producer; once known is set, next is the stream sequence the next
	// batch sent must follow, in stream.
	sequenced, known bool
	producer         string
	next             uint64
	stream           jetstream.Stream
	// bySubject keeps no two batches that share a subject in flight
	// (Publish): a batch refused, or unanswered, is then never stored
	// behind a later one of its subjects.
	bySubject bool
}

// sentBatch is a batch whose commit has been sent and whose acknowledgement
// has not been read. id is empty for a batch sent as plain messages (a
// batch of one, or a small one: plainBatch), which has one future per
// message; an atomic batch has one, its commit's.
type sentBatch struct {
	msgs []*nats.Msg
	id   string
	acks []jetstream.PubAckFuture
	// subjects holds the batch's subjects when its Pipeline keeps them in
	// order (bySubject).
	subjects map[string]struct{}
	// after is the stream sequence a sequenced batch follows; resent
	// counts the times it was sent again after other writers' messages.
	after  uint64
	resent int
	// seq is the stream sequence of the batch's last message, once stored.
	seq uint64
	// heard counts the acknowledgements read from acks, in order; got and
	// answer hold the batch's answer once known (futures deliver once).
	heard  int
	got    bool
	answer error
}

// NewPipeline returns a Pipeline that keeps up to depth batches in flight
// (0: DefaultDepth) and, when it stores a batch message by message, keeps
// up to maxInFlight publishes outstanding (0: 64).
func NewPipeline(js jetstream.JetStream, depth, maxInFlight int) *Pipeline {
	if depth <= 0 {
		depth = DefaultDepth
	}
	return &Pipeline{js: js, depth: depth, maxInFlight: maxInFlight, ackTimeout: js.Options().DefaultTimeout, plainBelow: PlainBelow}
}

// NewSequenced returns a Pipeline that publishes by stream sequence
// instead of by message ID. Each batch carries on its first message the
// sequence the stream must end at before it (Nats-Expected-Last-Sequence),
// and one batch is in flight at a time (the next one grows meanwhile), so
// a batch is stored only right after the one before it, whole or not at
// all, and the messages need no Nats-Msg-Id. The broker checks every
// message ID against the IDs of its duplicate window, held in memory on
// the stream's one goroutine; without them it stores more messages a
// second, and its garbage collector has less to scan (docs/BENCHMARKS-LOG.md).
//
// Other writers may share the stream: a batch the stream refuses because
// their messages landed first was not stored, and the Pipeline sends it
// again after them (Stats.Resent). Messages of its own producer landing
// first — their header producer holds the value of the batch's first
// message — are another matter: an instance of the same producer running
// beside this one, or a batch of an earlier run stored after this run
// looked where to resume. Sending again would store events twice, so the
// Pipeline fails with ErrOvertaken. Nothing in the stream deduplicates a
// message sent twice: a producer that stops has to find out for itself
// where to resume, for example from a position it writes into the last
// message of each batch, as nexmark-gen does. The stream must allow
// atomic batches.
func NewSequenced(js jetstream.JetStream, producer string) *Pipeline {
	p := NewPipeline(js, 1, 0)
	p.sequenced, p.producer = true, producer
	return p
}

// ErrOvertaken is returned by a Pipeline of NewSequenced whose batch was
// overtaken by messages of its own producer.
var ErrOvertaken = errors.New("producer: messages of this producer were stored ahead of a batch of it: another instance is publishing, or an earlier run's last batch landed after this one looked where to resume; look again")

// maxResends bounds how many times in a row a sequenced batch is sent
// again after other writers' messages.
const maxResends = 100

// InFlight is the number of batches sent and not yet acknowledged.
func (p *Pipeline) InFlight() int { return len(p.sent) }

// Poll settles, without waiting, the oldest batches whose acknowledgements
// have arrived, and returns how many messages they stored.
func (p *Pipeline) Poll(ctx context.Context) (stored int, err error) {
	for len(p.sent) > 0 {
		if b := p.sent[0]; !b.poll() {
			return stored, nil
		}
		n, err := p.settle(ctx)
		stored += n
		if err != nil {
			return stored, err
		}
	}
	return stored, nil
}

// Stats reports how the batches acknowledged so far were stored.
func (p *Pipeline) Stats() Stats { return p.stats }

// Send sends msgs — all for one stream, at most as many as the server's
// batch limit (MaxBatch unless configured higher) — as one atomic batch
// and returns once they are sent, first waiting for the oldest batch
// in flight when depth batches are. It returns how many messages of
// earlier batches it found stored while waiting. The Pipeline keeps msgs
// until the batch is acknowledged; the caller must not change them.
func (p *Pipeline) Send(ctx context.Context, msgs []*nats.Msg) (stored int, err error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	depth := 1
	if p.stored {
		depth = p.depth
	}
	var subjects map[string]struct{}
	if p.bySubject {
		subjects = make(map[string]struct{}, 4)
		for _, m := range msgs {
			subjects[m.Subject] = struct{}{}
		}
	}
	for len(p.sent) >= depth || p.overlaps(subjects) {
		n, err := p.settle(ctx)
		stored += n
		if err != nil {
			return stored, err
		}
	}
	if p.sequenced && !p.known {
		if err := p.follow(ctx, msgs[0].Subject); err != nil {
			return stored, err
		}
	}
	b, err := p.send(msgs)
	if err != nil {
		return stored, err
	}
	b.subjects = subjects
	p.sent = append(p.sent, b)
	return stored, nil
}

// overlaps reports whether a batch in flight has one of subjects.
func (p *Pipeline) overlaps(subjects map[string]struct{}) bool {
	for _, b := range p.sent {
		for s := range subjects {
			if _, ok := b.subjects[s]; ok {
				return true
			}
		}
	}
	return false
}

// Flush waits until every batch sent is stored and returns how many
// messages that was.
func (p *Pipeline) Flush(ctx context.Context) (stored int, err error) {
	for len(p.sent) > 0 {
		n, err := p.settle(ctx)
		stored += n
		if err != nil {
			return stored, err
		}
	}
	return stored, nil
}

// Close abandons the batches in flight without waiting for them.
func (p *Pipeline) Close() { p.sent = nil }

// send publishes msgs as an atomic batch with the headers of jetstreamext —
// a batch of one as a plain message. The commit goes through the JetStream
// context's asynchronous publish, so its acknowledgement comes back on the
// context's one reply subscription — no subscription per batch — as a
// future. Either way the messages are on the connection, in order, when
// send returns.
func (p *Pipeline) send(msgs []*nats.Msg) (*sentBatch, error) {
	for _, m := range msgs {
		if m.Header == nil {
			m.Header = nats.Header{}
		}
	}
	if p.sequenced {
		for _, m := range msgs {
			m.Header.Del(jetstream.ExpectedLastSeqHeader)
		}
		msgs[0].Header.Set(jetstream.ExpectedLastSeqHeader, strconv.FormatUint(p.next, 10))
	}
	after := p.next
	p.next += uint64(len(msgs))
	if len(msgs) == 1 || p.plainBatch(msgs) {
		clearBatchHeaders(msgs)
		b := &sentBatch{msgs: msgs, after: after, acks: make([]jetstream.PubAckFuture, len(msgs))}
		for i, m := range msgs {
			f, err := p.js.PublishMsgAsync(m)
			if err != nil {
				return nil, fmt.Errorf("producer: publish %s: %w", m.Header.Get(jetstream.MsgIDHeader), err)
			}
			b.acks[i] = f
		}
		return b, nil
	}
	nc := p.js.Conn()
	b := &sentBatch{msgs: msgs, id: nuid.Next(), after: after}
	last := len(msgs) - 1
	for i, m := range msgs {
		m.Header.Set(jetstreamext.BatchIDHeader, b.id)
		m.Header.Set(jetstreamext.BatchSeqHeader, strconv.Itoa(i+1))
		m.Header.Del(jetstreamext.BatchCommitHeader)
		m.Reply = ""
		if i == last {
			m.Header.Set(jetstreamext.BatchCommitHeader, "1")
			f, err := p.js.PublishMsgAsync(m)
			if err != nil {
				return nil, fmt.Errorf("producer: publish batch commit: %w", err)
			}
			b.acks = []jetstream.PubAckFuture{f}
			break
		}
		if err := nc.PublishMsg(m); err != nil {
			return nil, fmt.Errorf("producer: publish batch message %d: %w", i+1, err)
		}
	}
	return b, nil
}

// PlainBelow is the size under which a batch whose messages are all on
// different subjects goes as plain messages rather than as an atomic
// batch. On a one-replica file stream the server stages every atomic batch
// of two or more messages in a file store of its own, created, synced and
// removed per batch (nats-server newBatchStore): about 2 ms of the
// broker's CPU whatever the batch's size, against 0.1–0.25 ms for a plain
// message and its own fsync (docs/BENCHMARKS.md, "The cost model"). A
// step's frames — one per output partition — are such batches. Nothing is
// lost by not storing them atomically: each message has its own subject,
// so no message can land behind a later one of its subject within the
// batch, and across batches the Pipeline's order holds as it does for
// atomic ones (a failed batch fails the Send or Flush, and what the
// caller re-sends carries the same message IDs).
const PlainBelow = 12

// plainBatch reports whether msgs go as plain messages (PlainBelow). A
// sequenced Pipeline's batches are atomic: only the first message says
// what the stream must end at.
func (p *Pipeline) plainBatch(msgs []*nats.Msg) bool {
	if p.sequenced || p.plainBelow <= 0 || len(msgs) >= p.plainBelow {
		return false
	}
	for i, m := range msgs {
		for _, o := range msgs[:i] {
			if o.Subject == m.Subject {
				return false
			}
		}
	}
	return true
}

// settle waits for the oldest batch in flight to be stored — message by
// message when the server refused it as a batch — and returns its size.
func (p *Pipeline) settle(ctx context.Context) (int, error) {
	b := p.sent[0]
	err := p.ack(ctx, b)
	for p.sequenced && wrongLastSequence(err) && b.resent < maxResends {
		// Messages landed first. Nothing of b is stored, and nothing is in
		// flight behind it: send it again after them, unless they are its
		// own producer's.
		if rerr := p.resend(ctx, b); rerr != nil {
			p.known = false
			return 0, rerr
		}
		b = p.sent[0]
		err = p.ack(ctx, b)
	}
	if err == nil && p.sequenced && b.seq != b.after+uint64(len(b.msgs)) {
		err = fmt.Errorf("producer: batch of %d to follow stream sequence %d ends at %d", len(b.msgs), b.after, b.seq)
	}
	if err != nil {
		// Where the stream ends is no longer known: a Send after a
		// failure looks it up again.
		p.known = false
	}
	if b.id != "" || err != nil {
		// A plain message stored says nothing of whether the stream takes
		// atomic batches: one sent behind a batch the stream refuses as
		// such would be stored before that batch, one by one, is.
		p.stored = err == nil
	}
	if b.id == "" { // plain messages: a duplicate is acknowledged, not refused
		if err != nil {
			return 0, fmt.Errorf("producer: publish %s: %w", b.failed(), err)
		}
		p.sent = p.sent[1:]
		p.stats.Single += len(b.msgs)
		return len(b.msgs), nil
	}
	var api *jetstream.APIError
	if err != nil && p.fallBack(err) {
		clearBatchHeaders(b.msgs)
		err = eachInOrder(ctx, p.js, b.msgs, p.maxInFlight)
		if err == nil {
			p.stats.Single += len(b.msgs)
		}
	} else if err == nil {
		p.stats.Batches++
	} else if errors.As(err, &api) && api.ErrorCode == errBatchTooLarge {
		err = fmt.Errorf("producer: batch of %d from %s refused: %w; the server's batch limit (jetstream { limits { batch { max_msgs } } }, %d by default) bounds an atomic batch: send smaller batches or raise it",
			len(b.msgs), b.msgs[0].Header.Get(jetstream.MsgIDHeader), err, MaxBatch)
	} else if p.sequenced && wrongLastSequence(err) {
		err = fmt.Errorf("producer: batch of %d refused %d times in a row, other writers' messages landing before it each time: %w", len(b.msgs), b.resent+1, err)
	} else if p.sequenced && errors.As(err, &api) && api.ErrorCode == errAtomicDisabled {
		err = fmt.Errorf("producer: publishing by sequence needs atomic batches, and the stream of %s does not allow them (nats stream edit STREAM --allow-batch): %w", b.msgs[0].Subject, err)
	} else {
		err = fmt.Errorf("producer: batch of %d from %s (%s): %w", len(b.msgs), b.msgs[0].Header.Get(jetstream.MsgIDHeader), b.msgs[0].Subject, err)
	}
	if err != nil {
		return 0, err
	}
	p.sent = p.sent[1:]
	return len(b.msgs), nil
}

// resend sends b, the oldest batch in flight and the only one, again
// after the messages that landed before it, once it has made sure none is
// its own producer's, and puts the new send in its place.
func (p *Pipeline) resend(ctx context.Context, b *sentBatch) error {
	// Back off a little, more each time: on a replicated stream the
	// sequence a batch is checked against counts messages proposed and
	// not yet stored, which the stream's info does not.
	select {
	case <-time.After(time.Duration(1<<min(b.resent, 7)) * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := p.follow(ctx, b.msgs[0].Subject); err != nil {
		return err
	}
	own := b.msgs[0].Header.Get(p.producer)
	for seq := b.after + 1; seq <= p.next && own != ""; seq++ {
		m, err := p.stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("producer: read what landed before a batch: %w", err)
		}
		if m.Header.Get(p.producer) == own {
			return fmt.Errorf("%w (%s %q at stream sequence %d, ahead of a batch to follow %d)", ErrOvertaken, p.producer, own, seq, b.after)
		}
	}
	nb, err := p.send(b.msgs)
	if err != nil {
		return err
	}
	nb.resent = b.resent + 1
	p.sent[0] = nb
	p.stats.Resent++
	return nil
}

// follow makes the next batch follow the last message of the stream that
// stores subject.
func (p *Pipeline) follow(ctx context.Context, subject string) error {
	if p.stream == nil {
		name, err := p.js.StreamNameBySubject(ctx, subject)
		if err != nil {
			return fmt.Errorf("producer: stream of %s: %w", subject, err)
		}
		if p.stream, err = p.js.Stream(ctx, name); err != nil {
			return fmt.Errorf("producer: stream %s: %w", name, err)
		}
	}
	info, err := p.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("producer: stream %s: %w", p.stream.CachedInfo().Config.Name, err)
	}
	p.next, p.known = info.State.LastSeq, true
	return nil
}

// wrongLastSequence reports whether err is the stream refusing a message
// whose expected last sequence is not its own.
func wrongLastSequence(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// ack waits for batch b's acknowledgements, at most the JetStream
// context's default timeout.
func (p *Pipeline) ack(ctx context.Context, b *sentBatch) error {
	if b.got {
		return b.answer
	}
	t := time.NewTimer(p.ackTimeout)
	defer t.Stop()
	for !b.got {
		// The futures' channels deliver once: what they said is kept.
		f := b.acks[b.heard]
		select {
		case a := <-f.Ok():
			b.hear(b.checkAck(a), nil)
		case err := <-f.Err():
			b.hear(nil, b.checkErr(err))
		case <-t.C:
			return fmt.Errorf("producer: no acknowledgement of batch %s within %s", b.name(), p.ackTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return b.answer
}

// poll reads, without waiting, the acknowledgements that have arrived,
// and reports whether the batch has its answer.
func (b *sentBatch) poll() bool {
	for !b.got {
		f := b.acks[b.heard]
		select {
		case a := <-f.Ok():
			b.hear(b.checkAck(a), nil)
		case err := <-f.Err():
			b.hear(nil, b.checkErr(err))
		default:
			return false
		}
	}
	return true
}

// hear takes the next acknowledgement: the batch has its answer at the
// first error, or once every message is acknowledged.
func (b *sentBatch) hear(ackErr, err error) {
	if err == nil {
		err = ackErr
	}
	if err != nil {
		b.got, b.answer = true, err
		return
	}
	b.heard++
	b.got = b.heard == len(b.acks)
}

// name names the batch in errors: its ID, or its first message's.
func (b *sentBatch) name() string {
	if b.id != "" {
		return b.id
	}
	return b.msgs[0].Header.Get(jetstream.MsgIDHeader)
}

// failed is the message ID of a plain batch's message that was refused:
// the first not acknowledged.
func (b *sentBatch) failed() string {
	return b.msgs[min(b.heard, len(b.msgs)-1)].Header.Get(jetstream.MsgIDHeader)
}

func (b *sentBatch) checkAck(a *jetstream.PubAck) error {
	if a == nil || a.Stream == "" {
		return fmt.Errorf("%w for batch %s of %d", jetstreamext.ErrInvalidBatchAck, b.name(), len(b.msgs))
	}
	b.seq = a.Sequence
	return nil
}

func (b *sentBatch) checkErr(err error) error {
	if errors.Is(err, nats.ErrNoResponders) {
		return jetstream.ErrNoStreamResponse
	}
	return err
}
