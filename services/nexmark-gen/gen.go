package nexmarkgen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/ingress"
	"github.com/weirflow/weir/pkg/producer"
	"github.com/weirflow/weir/pkg/telemetry"
)

// Defaults applied to zero fields of a Config.
const (
	DefaultStream        = "NEXMARK"
	DefaultSubjectPrefix = "nexmark.events"
	DefaultMaxInFlight   = 256
	DefaultAckTimeout    = 10 * time.Second
	// DuplicateWindow is the stream's Nats-Msg-Id deduplication window
	// when Config.DuplicateWindow is 0 (shortened to Retention when that
	// is shorter): a contract's ingress.duplicate_window when absent.
	DuplicateWindow = ingress.DuplicateWindow
)

// HeaderNextStart carries, on the last message of each batch a Sequenced
// generator stores, the publish position after that message.
const HeaderNextStart = "Weir-Next-Start"

// DupSuffix ends the Nats-Msg-Id of an injected duplicate.
const DupSuffix = "-dup"

// ErrStreamMismatch is returned by EnsureStream when a stream of the
// configured name exists but does not capture the configured subjects.
var ErrStreamMismatch = errors.New("nexmarkgen: existing stream does not capture the subjects")

// Config configures the publisher.
type Config struct {
	// NATSURL is the server to connect to (used by Run only).
	NATSURL string
	// Auth is who the generator is to NATS, and the TLS it speaks (used
	// by Run only).
	Auth natsconn.Auth
	// Stream is the ingress stream; SubjectPrefix its subject prefix:
	// partition p is published to "<SubjectPrefix>.<p>".
	Stream        string
	SubjectPrefix string
	// Streams is how many streams the partitions are placed over, as a
	// contract's ingress.streams places them (contracts.Ingress.StreamOf):
	// 0 and 1 are the one stream Stream, more are Stream_<p mod Streams>.
	// Each stream's events go in batches of their own, each stream with
	// batches in flight (producer.Split); the count Publish returns is
	// still what is stored in a row from Start, over every stream.
	Streams int
	// Retention is the stream's MaxAge; 0 keeps messages until other limits.
	Retention time.Duration
	// DuplicateWindow is how long the stream EnsureStream creates
	// remembers message IDs (0: DuplicateWindow): a re-publish within it
	// is dropped. The broker holds each remembered ID in memory.
	DuplicateWindow time.Duration
	// Replicas of the stream when EnsureStream creates it; 0 means 1. A
	// three-node cluster uses 3.
	Replicas int
	// Gen is the generated stream.
	Gen nexmark.Config
	// Rate is the publish rate in messages per wall-clock second; 0 is as
	// fast as acknowledgements allow.
	Rate float64
	// Start is the publish position to begin at: the count of messages a
	// previous run had acknowledged (see nexmark.Generator.Seek).
	Start uint64
	// Count is how many messages to publish, duplicates included; 0 is
	// unbounded (or until a bounded Gen ends).
	Count uint64
	// Producer names this producer in headers and message IDs; empty is
	// "nexmark-<seed>".
	Producer string
	// Sequenced publishes by stream sequence instead of by message ID
	// (producer.NewSequenced): messages carry no Nats-Msg-Id, each
	// batch states the stream sequence it follows and is sent again after
	// other writers' messages when they land first, and the last message
	// of each batch carries the position after it (Weir-Next-Start), so
	// Start must be what Resume finds. The broker then remembers no IDs and
	// stores more events a second. The stream must allow atomic batches.
	Sequenced bool
	// Batch is the most messages stored in one atomic batch; 0 is
	// producer.MaxBatch, the server's default limit. A server configured
	// for larger batches takes more, with fewer fsyncs per event.
	Batch int
	// MaxInFlight bounds unacknowledged publishes when messages go one by
	// one (a stream without atomic batches, or a re-publish); AckTimeout
	// bounds the wait for a batch or a message to be stored.
	MaxInFlight int
	AckTimeout  time.Duration
	// Tracer, when set, starts a span per published event and puts the
	// trace context of sampled ones in the message's traceparent header, so
	// an event's path through the pipeline is one trace.
	Tracer trace.Tracer
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = DefaultSubjectPrefix
	}
	if c.Producer == "" {
		c.Producer = "nexmark-" + strconv.FormatInt(c.Gen.Seed, 10)
	}
	if c.Batch == 0 {
		c.Batch = producer.MaxBatch
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	c.Gen = c.Gen.WithDefaults()
	return c
}

// Validate reports whether c, with defaults applied, can be used.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	if strings.ContainsAny(c.Stream, " \t\r\n.*>/\\") {
		errs = append(errs, fmt.Errorf("nexmarkgen: stream name %q has a space, '.', '*', '>' or slash", c.Stream))
	}
	for _, tok := range strings.Split(c.SubjectPrefix, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
			errs = append(errs, fmt.Errorf("nexmarkgen: subject prefix %q must be literal, non-empty tokens", c.SubjectPrefix))
			break
		}
	}
	if c.Retention < 0 {
		errs = append(errs, fmt.Errorf("nexmarkgen: retention %v is negative", c.Retention))
	}
	if c.DuplicateWindow < 0 {
		errs = append(errs, fmt.Errorf("nexmarkgen: duplicate window %v is negative", c.DuplicateWindow))
	}
	if c.Streams < 0 || c.Streams > max(c.Gen.Partitions, 1) {
		errs = append(errs, fmt.Errorf("nexmarkgen: streams %d must be 0 to the %d partitions", c.Streams, c.Gen.Partitions))
	}
	if c.Sequenced && c.Streams > 1 {
		errs = append(errs, fmt.Errorf("nexmarkgen: publishing by sequence over %d streams: a sequenced producer resumes from one stream's end; publish with message IDs", c.Streams))
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("nexmarkgen: replicas %d must be 1 to 5", c.Replicas))
	}
	if math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate < 0 {
		errs = append(errs, fmt.Errorf("nexmarkgen: rate %v must be finite and not negative", c.Rate))
	}
	if strings.ContainsAny(c.Producer, " \t\r\n") {
		errs = append(errs, fmt.Errorf("nexmarkgen: producer %q contains white space", c.Producer))
	}
	if c.Batch < 0 {
		errs = append(errs, fmt.Errorf("nexmarkgen: batch %d is negative", c.Batch))
	}
	if c.MaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("nexmarkgen: max in flight %d is negative", c.MaxInFlight))
	}
	if c.AckTimeout < 0 {
		errs = append(errs, fmt.Errorf("nexmarkgen: ack timeout %v is negative", c.AckTimeout))
	}
	if err := c.Gen.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Subject returns the subject of partition p.
func (c Config) Subject(p int) string {
	return c.WithDefaults().SubjectPrefix + "." + strconv.Itoa(p)
}

// MsgID returns the Nats-Msg-Id of a generated message.
func MsgID(producer string, m nexmark.Message) string {
	id := producer + "-" + strconv.FormatUint(m.Index, 10)
	if m.Duplicate {
		id += DupSuffix
	}
	return id
}

// ingress is the ingress the generator writes, as a contract declares it:
// its streams and their partitions.
func (c Config) ingress() contracts.Ingress {
	c = c.WithDefaults()
	return contracts.Ingress{Stream: c.Stream, SubjectPrefix: c.SubjectPrefix, Partitions: c.Gen.Partitions, Streams: c.Streams}
}

// StreamConfig returns the configuration of the i-th stream EnsureStream
// creates: the one stream, capturing <prefix>.*, or over several
// streams Stream_<i>, capturing the subjects of its partitions.
func StreamConfig(cfg Config, i int) jetstream.StreamConfig {
	cfg = cfg.WithDefaults()
	dup := cmp.Or(cfg.DuplicateWindow, DuplicateWindow)
	if cfg.Retention > 0 {
		dup = min(dup, cfg.Retention)
	}
	in := cfg.ingress()
	subjects := []string{cfg.SubjectPrefix + ".*"}
	if in.StreamCount() > 1 {
		subjects = nil
		for _, p := range in.PartitionsIn(i) {
			subjects = append(subjects, in.Subject(p))
		}
	}
	return jetstream.StreamConfig{
		Name:       in.StreamOf(i),
		Subjects:   subjects,
		Storage:    jetstream.FileStorage,
		Retention:  jetstream.LimitsPolicy,
		MaxAge:     cfg.Retention,
		Duplicates: dup,
		Replicas:   max(cfg.Replicas, 1),
		// Publish stores atomic batches: one fsync per batch.
		AllowAtomicPublish: true,
	}
}

// EnsureStream creates the ingress streams, or returns the existing ones
// of their names if they capture the configured subjects. An existing
// stream's other settings (retention, storage, replicas) are left as its
// owner set them.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg Config) ([]jetstream.Stream, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	out := make([]jetstream.Stream, cfg.ingress().StreamCount())
	for i := range out {
		s, err := ensureStream(ctx, js, StreamConfig(cfg, i))
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) (jetstream.Stream, error) {
	// Looked up first: a producer's credentials allow no creation where
	// weir provision made the stream.
	s, err := js.Stream(ctx, sc.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if s, err = js.CreateStream(ctx, sc); err == nil {
			return s, nil
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil, fmt.Errorf("nexmarkgen: create stream %s (weir provision, run with the pipeline administrator's credentials, creates it): %w", sc.Name, err)
		}
		s, err = js.Stream(ctx, sc.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("nexmarkgen: look up stream %s: %w", sc.Name, err)
	}
	for _, want := range sc.Subjects {
		if !slices.ContainsFunc(s.CachedInfo().Config.Subjects, func(have string) bool { return covers(have, want) }) {
			return nil, fmt.Errorf("%w: stream %s has subjects %v, need %s",
				ErrStreamMismatch, sc.Name, s.CachedInfo().Config.Subjects, want)
		}
	}
	return s, nil
}

// Unbatched describes why an existing stream stores the generator's events
// one fsync at a time — it does not allow atomic batches — and how to fix
// it; "" when it allows them. EnsureStream leaves a stream it did not create
// as its owner set it, so this is said, not changed.
func Unbatched(s jetstream.Stream) string {
	c := s.CachedInfo().Config
	if c.AllowAtomicPublish {
		return ""
	}
	return fmt.Sprintf("stream %s does not allow atomic batches, so every event is stored with its own fsync (a few thousand a second); allow them with: nats stream edit %s --allow-batch", c.Name, c.Name)
}

// ResumeScan bounds how many messages Resume reads back from the end of
// the stream.
const ResumeScan = 1_000_000

// Resume returns where a Sequenced generator of cfg's producer stopped:
// the Weir-Next-Start of its last message in the stream, found reading
// back from the stream's end past other writers' messages; 0 when the
// stream has never held a message of it. It fails when it cannot tell:
// the producer's last message was published with message IDs (a run
// without Sequenced), or carries no position (its batch's last message
// was deleted); messages before the stream's first were removed (by its
// retention or a purge) and the producer's may have been among them; or
// none of the last ResumeScan messages is the producer's.
func Resume(ctx context.Context, js jetstream.JetStream, cfg Config) (uint64, error) {
	cfg = cfg.WithDefaults()
	s, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		return 0, fmt.Errorf("nexmarkgen: look up stream %s: %w", cfg.Stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("nexmarkgen: stream %s: %w", cfg.Stream, err)
	}
	first, last := info.State.FirstSeq, info.State.LastSeq
	if last == 0 {
		return 0, nil
	}
	cannot := func(why string, args ...any) error {
		return fmt.Errorf("nexmarkgen: cannot tell where producer %s stopped in stream %s: %s; publish to a new stream, or name a new producer", cfg.Producer, cfg.Stream, fmt.Sprintf(why, args...))
	}
	for seq := last; seq >= max(first, 1) && info.State.Msgs > 0; seq-- {
		if last-seq == ResumeScan {
			return 0, cannot("none of its last %d messages is the producer's", ResumeScan)
		}
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("nexmarkgen: stream %s sequence %d: %w", cfg.Stream, seq, err)
		}
		if m.Header.Get(producer.Header) != cfg.Producer {
			continue
		}
		next := m.Header.Get(HeaderNextStart)
		switch {
		case next == "" && m.Header.Get(jetstream.MsgIDHeader) != "":
			return 0, cannot("its last message (sequence %d) was published with message IDs, which say nothing of where it stopped", seq)
		case next == "":
			return 0, cannot("its last message (sequence %d) carries no %s: the last message of its batch was deleted", seq, HeaderNextStart)
		}
		n, err := strconv.ParseUint(next, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("nexmarkgen: stream %s sequence %d: %s %q: %w", cfg.Stream, seq, HeaderNextStart, next, err)
		}
		return n, nil
	}
	if first > 1 || info.State.Msgs == 0 {
		return 0, cannot("the messages before sequence %d were removed (retention or a purge), and the producer's may have been among them", max(first, last+1))
	}
	return 0, nil
}

// covers reports whether subject filter f matches every subject that g does.
func covers(f, g string) bool {
	ft, gt := strings.Split(f, "."), strings.Split(g, ".")
	for k, tok := range ft {
		switch {
		case tok == ">":
			return k < len(gt)
		case k >= len(gt):
			return false
		case tok == "*":
			if gt[k] == ">" {
				return false
			}
		case tok != gt[k]:
			return false
		}
	}
	return len(ft) == len(gt)
}

// Publish publishes cfg.Count messages of the generated stream, starting at
// publish position cfg.Start, and returns how many were stored in a row
// from Start: a later run resumes at Start plus that count. progress, if
// not nil, is called with the same count after every stored batch. clock
// paces publishing to cfg.Rate.
//
// Messages go in atomic batches of up to cfg.Batch through a
// producer.Pipeline: one write and one fsync per batch, and the next batch
// is built while the last is written, so a SyncAlways stream takes tens of
// thousands of events a second. When the next message is not yet due,
// what is gathered is sent at once if no batch is in flight; while one is,
// the next batch grows until it is acknowledged or full (group commit), so
// a slow rate sends each message as it falls due and a fast one fills
// batches. On cancellation Publish stops generating, waits (at most
// AckTimeout) for the batches in flight, and returns the count with
// ctx.Err().
func Publish(ctx context.Context, js jetstream.JetStream, cfg Config, clock func() time.Time, progress func(published uint64)) (uint64, error) {
	if err := cfg.Validate(); err != nil {
		return 0, err
	}
	cfg = cfg.WithDefaults()
	g, err := nexmark.NewGenerator(cfg.Gen)
	if err != nil {
		return 0, err
	}
	g.Seek(cfg.Start)
	p := &publisher{cfg: cfg, in: cfg.ingress(), progress: progress, next: cfg.Start}
	if cfg.Sequenced {
		p.pipe = producer.NewSequenced(js, producer.Header)
		defer p.pipe.Close()
	} else {
		p.split = producer.NewSplit(js, p.in.StreamCount(), func(m *nats.Msg) int { return p.streamOf[m.Subject] }, cfg.Batch, 0, cfg.MaxInFlight)
		defer p.split.Close()
		p.streamOf = map[string]int{}
		for p0 := range cfg.Gen.Partitions {
			p.streamOf[cfg.Subject(p0)] = p0 % p.in.StreamCount()
		}
		p.unstored, p.dropped = make([][]uint64, p.in.StreamCount()), make([]int, p.in.StreamCount())
	}
	if cfg.Sequenced {
		at, err := Resume(ctx, js, cfg)
		if err != nil {
			return 0, err
		}
		if at != cfg.Start {
			return 0, fmt.Errorf("nexmarkgen: producer %s would start at position %d, and stream %s says it stopped at %d: published by sequence, without message IDs, it must resume where it stopped or repeat or skip events",
				cfg.Producer, cfg.Start, cfg.Stream, at)
		}
	}
	pace := time.NewTimer(time.Hour)
	pace.Stop()
	defer pace.Stop()

	start := clock()
	interval := 0.0
	if cfg.Rate > 0 {
		interval = float64(time.Second) / cfg.Rate
	}
	for k := uint64(0); cfg.Count == 0 || k < cfg.Count; k++ {
		if interval > 0 {
			target := start.Add(time.Duration(float64(k) * interval))
			if d := target.Sub(clock()); d > 0 {
				if err := p.idle(ctx); err != nil {
					return p.finish(ctx, err)
				}
				if err := wait(ctx, pace, d); err != nil {
					return p.finish(ctx, err)
				}
			}
		}
		if err := ctx.Err(); err != nil {
			return p.finish(ctx, err)
		}
		m, ok := g.Next()
		if !ok {
			break
		}
		if err := p.add(ctx, m); err != nil {
			return p.finish(ctx, err)
		}
	}
	return p.finish(ctx, p.send(ctx))
}

// publisher gathers one Publish call's messages into batches: a
// sequenced one into its Pipeline's, one with message IDs into a Split's,
// a batch per stream.
type publisher struct {
	cfg      Config
	in       contracts.Ingress
	pipe     *producer.Pipeline // sequenced
	split    *producer.Split    // by message ID
	streamOf map[string]int     // the split's route: a subject's stream
	// unstored holds, per stream of the split, the publish positions of
	// the messages added to it and not yet stored, oldest first: the
	// oldest of them all is where the stored run from Start ends.
	unstored [][]uint64
	dropped  []int // per stream, the positions dropped from unstored
	progress func(uint64)
	batch    []*nats.Msg // sequenced
	stored   uint64
	// next is the publish position after the last message added.
	next uint64
}

// add appends a generated message to the batch, with a span for it when
// tracing, and sends the batch once full.
func (p *publisher) add(ctx context.Context, m nexmark.Message) error {
	// One allocation for the three values, and room in the map for the
	// batch headers the pipeline adds: the generator makes tens of
	// thousands of these a second.
	v := make([]string, 3)
	v[0], v[1], v[2] = MsgID(p.cfg.Producer, m), p.cfg.Producer, p.in.StreamOf(m.Partition)
	h := make(nats.Header, 6)
	if !p.cfg.Sequenced {
		h[jetstream.MsgIDHeader] = v[0:1:1]
	}
	h[producer.Header] = v[1:2:2]
	h[jetstream.ExpectedStreamHeader] = v[2:3:3]
	msg := &nats.Msg{Subject: p.cfg.Subject(m.Partition), Header: h, Data: m.Payload}
	if p.cfg.Tracer != nil {
		sctx, span := p.cfg.Tracer.Start(ctx, "nexmark-gen publish", trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(attribute.String("weir.event.id", m.Event.ID), attribute.String("messaging.destination.name", msg.Subject)))
		if span.SpanContext().IsSampled() {
			telemetry.Inject(sctx, msg.Header)
		}
		span.End()
	}
	if p.split != nil {
		i := p.streamOf[msg.Subject]
		p.unstored[i] = append(p.unstored[i], p.next)
		p.next++
		return p.count(p.split.Add(ctx, msg))
	}
	p.next++
	if p.batch == nil {
		p.batch = make([]*nats.Msg, 0, p.cfg.Batch)
	}
	p.batch = append(p.batch, msg)
	if len(p.batch) == p.cfg.Batch {
		return p.send(ctx)
	}
	return nil
}

// send hands what is gathered to the pipeline, which keeps it until
// stored.
func (p *publisher) send(ctx context.Context) error {
	if p.split != nil {
		return p.count(p.split.Send(ctx))
	}
	if len(p.batch) == 0 {
		return nil
	}
	if p.cfg.Sequenced {
		p.batch[len(p.batch)-1].Header[HeaderNextStart] = []string{strconv.FormatUint(p.next, 10)}
	}
	n, err := p.pipe.Send(ctx, p.batch)
	p.batch = nil
	return p.count(n, err)
}

// idle runs while the next message is not due: it counts the batches
// stored since, and sends the gathered messages if none is in flight.
func (p *publisher) idle(ctx context.Context) error {
	var n, inFlight int
	var err error
	if p.split != nil {
		n, err = p.split.Poll(ctx)
		inFlight = p.split.InFlight()
	} else {
		n, err = p.pipe.Poll(ctx)
		inFlight = p.pipe.InFlight()
	}
	if err := p.count(n, err); err != nil {
		return err
	}
	if inFlight > 0 {
		return nil
	}
	return p.send(ctx)
}

func (p *publisher) count(n int, err error) error {
	if n > 0 && p.split != nil {
		n = p.inRow()
	}
	if n > 0 {
		p.stored += uint64(n)
		if p.progress != nil {
			p.progress(p.stored)
		}
	}
	if err != nil {
		return fmt.Errorf("nexmarkgen: %w", err)
	}
	return nil
}

// inRow drops, per stream of the split, the positions now stored, and
// returns by how much the run stored in a row from Start grew: up to the
// oldest position still unstored in any stream.
func (p *publisher) inRow() int {
	end := p.next
	for i, q := range p.unstored {
		done := p.split.Stored(i) - p.dropped[i]
		q = q[done:]
		if len(q) > 0 {
			end = min(end, q[0])
		}
		p.unstored[i], p.dropped[i] = q, p.dropped[i]+done
	}
	return int(end - p.cfg.Start - p.stored)
}

// finish waits for the batches in flight — at most AckTimeout, even when
// ctx is cancelled, so the count is what is stored — and returns the count
// with err, or the error of waiting.
func (p *publisher) finish(ctx context.Context, err error) (uint64, error) {
	if err == nil || errors.Is(err, ctx.Err()) {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.AckTimeout)
		defer cancel()
		flush := p.pipe.Flush
		if p.split != nil {
			flush = p.split.Flush
		}
		if ferr := p.count(flush(wctx)); ferr != nil {
			return p.stored, ferr
		}
	}
	if err == nil {
		err = ctx.Err()
	}
	return p.stored, err
}

// wait waits d on the timer, or until ctx ends. Pacing self-corrects: every
// target is computed from the start time.
func wait(ctx context.Context, t *time.Timer, d time.Duration) error {
	t.Reset(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
