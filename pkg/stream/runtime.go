package stream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/checkpoint"
	"github.com/weirflow/weir/pkg/deadletter"
	"github.com/weirflow/weir/pkg/edge"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/state"
	"github.com/weirflow/weir/pkg/watermark"
)

// Runtime runs one operator instance. Create it with New, run it with Run.
type Runtime struct {
	cfg Config
	op  operator.Operator
	log *slog.Logger
	now func() time.Time
	// base is the plan the contract gives; plan is base narrowed to the
	// partitions this run owns.
	base plan
	plan plan
	lay  layout
	// chans are the input channels: a partition, or a partition and one of
	// its writers when the upstream operator runs several instances;
	// chanInput maps each to its partition's input name.
	chans      []string
	chanInput  map[string]string
	reassigned chan struct{}
	layVersion atomic.Uint64

	// Owned by Run.
	nc        *nats.Conn
	js        jetstream.JetStream
	store     *state.Store
	writer    *edge.Writer
	positions map[string]state.Position
	reader    atomic.Pointer[edge.Reader]
	// tracker combines the inputs' watermarks; nil when the contract
	// declares no event-time progress.
	tracker  *watermark.Tracker
	idleSent bool
	// published holds staged frame IDs published after the last commit;
	// the next commit deletes them.
	published []string

	stats    counters
	obs      observer
	bar      barriers
	ready    atomic.Bool
	storeRef atomic.Pointer[state.Store]
}

// New checks the configuration and the contract and returns a Runtime. It
// refuses an incomplete or self-contradicting contract.
func New(cfg Config, op operator.Operator) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if op == nil {
		return nil, errors.New("stream: nil operator")
	}
	c := cfg.Contract
	if c == nil {
		var err error
		if c, err = contracts.Load(cfg.ContractPath); err != nil {
			return nil, fmt.Errorf("stream: refusing to start: %w", err)
		}
	} else if problems := c.Lint(); len(problems) > 0 {
		return nil, fmt.Errorf("stream: refusing to start: %w", &contracts.Invalid{Problems: problems})
	}
	p, err := makePlan(c, cfg.Operator)
	if err != nil {
		return nil, err
	}
	if su, ok := op.(operator.StateUser); ok {
		for _, name := range su.Families() {
			if o, _ := c.Operator(cfg.Operator); !o.Uses(name) {
				return nil, fmt.Errorf("stream: refusing to start: operator %s keeps state family %q, which contract %s does not give it (operators[].state, state.families)", cfg.Operator, name, c.File)
			}
		}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	now := cfg.Clock
	if now == nil {
		now = time.Now
	}
	return &Runtime{
		cfg:  cfg,
		op:   op,
		log:  logger.With("operator", cfg.Operator, "instance", cfg.Instance),
		now:  now,
		base: p,
		plan: p,
	}, nil
}

// Producer is the name this instance stamps on its frames.
func (rt *Runtime) Producer() string { return rt.cfg.Operator + "/" + rt.cfg.Instance }

// Ready reports whether the runtime has recovered and is reading input.
func (rt *Runtime) Ready() bool { return rt.ready.Load() }

// Run connects, recovers from the local state and processes input until ctx
// is cancelled or an unrecoverable error occurs. On cancellation it stops
// fetching, commits, and returns nil. When the pipeline's assignment
// changes it starts again under the new one; when the assignment no longer
// names the instance it stops and returns nil.
func (rt *Runtime) Run(ctx context.Context) error {
	for {
		err := rt.run(ctx)
		switch {
		case errors.Is(err, errReassigned):
			rt.log.Info("restarting under the new assignment")
			rt.reset()
		case errors.Is(err, errRetired):
			rt.log.Warn("not running", "reason", err)
			return nil
		default:
			return err
		}
	}
}

// reset forgets everything a run learned, keeping the counters.
func (rt *Runtime) reset() {
	rt.plan = rt.base
	rt.lay, rt.chans, rt.chanInput = layout{}, nil, nil
	rt.nc, rt.js, rt.store, rt.writer = nil, nil, nil, nil
	rt.positions, rt.tracker, rt.idleSent, rt.published = nil, nil, false, nil
	rt.bar = barriers{}
	rt.obs = observer{}
}

func (rt *Runtime) run(ctx context.Context) (err error) {
	defer func() {
		// A stop requested while starting or running is a clean stop,
		// whatever the operation it interrupted reported.
		if err != nil && ctx.Err() != nil {
			rt.log.Info("stopped", "interrupted", err)
			err = nil
		}
	}()
	rt.log.Info("starting", "config", rt.cfg, "pipeline", rt.plan.pipeline, "input", rt.plan.inputName, "output", rt.plan.outputName())
	nc, err := nats.Connect(rt.cfg.NATSURL,
		nats.Name("weir-"+rt.cfg.Operator+"-"+rt.cfg.Instance),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		// A subscription that overflows drops deliveries (see
		// edge.Reader's pump): reopen the input at the committed position.
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrSlowConsumer) {
				if r := rt.reader.Load(); r != nil {
					r.Fail(fmt.Errorf("edge: deliveries dropped: %w", err))
				}
			}
		}),
	)
	if err != nil {
		return fmt.Errorf("stream: connect %s: %w", rt.cfg.NATSURL, err)
	}
	defer nc.Close()
	rt.nc = nc
	// An acknowledgement lost with a dying server must not hold a
	// publish forever: it fails, and the step publishes again.
	if rt.js, err = jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second)); err != nil {
		return fmt.Errorf("stream: jetstream: %w", err)
	}

	ckpts, err := checkpoint.Open(ctx, rt.js, rt.plan.pipeline, rt.cfg.replicas())
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	rt.bar.store = ckpts
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if err := rt.watchAssignment(watchCtx); err != nil {
		return err
	}
	if err := rt.loadLayout(ctx); err != nil {
		return err
	}
	stateDir := stateDir(rt.cfg.DataDir)
	// A savepoint restored by hand comes first; otherwise the assignment
	// and the checkpoints decide.
	restored, err := rt.restoredByHand(ctx, stateDir)
	if err != nil {
		return err
	}
	if restored == nil {
		if restored, err = rt.restoreState(ctx, stateDir); err != nil {
			return err
		}
	}
	store, err := state.Open(stateDir, state.Options{
		Families:  rt.plan.families,
		KeyGroups: rt.plan.keyGroups,
		Logger:    rt.log,
	})
	if err != nil {
		return fmt.Errorf("stream: open state: %w", err)
	}
	rt.store = store
	rt.storeRef.Store(store)
	defer func() {
		rt.storeRef.Store(nil)
		if cerr := store.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("stream: close state: %w", cerr)
		}
	}()

	if err := rt.startObserver(); err != nil {
		return err
	}
	defer rt.stopObserver()
	if err := rt.provision(ctx); err != nil {
		return err
	}
	if err := rt.recover(ctx); err != nil {
		return err
	}
	if restored != nil {
		if err := rt.fence(ctx, restored); err != nil {
			return err
		}
		if rt.writer != nil {
			// Frames of the new generation start after the restore cut.
			rt.writer, err = edge.NewWriter(edge.WriterConfig{
				Spec: *rt.plan.output, KeyGroups: rt.plan.keyGroups, Producer: rt.Producer(),
				Generation: rt.plan.generation, Limits: rt.plan.limits, Seqs: restored.Outputs, JSON: rt.plan.outputJSON,
			})
			if err != nil {
				return err
			}
		}
	}
	if err := rt.startBarriers(ctx); err != nil {
		return err
	}
	defer func() { rt.stopBarriers(ctx.Err() != nil) }()
	svc, err := rt.register()
	if err != nil {
		return err
	}
	defer svc.Stop()

	reader, err := rt.openReader(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if r := rt.reader.Load(); r != nil {
			r.Close()
		}
		rt.reader.Store(nil)
	}()
	rt.reader.Store(reader)
	rt.align()
	rt.ready.Store(true)
	defer rt.ready.Store(false)
	rt.log.Info("running", "generation", rt.plan.generation, "positions", len(rt.positions),
		"assignment", rt.lay.version, "partitions", fmt.Sprintf("[%d, %d)", rt.lay.lo, rt.lay.hi))
	return rt.loop(ctx, reader)
}

// openReader opens the input consumers at the committed positions.
func (rt *Runtime) openReader(ctx context.Context) (*edge.Reader, error) {
	return edge.OpenReader(ctx, rt.js, edge.ReaderConfig{
		Consumer:      rt.plan.pipeline + "_" + rt.cfg.Operator + "_" + rt.cfg.Instance,
		Inputs:        rt.inputs(),
		FetchBatch:    rt.plan.fetchBatch,
		MaxAckPending: rt.plan.maxAckPending,
	})
}

// reopenReader replaces a broken reader — the broker restarted, a consumer
// vanished — with a new one at the committed positions, retrying with a
// back-off until it succeeds or ctx ends. Messages the old reader had
// delivered but the runtime had not committed are read again; those it had
// committed are dropped by position.
func (rt *Runtime) reopenReader(ctx context.Context, cause error) (*edge.Reader, error) {
	if old := rt.reader.Load(); old != nil {
		old.Close()
	}
	rt.reader.Store(nil)
	for attempt := 1; ; attempt++ {
		rt.log.Warn("reopening input", "attempt", attempt, "cause", cause)
		r, err := rt.openReader(ctx)
		if err == nil {
			rt.reader.Store(r)
			rt.align()
			return r, nil
		}
		cause = err
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return nil, err
		}
	}
}

// backoff is the wait before retry attempt n: 100 ms doubling to 5 s.
func backoff(n int) time.Duration {
	return min(100*time.Millisecond<<min(n-1, 6), 5*time.Second)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// provision makes sure the streams the instance writes exist and the input
// stream it reads covers the declared replay envelope. Weir's streams get
// the configured replicas; an existing one is scaled to them.
func (rt *Runtime) provision(ctx context.Context) error {
	replicas := rt.cfg.replicas()
	ensure := func(spec edge.Spec) error {
		spec.Replicas = replicas
		_, err := edge.Ensure(ctx, rt.js, spec)
		return err
	}
	if _, err := deadletter.Ensure(ctx, rt.js, rt.plan.pipeline, rt.plan.dlqRetention, replicas); err != nil {
		return err
	}
	if rt.plan.output != nil {
		if err := ensure(*rt.plan.output); err != nil {
			return err
		}
	}
	// Edges are weir's: whichever of writer and reader starts first makes
	// the stream. Ingress is the user's and must exist.
	if rt.plan.inputEdge != nil {
		if err := ensure(*rt.plan.inputEdge); err != nil {
			return err
		}
	}
	st, err := rt.js.Stream(ctx, rt.plan.inputStream)
	if err != nil {
		return fmt.Errorf("stream: input stream %s: %w", rt.plan.inputStream, err)
	}
	// Invariant: input retention covers the recovery and replay envelope.
	if age := st.CachedInfo().Config.MaxAge; age != 0 && age < rt.plan.inputRetention {
		return fmt.Errorf("stream: refusing to start: input stream %s keeps messages for %s, less than the %s the contract declares (%s); raise the stream's max age",
			rt.plan.inputStream, age, rt.plan.inputRetention, rt.plan.inputRetentionField)
	}
	return nil
}

// recover restores positions, generation and frame sequences from the
// local state and re-publishes frames a previous run staged but may not
// have published.
func (rt *Runtime) recover(ctx context.Context) error {
	pos, err := rt.store.Positions()
	if err != nil {
		return fmt.Errorf("stream: read positions: %w", err)
	}
	rt.positions = pos
	gen := uint64(1)
	if v, ok, err := rt.store.Meta(metaGeneration); err != nil {
		return err
	} else if ok && len(v) == 8 {
		gen = binary.BigEndian.Uint64(v)
	} else {
		b := rt.store.NewBatch()
		if err := b.PutMeta(metaGeneration, binary.BigEndian.AppendUint64(nil, gen)); err != nil {
			b.Close()
			return err
		}
		if err := b.Commit(); err != nil {
			return err
		}
	}
	rt.plan.generation = gen
	if rt.plan.strategy != "" && rt.plan.strategy != watermark.None {
		rt.tracker = watermark.NewTracker(rt.chans, rt.plan.idleTimeout, rt.plan.drift)
		if v, ok, err := rt.store.Meta(metaWatermarks); err != nil {
			return err
		} else if ok {
			if err := rt.tracker.UnmarshalBinary(v); err != nil {
				return err
			}
			if e := rt.tracker.Emitted(); !e.IsZero() {
				rt.stats.watermark.Store(e.UnixMilli())
			}
		}
		// Silence is measured from now: an input quiet since before the
		// restart gets a full idle timeout to speak.
		now := rt.now()
		for _, n := range rt.chans {
			rt.tracker.Touch(n, now)
		}
	}
	if rt.plan.output != nil {
		v, _, err := rt.store.Meta(metaFrameSeqs)
		if err != nil {
			return err
		}
		seqs := decodeSeqs(v)
		w, err := edge.NewWriter(edge.WriterConfig{
			Spec: *rt.plan.output, KeyGroups: rt.plan.keyGroups, Producer: rt.Producer(),
			Generation: gen, Limits: rt.plan.limits, Seqs: seqs, JSON: rt.plan.outputJSON,
		})
		if err != nil {
			return err
		}
		rt.writer = w
	}
	var staged []edge.Message
	var ids []string
	err = rt.store.StagedOutputs(func(id string, data []byte) error {
		var m edge.Message
		if err := m.UnmarshalBinary(data); err != nil {
			return err
		}
		staged = append(staged, m)
		ids = append(ids, id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("stream: read staged frames: %w", err)
	}
	if len(staged) > 0 {
		rt.log.Info("re-publishing staged frames", "frames", len(staged))
		if err := edge.Publish(ctx, rt.js, staged, rt.plan.maxInFlight()); err != nil {
			return err
		}
		rt.published = ids
		if err := rt.commitPublished(); err != nil {
			return err
		}
	}
	return nil
}

// commitPublished deletes published staged frames when no step is going to.
func (rt *Runtime) commitPublished() error {
	if len(rt.published) == 0 {
		return nil
	}
	b := rt.store.NewBatch()
	for _, id := range rt.published {
		if err := b.DeleteOutput(id); err != nil {
			b.Close()
			return err
		}
	}
	if err := b.Commit(); err != nil {
		return fmt.Errorf("stream: commit: %w", err)
	}
	rt.published = nil
	return nil
}

func (rt *Runtime) inputs() []edge.Input {
	ins := make([]edge.Input, len(rt.plan.inputs))
	copy(ins, rt.plan.inputs)
	for i := range ins {
		ins[i].After = rt.positions[ins[i].Name].Seq
	}
	return ins
}

const (
	metaGeneration = "generation"
	metaFrameSeqs  = "frame-seqs"
	metaWatermarks = "watermarks"
)

// align pauses inputs that run more than the alignment drift ahead of the
// slowest one, and resumes the others.
func (rt *Runtime) align() {
	r := rt.reader.Load()
	if r == nil {
		return
	}
	// A partition is paused when every one of its channels is. A channel
	// blocked by a barrier must not hold back the other writers of its
	// partition: the step holds its deliveries instead. A channel running
	// ahead of the drift is not held: alignment bounds partitions whose
	// every writer runs ahead, not one writer among others.
	for _, in := range rt.plan.inputs {
		paused := true
		for _, c := range rt.channelsOf(in.Name) {
			if !rt.bar.blocked[c] && (rt.tracker == nil || !rt.tracker.Paused(c)) {
				paused = false
				break
			}
		}
		r.SetPaused(in.Name, paused)
	}
}

func decodeSeqs(b []byte) []uint64 {
	var seqs []uint64
	for len(b) >= 8 {
		seqs = append(seqs, binary.BigEndian.Uint64(b))
		b = b[8:]
	}
	return seqs
}

func encodeSeqs(seqs []uint64) []byte {
	b := make([]byte, 0, 8*len(seqs))
	for _, s := range seqs {
		b = binary.BigEndian.AppendUint64(b, s)
	}
	return b
}
