package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/jsapi"
)

// Input is one partition an operator reads: a subject of a stream, read
// from the message after Position.
type Input struct {
	// Name identifies the input in state, e.g. "ingress/3" or "deduped/0".
	Name string
	// Partition is the partition number within its stream.
	Partition int
	Stream    string
	Subject   string
	// After is the last stream sequence already processed; reading starts
	// at After+1.
	After uint64
	// Clear is a stream sequence at or past After through which the
	// subject is known to hold nothing more to read (state.Position.Clear);
	// 0 when unknown.
	Clear uint64
	// Positioned says the input has a committed position, even one at 0:
	// OpenReader refuses one whose stream removed what lay past it
	// (TrimmedError). An input without begins where its stream begins.
	Positioned bool
	// Frames marks a weir edge: its messages are frames, whose headers the
	// reader parses (Delivery.Frame). On any other input — an ingress
	// stream, written by producers — headers named like weir's mean
	// nothing to weir and are never read as frame headers.
	Frames bool
	// Until, when set, is the last stream sequence the input reads (a
	// bounded replay): after it — at the first message past it, or after
	// the last message the subject holds — the reader delivers one End
	// delivery and no more.
	Until uint64
	// Pull is how many messages the pull consumer buffers in the client,
	// at most FetchBatch; 0 means FetchBatch. (A byte limit on pulls is
	// not used: nats.go counts a pull cut short by bytes as if it were
	// whole, and its buffer overflows.)
	Pull int
}

// Delivery is one message read from an input.
type Delivery struct {
	Input *Input
	Msg   jetstream.Msg
	// Seq is the message's stream sequence.
	Seq uint64
	// Delivered is how many times JetStream has delivered it.
	Delivered uint64
	// Pending is how many messages of the input the consumer had not yet
	// delivered: the input's lag.
	Pending uint64
	// Stored is when the broker stored the message.
	Stored time.Time
	// Records is how many records it carries: a frame's Weir-Records
	// header, 1 for any other message.
	Records int64
	// Frame is what a frame's headers say, parsed once here; nil for a
	// message of an input without frames, and for an edge message whose
	// frame headers are missing or malformed (the runtime refuses it).
	Frame *FrameHeader
	// Size is the message's bytes, payload and headers, as the reader's
	// byte budget counts them.
	Size int64
	// End marks the end of a bounded input (Input.Until): no message, and
	// nothing of the input after it.
	End bool

	budget *budget
}

// Ack acknowledges the message — and, as the consumers acknowledge all
// (AckAllPolicy), every message of its input delivered before it — and
// gives its bytes back to the reader's budget. Call Ack or Release once
// per delivery, when the delivery is done with.
func (d Delivery) Ack() error {
	d.Release()
	if d.End {
		return nil
	}
	return d.Msg.Ack()
}

// Release gives the delivery's bytes back to the reader's budget without
// acknowledging it: for a delivery a later Ack of its input acknowledges.
func (d Delivery) Release() {
	if d.budget != nil {
		d.budget.give(d.Size)
	}
}

// FrameHeader is what a frame's headers say about it.
type FrameHeader struct {
	// Producer is the writing instance, e.g. "dedup/0".
	Producer   string
	Generation uint64
	Epoch      uint64
	// Seq is the frame's sequence on its partition, per writer and
	// generation.
	Seq     uint64
	Records int64
}

// Writer names the writer's incarnation, "producer@g<generation>": a new
// generation's sequences are tracked apart from its predecessor's.
func (h *FrameHeader) Writer() string {
	return h.Producer + "@g" + strconv.FormatUint(h.Generation, 10)
}

// ParseFrameHeader reads a frame's headers; ok is false when any is
// missing or malformed.
func ParseFrameHeader(h nats.Header) (fh *FrameHeader, ok bool) {
	fh = &FrameHeader{Producer: h.Get(HeaderProducer)}
	var err error
	num := func(name string) uint64 {
		v, perr := strconv.ParseUint(h.Get(name), 10, 64)
		if perr != nil && err == nil {
			err = perr
		}
		return v
	}
	fh.Generation = num(HeaderGeneration)
	fh.Epoch = num(HeaderEpoch)
	fh.Seq = num(HeaderFrameSeq)
	records := num(HeaderRecords)
	if err != nil || fh.Producer == "" || records == 0 || records > math.MaxInt32 {
		return nil, false
	}
	fh.Records = int64(records)
	return fh, true
}

// ReaderConfig configures a Reader.
type ReaderConfig struct {
	// Consumer prefixes the durable consumer names, one per input.
	Consumer string
	Inputs   []Input
	// FetchBatch bounds the messages one pull requests.
	FetchBatch int
	// MaxAckPending bounds unacknowledged messages per input.
	MaxAckPending int
	// MaxBytes bounds the bytes of deliveries handed out on C and not yet
	// acknowledged (Delivery.Ack): the reader hands out no more until some
	// are, except that it always hands out one when none are held, however
	// large. Zero means no bound.
	MaxBytes int64
	// AckWait is how long JetStream waits for an ack before redelivering.
	// Redeliveries of processed messages are dropped by position, so a
	// generous value only delays recovery of a stuck step.
	AckWait time.Duration
	// Log, when set, is told of a consumer the server started elsewhere
	// than asked (createConsumer).
	Log *slog.Logger
}

// Reader pulls from several input partitions into one bounded channel.
// It owns one goroutine per input; Close stops and waits for them.
type Reader struct {
	js     jetstream.JetStream
	gates  map[string]*gate
	budget *budget
	out    chan Delivery
	errc   chan error
	cancel context.CancelFunc
	wg     sync.WaitGroup
	iters  []jetstream.MessagesContext
	starts map[string]uint64
}

// Started returns, per input, the sequence before the first its consumer
// reads: the input's position, or the sequence before the stream's first
// when retention has removed everything up to it. An input that had no
// position begins there: nothing before it was the input's to read.
func (r *Reader) Started() map[string]uint64 { return r.starts }

// ConsumerPrefix is what the durable consumers of an operator instance are
// named after: ConsumerName(ConsumerPrefix(...), input).
func ConsumerPrefix(pipeline, operator, instance string) string {
	return pipeline + "_" + operator + "_" + instance
}

// ConsumerName is the durable consumer an operator uses for one input.
func ConsumerName(prefix, input string) string {
	r := strings.NewReplacer(".", "_", "/", "_", "*", "_", ">", "_", " ", "_")
	return r.Replace(prefix + "_" + input)
}

// OpenReader creates one pull consumer per input, starting after the
// input's position, and starts reading. Consumers are recreated at every
// open: the position in the operator's state, not the consumer's ack floor,
// says where reading resumes.
func OpenReader(ctx context.Context, js jetstream.JetStream, c ReaderConfig) (*Reader, error) {
	if c.FetchBatch <= 0 || c.MaxAckPending <= 0 {
		return nil, fmt.Errorf("edge: reader bounds must be positive (fetch %d, max ack pending %d)", c.FetchBatch, c.MaxAckPending)
	}
	if c.AckWait == 0 {
		c.AckWait = 2 * time.Minute
	}
	rctx, cancel := context.WithCancel(context.Background())
	r := &Reader{
		js:     js,
		out:    make(chan Delivery, c.FetchBatch),
		errc:   make(chan error, len(c.Inputs)),
		cancel: cancel,
		gates:  map[string]*gate{},
	}
	if c.MaxBytes > 0 {
		r.budget = newBudget(c.MaxBytes)
	}
	var conses []jetstream.Consumer
	var trimmed []Trimmed
	r.starts = make(map[string]uint64, len(c.Inputs))
	for i := range c.Inputs {
		in := &c.Inputs[i]
		st, err := js.Stream(ctx, in.Stream)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("edge: input %s: stream %s: %w", in.Name, in.Stream, err)
		}
		if last := st.CachedInfo().State.LastSeq; in.Positioned && in.After > last {
			r.Close()
			return nil, fmt.Errorf("edge: input %s: stream %s's last sequence %d is below the input's position %d: the stream was recreated, and reading on would skip its first %d messages; restore a snapshot taken since, or remove the instance's state to read the new stream from its start",
				in.Name, in.Stream, last, in.After, in.After-last)
		}
		name := ConsumerName(c.Consumer, in.Name)
		if err := deleteConsumer(ctx, st, name); err != nil {
			r.Close()
			return nil, fmt.Errorf("edge: input %s: reset consumer %s: %w", in.Name, name, err)
		}
		cc := jetstream.ConsumerConfig{
			Durable:       name,
			FilterSubject: in.Subject,
			// Acknowledgements only release flow control (the position
			// in the operator's state decides where reading resumes), so
			// one per input per step does: it acknowledges all before it,
			// and the broker updates the consumer's state once.
			AckPolicy:         jetstream.AckAllPolicy,
			AckWait:           c.AckWait,
			MaxAckPending:     c.MaxAckPending,
			MaxRequestBatch:   c.FetchBatch,
			InactiveThreshold: 24 * time.Hour,
			DeliverPolicy:     jetstream.DeliverAllPolicy,
			// On a weir edge the broker need not keep the consumer's
			// state on disk: it is made again at every open from the
			// committed position, so a state the broker loses costs
			// nothing, and a file-backed one is written and synced up to
			// ten times a second per consumer. An ingress's consumers
			// stay on disk: admission (internal/admission) measures a
			// pipeline's lag by them, and a stopped instance's consumer,
			// which lingers, must still count it after the broker
			// restarts.
			MemoryStorage: in.Frames,
		}
		if in.After > 0 {
			cc.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
			cc.OptStartSeq = in.After + 1
		}
		cons, err := createConsumer(ctx, st, cc, c.Log)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("edge: input %s: create consumer %s: %w", in.Name, name, err)
		}
		conses = append(conses, cons)
		// The server starts the consumer at the position's next sequence
		// or, when the stream no longer holds it, at the stream's first:
		// what lies between, retention removed before it was read.
		started := cons.CachedInfo().Delivered.Stream
		r.starts[in.Name] = started
		if t, ok := trimmedOf(*in, started+1, st.CachedInfo()); ok {
			trimmed = append(trimmed, t)
		}
	}
	if len(trimmed) > 0 {
		r.Close()
		return nil, &TrimmedError{Inputs: trimmed}
	}
	var pumped []pumpedInput
	for i, cons := range conses {
		in := &c.Inputs[i]
		if in.Until > 0 && (in.After >= in.Until || cons.CachedInfo().NumPending == 0) {
			// Nothing more of a bounded input to read.
			r.wg.Add(1)
			go r.end(rctx, in)
			continue
		}
		pull := c.FetchBatch
		if in.Pull > 0 {
			pull = min(in.Pull, c.FetchBatch)
		}
		it, err := cons.Messages(jetstream.PullMaxMessages(pull), jetstream.PullHeartbeat(pullHeartbeat))
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("edge: input %s: pull: %w", in.Name, err)
		}
		r.iters = append(r.iters, it)
		g := newGate()
		r.gates[in.Name] = g
		r.wg.Add(1)
		go r.pump(rctx, in, cons, it, g, cons.CachedInfo().Delivered.Consumer)
		pumped = append(pumped, pumpedInput{in, cons})
	}
	if nc := js.Conn(); nc != nil && len(pumped) > 0 {
		ch := nc.StatusChanged(nats.CONNECTED)
		r.wg.Add(1)
		go r.watchReconnects(rctx, nc, ch, pumped)
	}
	return r, nil
}

type pumpedInput struct {
	in   *Input
	cons jetstream.Consumer
}

// watchReconnects fails the reader at once when a reconnect finds one of
// its consumers gone. Readers keep their edges' consumers in memory
// (ConsumerConfig.MemoryStorage), so a broker that restarts forgets them,
// and their pulls would go unanswered until two heartbeats had passed.
func (r *Reader) watchReconnects(ctx context.Context, nc *nats.Conn, ch chan nats.Status, pumped []pumpedInput) {
	defer r.wg.Done()
	defer nc.RemoveStatusListener(ch)
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ch:
			if !ok {
				return
			}
		}
		for _, p := range pumped {
			if consumerGone(ctx, p.cons) {
				r.Fail(fmt.Errorf("edge: input %s: the broker no longer holds consumer %s after a reconnect: it restarted, and readers keep their edges' consumers in memory",
					p.in.Name, p.cons.CachedInfo().Name))
				return
			}
		}
	}
}

// consumerGone tells whether the broker says cons does not exist, asking
// a few times while a restarted broker's JetStream is not answering yet.
// Any doubt answers no: the pull's heartbeats still catch a consumer that
// is gone.
func consumerGone(ctx context.Context, cons jetstream.Consumer) bool {
	for range 10 {
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := cons.Info(ictx)
		cancel()
		switch {
		case err == nil:
			return false
		case errors.Is(err, jetstream.ErrConsumerNotFound):
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
	return false
}

// createConsumer creates the consumer cc on st, whose info (CachedInfo)
// was read before, and makes sure it is new and starts where cc asks.
//
// nats-server 2.15.2 does not always: killed between the two files that
// register a consumer (meta.inf, then meta.sum) or while deleting one, it
// leaves the consumer's directory with its state (o.dat), and at its next
// start skips it, unregistered. A consumer created under that name — a
// delete finds nothing to delete — takes the old state and starts where
// the old one had read to, whatever it was asked (consumer.go reads a
// store that HasState instead of selecting the start), with the old one's
// deliveries still awaiting acknowledgement. Past the position, weir would
// take the gap for retention and refuse to read; with deliveries pending,
// the input would wait out the ack wait. A consumer that has delivered,
// has acknowledgements or starts past where the stream says it must —
// the asked sequence, or the stream's first when that is later — is
// deleted, which now removes its directory, and created again. A start
// before that is no harm: nothing lies before a stream's first, and what
// an input processed is dropped by position; a cluster's consumer may
// choose its start from a replica that has expired less than the stream's
// leader. Readers' consumers of an ingress are file-backed; those of
// edges are kept in memory and leave no directory, but a server can still
// hold one under such a name, left by an earlier weir or another client.
func createConsumer(ctx context.Context, st jetstream.Stream, cc jetstream.ConsumerConfig, log *slog.Logger) (jetstream.Consumer, error) {
	start := func(info *jetstream.StreamInfo) uint64 {
		return max(cc.OptStartSeq, info.State.FirstSeq, 1)
	}
	low := start(st.CachedInfo())
	for attempt := 1; ; attempt++ {
		cons, err := st.CreateConsumer(ctx, cc)
		if err != nil {
			return nil, err
		}
		ci := cons.CachedInfo()
		got := ci.Delivered.Stream + 1
		fresh := ci.Delivered.Consumer == 0 && ci.AckFloor.Consumer == 0 && ci.NumAckPending == 0 && ci.NumRedelivered == 0
		if fresh && got <= low {
			return cons, nil
		}
		if fresh {
			// Retention may have moved the stream's first sequence since
			// it was read: the consumer starts at most there.
			info, err := st.Info(ctx)
			if err != nil {
				return nil, err
			}
			if got <= start(info) {
				return cons, nil
			}
		}
		if attempt == 3 {
			return nil, fmt.Errorf("asked to start at %d, the server started it at %d with %d deliveries, three times: it keeps a stale consumer state under the name (nats-server 2.15.2 after a kill)",
				low, got, ci.Delivered.Consumer)
		}
		if log != nil {
			log.Warn("the server gave a new consumer the state of an old one under its name; creating it again",
				"consumer", cc.Durable, "asked", low, "started", got, "delivered", ci.Delivered.Consumer, "ack_pending", ci.NumAckPending, "attempt", attempt)
		}
		if err := deleteConsumer(ctx, st, cc.Durable); err != nil {
			return nil, err
		}
	}
}

// While a pull request waits, the broker sends a heartbeat every
// pullHeartbeat. A pull that hears nothing for two heartbeats is gone
// (ErrNoHeartbeat): the pump stops, and the runtime reopens the input at
// its committed position. With nats.go's default of 15 s such an input
// stood still for 30 s: in about one `weir bench nexmark` run of eight (q0
// and q5, b-preloaded), one input's pull went silent, no delivery dropped,
// though its stream held more, and 100,000 events took 33 s instead of 5.
// The cause is not found yet (issue #31's notes); the reopen is the cure,
// and now comes after 4 s.
const pullHeartbeat = 2 * time.Second

// silentState describes a consumer whose pull went silent, for the log
// line of the reopen: what the broker says it delivered, has pending and
// waits for.
func silentState(ctx context.Context, cons jetstream.Consumer, last uint64) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ci, err := cons.Info(ctx)
	if err != nil {
		return fmt.Sprintf("last delivery %d; consumer info: %v", last, err)
	}
	return fmt.Sprintf("last delivery %d; the broker: delivered %d (stream %d), ack floor %d, %d unacknowledged, %d pending, %d pulls waiting",
		last, ci.Delivered.Consumer, ci.Delivered.Stream, ci.AckFloor.Consumer, ci.NumAckPending, ci.NumPending, ci.NumWaiting)
}

// pump delivers the messages of one input. delivered is the consumer
// sequence of the consumer's last delivery when it was made: 0 for the
// new consumer every reader makes.
func (r *Reader) pump(ctx context.Context, in *Input, cons jetstream.Consumer, it jetstream.MessagesContext, g *gate, delivered uint64) {
	defer r.wg.Done()
	last := delivered  // consumer sequence of the last delivery
	var pending uint64 // messages left to deliver after the last delivery
	var prevSeq uint64 // stream sequence of the last delivery
	sent := false
	for {
		msg, err := it.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil {
				return
			}
			if errors.Is(err, jetstream.ErrNoHeartbeat) {
				err = fmt.Errorf("%w (%s)", err, silentState(ctx, cons, last))
			}
			select {
			case r.errc <- fmt.Errorf("edge: input %s: %w", in.Name, err):
			default:
			}
			return
		}
		meta, err := msg.Metadata()
		if err != nil {
			select {
			case r.errc <- fmt.Errorf("edge: input %s: metadata: %w", in.Name, err):
			default:
			}
			return
		}
		// Every delivery advances the consumer sequence by one. A jump
		// means the client dropped deliveries — more arrived than the
		// iterator buffers, as when it re-pulls after a reconnect while
		// its earlier pull is still served. Delivering what follows would
		// move the input's position past the dropped ones: stop instead,
		// and the runtime reopens the input at its committed position.
		// The first delivery too: a broker killed after it recorded a
		// delivery and before it sent it resumes the consumer past it,
		// and the message — redelivered only after the ack wait, below
		// the position by then — would be skipped (weir chaos, q7
		// unaligned, seed 26: a frame of 17 bids lost).
		if meta.Sequence.Consumer != last+1 {
			select {
			case r.errc <- fmt.Errorf("edge: input %s: delivery %d follows %d: deliveries were dropped", in.Name, meta.Sequence.Consumer, last):
			default:
			}
			return
		}
		last = meta.Sequence.Consumer
		// The server counts what the consumer has still to deliver: one
		// less per first delivery, one more per arrival, unchanged by a
		// redelivery. Fewer than that means messages of the input may have
		// been removed — by retention, a purge or a delete — before they
		// were delivered. It is a suspicion, not a proof: a clustered
		// consumer whose leader moved counts from the new leader's replica
		// of the stream, which may not yet hold all the old one counted.
		// The stream's state, from its leader, decides (removedSince); a
		// removal stops the reader before the first delivery past it, with
		// a TrimmedError counting it. (Arrivals can hide removals from
		// this count; the runtime's own checks do not rely on it alone.)
		if sent && meta.NumPending+1 < pending && r.removedSince(ctx, in, prevSeq) {
			select {
			case r.errc <- &TrimmedError{Inputs: []Trimmed{{Input: in.Name, Partition: in.Partition, Stream: in.Stream, Subject: in.Subject,
				Committed: in.After, Clear: prevSeq, Removed: pending - 1 - meta.NumPending, Exact: true, Ahead: true}}}:
			default:
			}
			return
		}
		pending, sent, prevSeq = meta.NumPending, true, meta.Sequence.Stream
		d := Delivery{Input: in, Msg: msg, Seq: meta.Sequence.Stream, Delivered: meta.NumDelivered,
			Pending: meta.NumPending, Stored: meta.Timestamp, Records: 1, Size: msgSize(msg), budget: r.budget}
		if in.Until > 0 && d.Seq > in.Until {
			r.wg.Add(1)
			r.end(ctx, in)
			return
		}
		if in.Frames {
			if fh, ok := ParseFrameHeader(msg.Headers()); ok {
				d.Frame, d.Records = fh, fh.Records
			}
		}
		if !g.wait(ctx) || !r.budget.take(ctx, d.Size) {
			return
		}
		select {
		case r.out <- d:
		case <-ctx.Done():
			return
		}
		if in.Until > 0 && meta.NumPending == 0 {
			// The subject holds nothing more: every message up to Until,
			// which the stream held when the replay began, was read.
			r.wg.Add(1)
			r.end(ctx, in)
			return
		}
	}
}

// removedSince reports whether the stream of in has removed a message
// after seq, asking it until it answers; false when ctx ends.
func (r *Reader) removedSince(ctx context.Context, in *Input, seq uint64) bool {
	for attempt := 1; ; attempt++ {
		info, err := r.streamInfo(ctx, in.Stream)
		if err == nil {
			return removedAfter(info, seq)
		}
		t := time.NewTimer(jsapi.Backoff(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// streamInfo reads a stream's state with the sequences deleted from it.
func (r *Reader) streamInfo(ctx context.Context, stream string) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := r.js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	return st.Info(ctx, jetstream.WithDeletedDetails(true))
}

// removedAfter reports whether the stream that info describes, read with
// its deleted sequences (jetstream.WithDeletedDetails), may have removed a
// message stored after seq: it begins past seq+1, or a message after seq
// was deleted. The message may be another subject's; it is never assumed
// to be.
func removedAfter(info *jetstream.StreamInfo, seq uint64) bool {
	st := info.State
	if st.FirstSeq > seq+1 {
		return true
	}
	if st.NumDeleted > 0 && len(st.Deleted) == 0 {
		return true // deleted, but not said where
	}
	for _, d := range st.Deleted {
		if d > seq {
			return true
		}
	}
	return false
}

// end delivers the End of a bounded input.
func (r *Reader) end(ctx context.Context, in *Input) {
	defer r.wg.Done()
	select {
	case r.out <- Delivery{Input: in, End: true}:
	case <-ctx.Done():
	}
}

// msgSize is what a message weighs in the byte budget: its payload and
// its headers.
func msgSize(msg jetstream.Msg) int64 {
	n := len(msg.Data())
	for k, vs := range msg.Headers() {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return int64(n)
}

// Held reports the bytes of deliveries handed out and not yet
// acknowledged, and the bound on them (0: none).
func (r *Reader) Held() (held, bound int64) {
	if r.budget == nil {
		return 0, 0
	}
	r.budget.mu.Lock()
	defer r.budget.mu.Unlock()
	return r.budget.mu.held, r.budget.max
}

// budget counts the bytes a reader has handed out and not had back.
type budget struct {
	max int64
	mu  struct {
		sync.Mutex
		held  int64
		freed chan struct{} // closed, and renewed, when bytes come back
	}
}

func newBudget(max int64) *budget {
	b := &budget{max: max}
	b.mu.freed = make(chan struct{})
	return b
}

// take waits until n more bytes fit — or none are held — and takes them;
// false if ctx ends first. A nil budget takes everything at once.
func (b *budget) take(ctx context.Context, n int64) bool {
	if b == nil {
		return true
	}
	for {
		b.mu.Lock()
		if b.mu.held == 0 || b.mu.held+n <= b.max {
			b.mu.held += n
			b.mu.Unlock()
			return true
		}
		freed := b.mu.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return false
		}
	}
}

func (b *budget) give(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.held = max(0, b.mu.held-n)
	close(b.mu.freed)
	b.mu.freed = make(chan struct{})
}

// SetPaused stops or resumes delivering an input's messages. A paused
// input holds at most one message in the reader, plus what the pull
// consumer has buffered (bounded by the fetch batch); the server holds the
// rest, so memory stays bounded however long the pause.
func (r *Reader) SetPaused(input string, paused bool) {
	if g := r.gates[input]; g != nil {
		g.set(paused)
	}
}

// Paused reports whether an input is paused.
func (r *Reader) Paused(input string) bool {
	g := r.gates[input]
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.paused
}

// gate holds a pump while its input is paused.
type gate struct {
	mu struct {
		sync.Mutex
		paused bool
		resume chan struct{}
	}
}

func newGate() *gate {
	g := &gate{}
	g.mu.resume = make(chan struct{})
	return g
}

func (g *gate) set(paused bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.paused && !paused {
		close(g.mu.resume)
		g.mu.resume = make(chan struct{})
	}
	g.mu.paused = paused
}

// wait returns once the gate is open, or false if ctx ends first.
func (g *gate) wait(ctx context.Context) bool {
	for {
		g.mu.Lock()
		paused, resume := g.mu.paused, g.mu.resume
		g.mu.Unlock()
		if !paused {
			return true
		}
		select {
		case <-resume:
		case <-ctx.Done():
			return false
		}
	}
}

// C delivers messages from all inputs. Messages of one input arrive in
// stream order, except redeliveries.
func (r *Reader) C() <-chan Delivery { return r.out }

// Err delivers the first error of any input; the reader is then broken and
// should be closed and reopened.
func (r *Reader) Err() <-chan error { return r.errc }

// Close stops reading and waits for the reader's goroutines.
func (r *Reader) Close() {
	for _, it := range r.iters {
		it.Stop()
	}
	r.cancel()
	r.wg.Wait()
}

// Fail reports err on Err, as an input failing would.
func (r *Reader) Fail(err error) {
	select {
	case r.errc <- err:
	default:
	}
}
