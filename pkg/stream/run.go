package stream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/capacity"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/internal/watermark"
	"github.com/weirflow/weir/pkg/ingress"
	"github.com/weirflow/weir/pkg/state"
	"github.com/weirflow/weir/pkg/view"
)

// run is one run of a Runtime: from connecting to the loop's end. Nothing
// of it outlives the run, so a new one (after the assignment changed)
// starts clean. It owns one of each part — the connection, the layout,
// input reading and its retention, output staging, checkpoint
// participation, erasure, observation — and drives the loop (loop.go) and the step (step.go)
// through them. Its parts belong to the step loop, except what the
// connection's handlers read (conn, in.reader) and what Stats reads under
// the observer's lock or from the store.
type run struct {
	rt *Runtime

	conn conn
	// plan is the Runtime's base plan narrowed to the partitions this run
	// owns (lay).
	plan  plan
	lay   layout
	watch watch
	store *state.Store
	in    inputs
	// ret is input reading's retention: it opens the reader and holds it
	// to what the streams still have (retention.go).
	ret retention
	out output
	// firing: the last step left due timers unfired (maxStepTimers); the
	// next steps fire them before any more input is read.
	firing bool
	// erasures are the erasure registry's requests (erase.go): nil
	// without a deletion policy.
	erasures *erasures

	obs observer
	bar barriers
}

// newRun makes a run of rt with its parts wired to what they take from
// it; the state and checkpoint stores are given to them once open
// (execute).
func newRun(rt *Runtime) *run {
	rn := &run{rt: rt, conn: conn{denied: func(error) {}}, plan: rt.base, in: inputs{seen: map[string]uint64{}, ended: map[string]bool{}, caughtUp: map[string]time.Time{}}}
	rn.obs.cfg, rn.obs.plan, rn.obs.log = &rt.cfg, &rn.plan, rt.log
	rn.in.fencing.log = rt.log
	rn.ret = retention{in: &rn.in, conn: &rn.conn, plan: &rn.plan, cfg: &rt.cfg, log: rt.log, obs: &rn.obs, now: rt.now}
	rn.out = output{conn: &rn.conn, plan: &rn.plan, stats: &rt.stats, log: rt.log, obs: &rn.obs}
	return rn
}

// execute runs until ctx ends, the run fails, or the assignment changes
// (errReassigned) or retires the instance (errRetired).
// frameHeaderRoom bounds the headers of a frame, above its records'
// overload.frame_max_bytes.
const frameHeaderRoom = 4 << 10

func (rn *run) execute(ctx context.Context) (err error) {
	defer func() {
		// A stop requested while starting or running is a clean stop,
		// whatever the operation it interrupted reported — unless it says
		// why the server's denial stopped it (a stream weir provision
		// makes).
		if err != nil && ctx.Err() != nil && !errors.As(err, new(*natsconn.DeniedError)) {
			rn.rt.log.Info("stopped", "interrupted", err)
			err = nil
		}
	}()
	rn.rt.log.Info("starting", "config", rn.rt.cfg, "pipeline", rn.plan.pipeline, "input", rn.plan.inputName, "output", rn.plan.outputName())
	began := time.Now()
	nc, err := rn.conn.connect(&rn.rt.cfg, rn.plan.pipeline, rn.rt.log, &rn.in.reader)
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	defer nc.Close()
	defer rn.out.abandon()
	rn.conn.nc = nc
	// A frame is its records plus headers; the server refuses a message
	// over its max_payload, headers included.
	if max := nc.MaxPayload(); rn.plan.output != nil && int64(rn.plan.limits.MaxBytes+frameHeaderRoom) > max {
		return fmt.Errorf("stream: refusing to start: a frame of overload.frame_max_bytes %d in %s, with its headers (up to %d bytes), is larger than the max_payload %d of the server at %s, which would refuse it; lower frame_max_bytes or raise the server's max_payload",
			rn.plan.limits.MaxBytes, rn.plan.contract.File, frameHeaderRoom, max, nc.ConnectedUrlRedacted())
	}
	// An acknowledgement lost with a dying server must not hold a
	// publish forever: it fails, and the step publishes again.
	if rn.conn.js, err = jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second)); err != nil {
		return fmt.Errorf("stream: jetstream: %w", err)
	}

	// The operator's own file bucket is checked now: the only one it writes.
	ckpts, err := checkpoint.Open(ctx, rn.conn.js, rn.plan.pipeline, rn.rt.cfg.replicas(), rn.rt.cfg.Operator)
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	if k := rn.rt.cfg.CheckpointKeys; k != nil {
		ckpts.Seal(k)
	}
	rn.bar.store, rn.in.fencing.store, rn.ret.ckpts = ckpts, ckpts, ckpts
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if err := rn.watch.start(watchCtx, rn.bar.store); err != nil {
		return err
	}
	if err := rn.loadLayout(ctx); err != nil {
		return err
	}
	stateDir := stateDir(rn.rt.cfg.DataDir)
	placed, restored, err := rn.restorer().placeState(ctx, stateDir)
	if err != nil {
		return err
	}
	storeOpts := state.Options{
		FS:        rn.rt.cfg.Faults.stateFS(),
		Families:  rn.plan.families,
		KeyGroups: rn.plan.keyGroups,
		Logger:    rn.rt.log,
	}
	store, err := state.Open(stateDir, storeOpts)
	if err != nil {
		return fmt.Errorf("stream: open state: %w", err)
	}
	rn.store, rn.out.store, rn.ret.store = store, store, store
	rn.obs.memory = rn.plan.memory(storeOpts)
	rn.rt.stats.memory.Store(&rn.obs.memory)
	rn.rt.log.Info("memory budget", "total", rn.obs.memory.Total, "runtime", rn.obs.memory.Runtime, "state", rn.obs.memory.State,
		"input", rn.obs.memory.Input, "output", rn.obs.memory.Output)
	defer holdMemory(rn.obs.memory, rn.rt.log)()
	rn.rt.cur.Store(rn)
	defer func() {
		rn.rt.cur.Store(nil)
		if cerr := store.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("stream: close state: %w", cerr)
		}
	}()

	// Local state that won is judged as a restore would be; restored
	// state was judged before it was put in place.
	if err := rn.restorer().checkLocalMeaning(ctx, restored != nil); err != nil {
		return err
	}
	if err := rn.obs.start(rn.observe); err != nil {
		return err
	}
	defer rn.obs.stop()
	if err := rn.provision(ctx); err != nil {
		return err
	}
	defer rn.out.stopTxn()
	if err := rn.recover(ctx); err != nil {
		return err
	}
	if restored == nil {
		if err := rn.restorer().resumeRestore(ctx); err != nil {
			return err
		}
	} else {
		if err := rn.restorer().fence(ctx, restored, placed.Migrations); err != nil {
			return err
		}
		rn.bar.done = restored.Checkpoint // the restore's checkpoint is snapshotted
		if rn.out.writer != nil {
			// Frames of the new generation start after the restore cut.
			rn.out.writer, err = edge.NewWriter(edge.WriterConfig{
				Spec: *rn.plan.output, KeyGroups: rn.plan.keyGroups, Producer: rn.rt.Producer(),
				Generation: rn.plan.generation, Limits: rn.plan.limits, Seqs: restored.Outputs, JSON: rn.plan.outputJSON,
			})
			if err != nil {
				return err
			}
		}
	}
	stopErasures, err := rn.startErasures(ctx)
	if err != nil {
		return err
	}
	defer stopErasures()
	if err := rn.startBarriers(ctx); err != nil {
		return err
	}
	defer func() { rn.bar.stop(ctx.Err() != nil, rn.rt.cfg.Operator, rn.rt.cfg.Instance, rn.rt.log) }()
	svc, err := rn.register()
	if err != nil {
		return err
	}
	defer svc.Stop()

	defer func() {
		if r := rn.in.reader.Load(); r != nil {
			r.Close()
		}
		rn.in.reader.Store(nil)
	}()
	reader, err := rn.ret.openReader(ctx)
	switch {
	case err == nil:
		rn.in.reader.Store(reader)
		rn.align()
	case errors.Is(err, edge.ErrTrimmed) || ctx.Err() != nil:
		return err
	default:
		// A broker just restarted, or busy recovering its streams, times
		// out the consumers' creation: a start — a rescale's restart, a
		// process started again — waits for it as a running reader does,
		// rather than end the process.
		if reader, err = rn.reopenReader(ctx, err); err != nil {
			return err
		}
	}
	replay := rn.pendingAtStart(ctx)
	rn.rt.stats.replayed.Store(replay)
	rn.obs.metrics.Replayed(ctx, replay)
	rn.rt.ready.Store(true)
	defer rn.rt.ready.Store(false)
	// A predecessor that stopped while firing a burst of timers left the
	// watermark behind its input's, or timers behind the watermark it
	// forwarded: those timers fire before any input.
	if tr := rn.in.tracker; tr != nil {
		wm, ok := tr.Watermark()
		rn.firing = ok && wm.After(tr.Emitted())
		if e := tr.Emitted(); !rn.firing && !e.IsZero() {
			due, err := rn.store.DueTimers(state.EventTime, e, 1)
			if err != nil {
				return err
			}
			rn.firing = len(due) > 0
		}
	}
	took := time.Since(began)
	rn.rt.log.Info("running", "generation", rn.plan.generation, "positions", len(rn.in.positions), "replay", replay,
		"assignment", rn.lay.version, "partitions", fmt.Sprintf("[%d, %d)", rn.lay.lo, rn.lay.hi), "recovered_in", took)
	if took > rn.plan.maxRecovery {
		// The contract sizes every retention by the recovery envelope,
		// checkpoint_interval + max_recovery_time: a slower recovery may
		// need input that retention has already removed.
		rn.rt.log.Warn("recovery took longer than the contract declares", "took", took,
			"max_recovery_time", rn.plan.maxRecovery, "fix", "raise recovery.max_recovery_time and the retentions it sizes, or make restores faster")
	}
	return rn.loop(ctx, reader)
}

// pendingAtStart is what the consumers just opened have to deliver: the
// records a start reads again (after a restore, those past the
// checkpoint's positions) or catches up on — the replay a recovery begins
// with. An input whose consumer cannot be read counts nothing.
func (rn *run) pendingAtStart(ctx context.Context) int64 {
	var n int64
	for _, in := range rn.ret.inputs() {
		cons, err := rn.conn.js.Consumer(ctx, in.Stream, edge.ConsumerName(rn.ret.consumerPrefix(), in.Name))
		if err != nil {
			continue
		}
		info := cons.CachedInfo()
		n += int64(info.NumPending) + int64(info.NumAckPending)
	}
	return n
}

// reopenReader replaces a broken reader — the broker restarted, a consumer
// vanished — with a new one at the committed positions, retrying with a
// back-off until it succeeds or ctx ends. Messages the old reader had
// delivered but the runtime had not committed are read again; those it had
// committed are dropped by position.
func (rn *run) reopenReader(ctx context.Context, cause error) (*edge.Reader, error) {
	if old := rn.in.reader.Load(); old != nil {
		old.Close()
	}
	rn.in.reader.Store(nil)
	for attempt := 1; ; attempt++ {
		rn.rt.log.Warn("reopening input", "attempt", attempt, "cause", cause)
		r, err := rn.ret.openReader(ctx)
		if err == nil {
			rn.in.reader.Store(r)
			rn.align()
			rn.in.touch(rn.lay.chans, rn.rt.now())
			return r, nil
		}
		if errors.Is(err, edge.ErrTrimmed) {
			return nil, err // no retry brings removed records back
		}
		cause = err
		if err := sleep(ctx, jsapi.Backoff(attempt)); err != nil {
			return nil, err
		}
	}
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
func (rn *run) provision(ctx context.Context) error {
	replicas := rn.rt.cfg.replicas()
	ensure := func(spec edge.Spec) error {
		spec.Replicas = replicas
		_, err := edge.Ensure(ctx, rn.conn.js, spec)
		return err
	}
	if _, err := deadletter.Ensure(ctx, rn.conn.js, rn.plan.pipeline, rn.plan.dlqRetention, replicas); err != nil {
		return err
	}
	// The audit stream holds the declarations a start may depend on: it
	// has the deployment's replicas from the first start on.
	if err := audit.Ensure(ctx, rn.conn.js, rn.plan.pipeline, replicas); err != nil {
		return err
	}
	switch {
	case rn.plan.outputView:
		v, err := view.Ensure(ctx, rn.conn.js, rn.plan.pipeline, rn.plan.output.Edge, rn.plan.output.Retention, replicas)
		if err != nil {
			return err
		}
		rn.out.view = v
	case rn.plan.output != nil:
		if err := ensure(*rn.plan.output); err != nil {
			return err
		}
	}
	// Edges are weir's: whichever of writer and reader starts first makes
	// the stream. Ingress is the user's and must exist.
	if rn.plan.inputEdge != nil {
		if err := ensure(*rn.plan.inputEdge); err != nil {
			return err
		}
	}
	for _, name := range rn.plan.inputStreams {
		if err := rn.checkInput(ctx, name, replicas); err != nil {
			return err
		}
	}
	return nil
}

// checkInput holds input stream name to what the contract declares, and
// creates an ingress stream that is missing when asked to
// (-create-ingress).
func (rn *run) checkInput(ctx context.Context, name string, replicas int) error {
	st, err := rn.conn.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) && rn.plan.ingress {
		if !rn.rt.cfg.CreateIngress {
			return fmt.Errorf("stream: refusing to start: %w", ingress.Missing(rn.plan.contract, name, rn.rt.cfg.Operator))
		}
		rn.rt.log.Info("creating the ingress stream from the contract", "stream", name)
		var sts []jetstream.Stream
		if sts, err = ingress.Create(ctx, rn.conn.js, rn.plan.contract.Ingress, replicas); err == nil {
			st = sts[slices.Index(rn.plan.inputStreams, name)]
		}
	}
	if err != nil {
		return fmt.Errorf("stream: input stream %s: %w", name, err)
	}
	// Invariant: input retention covers the recovery and replay envelope.
	cfg := st.CachedInfo().Config
	if age := cfg.MaxAge; age != 0 && age < rn.plan.inputRetention {
		return fmt.Errorf("stream: refusing to start: input stream %s keeps messages for %s, less than the %s the contract declares (%s); raise the stream's max age",
			name, age, rn.plan.inputRetention, rn.plan.inputRetentionField)
	}
	// Removal that is not oldest-first leaves no trace in where a stream
	// begins: records an input had not read could vanish unseen.
	if cfg.MaxMsgsPerSubject > 0 || cfg.AllowMsgTTL {
		return fmt.Errorf("stream: refusing to start: input stream %s removes messages by subject or by age per message (max_msgs_per_subject %d, allow_msg_ttl %t): records could vanish before they are read with no way to tell; weir needs oldest-first retention (max_age, max_bytes, max_msgs)",
			name, cfg.MaxMsgsPerSubject, cfg.AllowMsgTTL)
	}
	// A mirror of the ingress (ingress.Mirror: a pipeline in its own
	// account) remembers no message IDs: its producers write, and are
	// deduplicated, in the ingress account.
	if rn.plan.ingress && cfg.Mirror == nil {
		if err := rn.checkDuplicateWindow(cfg); err != nil {
			return err
		}
	}
	if rn.plan.ingress && (cfg.MaxBytes > 0 || cfg.MaxMsgs > 0) {
		return rn.checkLimits(cfg)
	}
	return nil
}

// checkDuplicateWindow holds the ingress stream's duplicate window to the
// one the contract declares (ingress.duplicate_window), which weir creates
// a stream with but does not change on one that exists: a shorter one
// would store a producer's later retry twice, and is refused; a longer one
// only costs the broker memory, and is logged.
func (rn *run) checkDuplicateWindow(cfg jetstream.StreamConfig) error {
	in := rn.plan.contract.Ingress
	if in.DuplicateWindow.D() <= 0 {
		return nil // not declared
	}
	want := ingress.Duplicates(in)
	switch {
	case cfg.Duplicates < want:
		return fmt.Errorf("stream: refusing to start: the ingress stream %s remembers message IDs for %s, less than the %s the contract declares (ingress.duplicate_window in %s): a producer's retry after that would be stored twice; raise it: nats stream edit %s --dupe-window %s",
			cfg.Name, cfg.Duplicates, want, rn.plan.contract.File, cfg.Name, want)
	case cfg.Duplicates > want:
		rn.rt.log.Warn("the ingress stream remembers message IDs longer than the contract declares (ingress.duplicate_window): the broker holds each in memory; lower it with nats stream edit",
			"stream", cfg.Name, "duplicates", cfg.Duplicates, "declared", want)
	}
	return nil
}

// checkLimits holds the ingress stream's byte and message limits to its
// retention, at the arrival rate the contract declares (the linter's
// arithmetic, on the stream as it is).
func (rn *run) checkLimits(cfg jetstream.StreamConfig) error {
	c := rn.plan.contract
	if c.Capacity.ArrivalRate <= 0 {
		rn.rt.log.Warn("the ingress stream has byte or message limits, and the contract does not say how fast records arrive (capacity.arrival_rate): whether they keep records as long as the retention cannot be checked",
			"stream", cfg.Name, "max_bytes", cfg.MaxBytes, "max_msgs", cfg.MaxMsgs, "retention", rn.plan.inputRetention)
		return nil
	}
	in := c.CapacityInputs()
	in.MaxBytes, in.MaxMsgs = max(cfg.MaxBytes, 0), max(cfg.MaxMsgs, 0)
	if in.MaxBytes > 0 && c.Capacity.RecordBytes <= 0 {
		rn.rt.log.Warn("the ingress stream has a byte limit, and the contract does not say how large records are (capacity.record_bytes): whether it keeps records as long as the retention cannot be checked",
			"stream", cfg.Name, "max_bytes", cfg.MaxBytes, "retention", rn.plan.inputRetention)
		in.MaxBytes = 0
	}
	if f := capacity.Compute(in); f.KeptFor > 0 && f.KeptFor < rn.plan.inputRetention {
		return fmt.Errorf("stream: refusing to start: at %d records/s (capacity.arrival_rate) the ingress stream %s's limits (max_bytes %d, max_msgs %d) keep records only %s, less than the %s the contract declares (ingress.retention): raise or remove them",
			c.Capacity.ArrivalRate, cfg.Name, cfg.MaxBytes, cfg.MaxMsgs, capacity.Round(f.KeptFor), rn.plan.inputRetention)
	}
	return nil
}

// recover restores positions, generation and frame sequences from the
// local state and re-publishes frames a previous run staged but may not
// have published.
func (rn *run) recover(ctx context.Context) error {
	pos, err := rn.store.Positions()
	if err != nil {
		return fmt.Errorf("stream: read positions: %w", err)
	}
	if err := rn.plan.checkInputName(pos, rn.rt.cfg.Operator); err != nil {
		return err
	}
	if err := rn.checkIngressStreams(pos); err != nil {
		return err
	}
	rn.in.positions = pos
	gen := uint64(1)
	if v, ok, err := rn.store.Meta(metaGeneration); err != nil {
		return err
	} else if ok && len(v) == 8 {
		gen = binary.BigEndian.Uint64(v)
	} else {
		b := rn.store.NewBatch()
		if err := b.PutMeta(metaGeneration, binary.BigEndian.AppendUint64(nil, gen)); err != nil {
			b.Close()
			return err
		}
		if err := b.Commit(); err != nil {
			return err
		}
	}
	rn.plan.generation = gen
	if rn.rt.cfg.Replay == nil {
		// A replay's lag counts the live stream past its range, and a
		// shadow catching up lags by design: either would shed what the
		// live run kept.
		rn.in.shed = newShedder(rn.plan.shed)
	}
	if rn.plan.strategy != "" && rn.plan.strategy != watermark.None {
		rn.in.tracker = watermark.NewTracker(rn.lay.chans, rn.plan.idleTimeout, rn.plan.drift)
		if v, ok, err := rn.store.Meta(metaWatermarks); err != nil {
			return err
		} else if ok {
			if err := rn.in.tracker.UnmarshalBinary(v); err != nil {
				return err
			}
			if e := rn.in.tracker.Emitted(); !e.IsZero() {
				rn.rt.stats.watermark.Store(e.UnixMilli())
			}
		}
		// Silence is measured from now: an input quiet since before the
		// restart gets a full idle timeout to speak.
		rn.in.touch(rn.lay.chans, rn.rt.now())
	}
	if rn.plan.output != nil {
		v, _, err := rn.store.Meta(metaFrameSeqs)
		if err != nil {
			return err
		}
		seqs := decodeSeqs(v)
		w, err := edge.NewWriter(edge.WriterConfig{
			Spec: *rn.plan.output, KeyGroups: rn.plan.keyGroups, Producer: rn.rt.Producer(),
			Generation: gen, Limits: rn.plan.limits, Seqs: seqs, JSON: rn.plan.outputJSON,
		})
		if err != nil {
			return err
		}
		rn.out.writer = w
		if rn.plan.output.Transactional {
			if err := rn.out.startTxn(ctx, rn.rt.Producer(), rn.rt.cfg.replicas()); err != nil {
				return err
			}
			if err := rn.out.pollCompleted(ctx, rn.bar.store, rn.rt.cfg.Faults); err != nil {
				return err
			}
		}
	}
	return rn.out.publishStaged(ctx)
}

const (
	metaGeneration = "generation"
	metaFrameSeqs  = "frame-seqs"
	metaWatermarks = "watermarks"
	// metaIngressStreams is the number of streams the ingress positions
	// are sequences of (ingress.streams), when more than one.
	metaIngressStreams = "ingress-streams"
)

// checkIngressStreams refuses positions of the ingress taken over another
// number of streams than the contract places it over (ingress.streams):
// input ingress/p's position is a sequence of the stream holding p, and
// over another number of streams another stream holds it. The state
// records the number when it is not one — as the state of a build before
// ingress.streams always was.
func (rn *run) checkIngressStreams(pos map[string]state.Position) error {
	if !rn.plan.ingress {
		return nil
	}
	want := rn.plan.contract.Ingress.StreamCount()
	had := 1
	v, ok, err := rn.store.Meta(metaIngressStreams)
	if err != nil {
		return err
	}
	if ok {
		if len(v) != 8 {
			return fmt.Errorf("stream: refusing to start: the state's record of the ingress streams its positions belong to is corrupt (%x)", v)
		}
		had = int(binary.BigEndian.Uint64(v))
	}
	if len(pos) == 0 {
		if had == want {
			return nil
		}
		b := rn.store.NewBatch()
		if err := b.PutMeta(metaIngressStreams, binary.BigEndian.AppendUint64(nil, uint64(want))); err != nil {
			b.Close()
			return err
		}
		return b.Commit()
	}
	if had != want {
		return fmt.Errorf("stream: refusing to start: the state holds positions in the ingress over %d stream(s), and contract %s places it over %d (ingress.streams): each position is a sequence of the stream that held its partition; start the pipeline afresh (new state, and the ingress's records in the new streams), or keep ingress.streams at %d",
			had, rn.plan.contract.File, want, had)
	}
	return nil
}

// checkInputName refuses positions in an input the operator no longer
// reads: the contract moved it to another (an edge replaced by chaining
// its writer into the operator, operators[].before, or the chain undone).
// The state counts what was read there, and no position says where to
// begin in the new input: starting would read it again or skip it.
func (p plan) checkInputName(pos map[string]state.Position, operator string) error {
	for name := range pos {
		if in, _, _ := strings.Cut(name, "/"); in != p.inputName {
			return fmt.Errorf("stream: refusing to start: operator %s's state holds its position in input %q (%s), and contract %s has it read %q: the state counts records of the old input, and nothing says where in the new one they end; start a new generation from the ingress (weir shadow), or keep the operator's input",
				operator, in, name, p.contract.File, p.inputName)
		}
	}
	return nil
}

// The records of a restore — "assignment", "restored", "meaning" — are
// package restore's.

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
