// Package coordinator is weir's checkpoint coordinator: it triggers a
// pipeline's checkpoints on the contract's interval, collects the
// instances' acknowledgements on weir.ctl.<pipeline>.checkpoint.ack, and
// completes checkpoint N with a compare-and-set of the pipeline's "latest"
// key — the commit point — before announcing it on
// weir.ctl.<pipeline>.checkpoint.complete. A checkpoint that does not
// gather every acknowledgement in time, or that any instance fails, is
// aborted.
//
// Several coordinators may run: one holds the lease (a KV key renewed
// with compare-and-set), the others stand by and take over when it lapses.
// A coordinator that dies after the commit point but before announcing is
// replaced by one that finds the completed checkpoint's record still
// pending, marks it complete and announces it; the compare-and-set makes
// sure nothing commits twice.
package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/envflag"
	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/internal/status"
)

// Version is reported to $SRV.INFO.
const Version = "0.1.0"

// Config configures a coordinator.
type Config struct {
	NATSURL string
	// Auth is who the coordinator is to NATS, and the TLS it speaks.
	Auth     natsconn.Auth
	Contract *contracts.Contract
	// Holder names this coordinator in the lease.
	Holder string
	// Interval between checkpoints; zero takes the contract's.
	Interval time.Duration
	// Timeout aborts a checkpoint not acknowledged in time; zero is
	// max(10 s, 2 × Interval).
	Timeout time.Duration
	// Lease is how long a lease lasts unless renewed; zero is Timeout + 2 s.
	Lease time.Duration
	// AfterCommit, when set, runs right after the commit point and before
	// the announcement. Failure tests use it to die there.
	AfterCommit func(n uint64)
	Logger      *slog.Logger
	// StatusAddr, when set (for example ":8080"), serves the pipeline's
	// status page and /status.json there; see StatusURL.
	StatusAddr string
	// Replicas of the pipeline's checkpoint buckets, which the coordinator
	// checks when it starts — weir provision makes and scales them; it
	// creates them only where they are missing and it may; 0 takes them
	// as deployed. It must match the operators' (stream.Config.Replicas)
	// and weir provision's: 3 on a three-node cluster.
	Replicas int
}

// Coordinator coordinates one pipeline's checkpoints.
type Coordinator struct {
	cfg   Config
	log   *slog.Logger
	nc    *nats.Conn
	store *checkpoint.Store

	acks *acks
	reqs chan *nats.Msg

	mu struct {
		sync.Mutex
		leader bool
		last   uint64
	}
	status statusServer
}

// New returns a coordinator.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Contract == nil || cfg.NATSURL == "" || cfg.Holder == "" {
		return nil, errors.New("coordinator: contract, NATS URL and holder are required")
	}
	if err := cfg.Auth.Validate(); err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	if cfg.Replicas < 0 || cfg.Replicas > 5 {
		return nil, fmt.Errorf("coordinator: replicas %d must be 1 to 5", cfg.Replicas)
	}
	if cfg.Interval == 0 {
		cfg.Interval = cfg.Contract.Recovery.CheckpointInterval.D()
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = max(10*time.Second, 2*cfg.Interval)
	}
	if cfg.Lease == 0 {
		// The lease is renewed between checkpoints: it must outlast one.
		cfg.Lease = cfg.Timeout + 2*time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Coordinator{cfg: cfg, log: log.With("pipeline", cfg.Contract.Pipeline, "holder", cfg.Holder),
		acks: newAcks(), reqs: make(chan *nats.Msg, 16)}, nil
}

// Leader reports whether this coordinator holds the lease.
func (co *Coordinator) Leader() bool {
	co.mu.Lock()
	defer co.mu.Unlock()
	return co.mu.leader
}

// Run coordinates until ctx ends, and then returns nil — also when ctx
// ends while it is still starting (connecting, opening the checkpoint
// store), where the step it was taking fails with the context's error. A
// start the broker does not answer — down, restarting, busy recovering
// its streams — is tried again after a back-off, not the process's end.
func (co *Coordinator) Run(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		err := co.cfg.Auth.GuardAnswering(ctx, co.run)
		switch {
		case err != nil && ctx.Err() != nil:
			co.log.Debug("stopped while starting", "err", err)
			return nil
		case err != nil && jsapi.Unreachable(err):
			co.log.Warn("the broker did not answer; starting again", "attempt", attempt, "err", err)
			t := time.NewTimer(jsapi.Backoff(attempt))
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		default:
			return err
		}
	}
}

// run runs the coordinator until ctx ends or it fails, reporting its
// connection's errors to denied.
func (co *Coordinator) run(ctx context.Context, denied func(error)) error {
	p := co.cfg.Contract.Pipeline
	nc, err := co.cfg.Auth.Connect(co.cfg.NATSURL, nats.Name("weir-coordinator-"+co.cfg.Holder), nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied(err) }))
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	defer nc.Close()
	co.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// Every operator's file bucket: the coordinator collects them all.
	if co.store, err = checkpoint.Open(ctx, js, p, co.cfg.Replicas, co.cfg.Contract.OperatorIDs()...); err != nil {
		return err
	}
	if co.cfg.StatusAddr != "" {
		stop, err := co.serveStatus(nc, js)
		if err != nil {
			return err
		}
		defer stop()
	}
	// One subscription per operator: each queues apart (acks).
	for _, op := range co.cfg.Contract.Operators {
		sub, err := nc.Subscribe(checkpoint.OperatorAcksSubject(p, op.ID), func(m *nats.Msg) {
			operator, instance, ok := checkpoint.AckFrom(p, m.Subject)
			if !ok {
				return
			}
			// A refused acknowledgement is counted, and reported by the
			// checkpoint it was for (acks.take), not here.
			_ = co.acks.offer(operator, instance, m.Data)
		})
		if err != nil {
			return err
		}
		defer sub.Unsubscribe()
	}
	svc, err := micro.AddService(nc, micro.Config{Name: status.CoordinatorService(p), Version: Version,
		Metadata: status.CoordinatorMetadata(p, co.cfg.Holder, Memory)})
	if err != nil {
		return err
	}
	defer svc.Stop()

	tick := time.NewTicker(min(co.cfg.Lease/3, co.cfg.Interval))
	defer tick.Stop()
	next := time.Now().Add(co.cfg.Interval)
	var reqSub *nats.Subscription
	for {
		select {
		case <-ctx.Done():
			co.release()
			return nil
		case m := <-co.reqs:
			var rec checkpoint.Record
			r, err := checkpoint.ParseRequest(m.Data)
			if err == nil {
				rec, err = co.checkpoint(ctx, r.Savepoint)
			}
			if err != nil {
				rec.Reason = err.Error()
				if rec.Status == "" {
					rec.Status = checkpoint.Aborted // never triggered
				}
			}
			co.answer(m, rec)
		case now := <-tick.C:
			leader, err := co.lease(ctx)
			if err != nil {
				co.log.Warn("lease", "err", err)
				continue
			}
			if !leader {
				if reqSub != nil {
					if err := reqSub.Unsubscribe(); err != nil {
						co.log.Warn("no longer leading, but still subscribed to checkpoint requests", "err", err)
					}
					reqSub = nil
				}
				continue
			}
			if reqSub == nil {
				if err := co.takeOver(ctx); err != nil {
					co.log.Warn("take over", "err", err)
					continue
				}
				reqSub, err = nc.Subscribe(checkpoint.RequestSubject(p), func(m *nats.Msg) {
					if natsconn.Published(m) { // not a stream's message a consumer delivered
						co.reqs <- m
					}
				})
				if err != nil {
					return err
				}
			}
			if !now.Before(next) {
				next = now.Add(co.cfg.Interval)
				if _, err := co.checkpoint(ctx, ""); err != nil {
					co.log.Warn("checkpoint", "err", err)
				}
			}
		}
	}
}

// lease acquires or renews the lease; it reports whether this coordinator
// holds it.
func (co *Coordinator) lease(ctx context.Context) (bool, error) {
	leader, err := co.store.TakeLease(ctx, co.cfg.Holder, co.cfg.Lease)
	if err != nil {
		return false, err
	}
	if leader && !co.Leader() {
		co.log.Info("leading")
	}
	co.setLeader(leader)
	return leader, nil
}

func (co *Coordinator) setLeader(v bool) {
	co.mu.Lock()
	co.mu.leader = v
	co.mu.Unlock()
}

// release gives the lease up on a clean stop so a standby takes over at once.
func (co *Coordinator) release() {
	if !co.Leader() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := co.store.ReleaseLease(ctx, co.cfg.Holder); err != nil {
		co.log.Warn("lease not released: a standby takes over once it expires", "err", err)
	}
}

// takeOver finishes what a previous leader left: a checkpoint committed but
// not announced is marked complete and announced; one still pending is
// aborted.
func (co *Coordinator) takeOver(ctx context.Context) error {
	latest, _, err := co.store.Latest(ctx)
	if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
		return err
	}
	recs, err := co.store.Records(ctx)
	if err != nil {
		return err
	}
	last := latest.Checkpoint
	for _, r := range recs {
		last = max(last, r.Checkpoint)
		if r.Status != checkpoint.Pending {
			continue
		}
		if r.Checkpoint <= latest.Checkpoint {
			r.Status, r.Completed = checkpoint.Complete, latest.Completed
			co.log.Info("re-announcing a checkpoint committed by the previous coordinator", "checkpoint", r.Checkpoint)
		} else {
			r.Status, r.Reason = checkpoint.Aborted, "the coordinator that triggered it stopped"
		}
		if err := co.store.PutRecord(ctx, r); err != nil {
			return err
		}
		if r.Status == checkpoint.Complete {
			co.announce(r.Checkpoint)
		}
	}
	co.mu.Lock()
	co.mu.last = last
	co.mu.Unlock()
	return nil
}

// answer answers a checkpoint request with the checkpoint's record.
func (co *Coordinator) answer(m *nats.Msg, rec checkpoint.Record) {
	b, err := checkpoint.EncodeRecord(rec)
	if err == nil {
		err = m.Respond(b)
	}
	if err != nil {
		// The record is in the log; the requester times out and reads it there.
		co.log.Warn("answering a checkpoint request", "checkpoint", rec.Checkpoint, "err", err)
	}
}

// announce tells the instances that checkpoint n completed. A lost
// announcement only delays them: a transactional sink also polls the
// store for the latest checkpoint.
func (co *Coordinator) announce(n uint64) {
	b, err := checkpoint.EncodeCompleted(n)
	if err == nil {
		err = co.nc.Publish(checkpoint.CompleteSubject(co.cfg.Contract.Pipeline), b)
	}
	if err != nil {
		co.log.Warn("announcing a completed checkpoint", "checkpoint", n, "err", err)
	}
}

// expected lists the instances that must acknowledge, and the assignment
// version they must run under: an assigned operator's instances as the
// assignment names them, every other operator's registered instances.
func (co *Coordinator) expected(ctx context.Context) ([]string, uint64, error) {
	a, _, err := co.store.Assignment(ctx)
	if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
		return nil, 0, err
	}
	var out []string
	for op, insts := range a.Operators {
		for _, in := range insts {
			out = append(out, op+"/"+in)
		}
	}
	registered, err := co.store.Instances(ctx)
	if err != nil {
		return nil, 0, err
	}
	for k, in := range registered {
		if _, assigned := a.Operators[in.Operator]; !assigned {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out, a.Version, nil
}

// checkpoint runs one checkpoint to completion or abort.
func (co *Coordinator) checkpoint(ctx context.Context, savepoint string) (checkpoint.Record, error) {
	co.mu.Lock()
	co.mu.last++
	n := co.mu.last
	co.mu.Unlock()
	expected, version, err := co.expected(ctx)
	if err != nil {
		return checkpoint.Record{Checkpoint: n}, err
	}
	rec := checkpoint.Record{Checkpoint: n, Status: checkpoint.Pending, Triggered: time.Now().UTC(),
		Expected: expected, Acks: map[string]checkpoint.Ack{}, Savepoint: savepoint, Assignment: version}
	if len(expected) == 0 {
		rec.Status, rec.Reason = checkpoint.Aborted, "no instance is registered"
		return rec, co.store.PutRecord(ctx, rec)
	}
	if err := co.store.PutRecord(ctx, rec); err != nil {
		return rec, err
	}
	co.acks.expect(n, savepoint, expected)
	defer co.acks.expect(0, "", nil)
	t, err := checkpoint.EncodeTrigger(checkpoint.Trigger{Checkpoint: n, At: rec.Triggered, Savepoint: savepoint})
	if err != nil {
		return rec, err
	}
	if err := co.nc.Publish(checkpoint.TriggerSubject(co.cfg.Contract.Pipeline), t); err != nil {
		return rec, err
	}
	timeout := time.NewTimer(co.cfg.Timeout)
	defer timeout.Stop()
	for len(rec.Acks) < len(expected) && rec.Reason == "" {
		select {
		case <-ctx.Done():
			rec.Reason = "coordinator stopped"
		case <-timeout.C:
			rec.Reason = fmt.Sprintf("timed out after %s waiting for %s", co.cfg.Timeout, strings.Join(missing(expected, rec.Acks), ", "))
		case <-co.acks.ready:
		}
		got, refused, why := co.acks.take()
		if refused > 0 && rec.Reason != "" {
			rec.Reason += fmt.Sprintf(" (%d acknowledgements refused, the first: %s)", refused, why)
		}
		for k, a := range got {
			if _, ok := rec.Acks[k]; ok || rec.Reason != "" {
				continue
			}
			a.StartDelay = max(0, a.FirstBarrier.Sub(rec.Triggered))
			rec.Acks[k] = a
			if a.Error != "" {
				rec.Reason = k + ": " + a.Error
			} else if a.Assignment != version {
				// The pipeline is being rescaled: a snapshot of the old
				// layout must not complete a checkpoint of the new.
				rec.Reason = fmt.Sprintf("%s runs assignment version %d, the checkpoint was triggered under version %d", k, a.Assignment, version)
			}
		}
	}
	if _, refused, why := co.acks.take(); refused > 0 {
		co.log.Warn("acknowledgements refused", "checkpoint", n, "refused", refused, "first", why)
	}
	if rec.Reason != "" {
		rec.Status = checkpoint.Aborted
		co.log.Warn("checkpoint aborted", "checkpoint", n, "reason", rec.Reason)
		return rec, co.store.PutRecord(context.WithoutCancel(ctx), rec)
	}
	latest, rev, err := co.store.Latest(ctx)
	if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
		return rec, err
	}
	if latest.Checkpoint >= n {
		rec.Status, rec.Reason = checkpoint.Aborted, fmt.Sprintf("checkpoint %d already completed", latest.Checkpoint)
		return rec, co.store.PutRecord(ctx, rec)
	}
	manifests := map[string]string{}
	for k, a := range rec.Acks {
		manifests[k] = a.Manifest
	}
	rec.Completed = time.Now().UTC()
	if _, err := co.store.Commit(ctx, checkpoint.Latest{Checkpoint: n, Completed: rec.Completed, Manifests: manifests, Assignment: version}, rev); err != nil {
		rec.Status, rec.Reason = checkpoint.Aborted, err.Error()
		if perr := co.store.PutRecord(ctx, rec); perr != nil {
			// The record stays pending; the next leader's takeOver aborts it.
			co.log.Warn("recording an aborted checkpoint", "checkpoint", n, "err", perr)
		}
		return rec, err
	}
	// The commit point: checkpoint n is complete.
	if co.cfg.AfterCommit != nil {
		co.cfg.AfterCommit(n)
	}
	rec.Status = checkpoint.Complete
	if savepoint != "" {
		if err := co.store.PutSavepoint(ctx, savepoint, checkpoint.Latest{Checkpoint: n, Completed: rec.Completed, Manifests: manifests, Assignment: version}); err != nil {
			return rec, err
		}
	}
	if err := co.store.PutRecord(ctx, rec); err != nil {
		return rec, err
	}
	co.announce(n)
	co.log.Info("checkpoint complete", "checkpoint", n, "took", rec.Duration())
	co.collect(ctx)
	return rec, nil
}

// collect removes the snapshots of checkpoints beyond the contract's
// recovery.retained_checkpoints (checkpoint.Collect keeps what savepoints,
// the assignment and checkpoints in progress need). A failure only delays
// the collection to the next checkpoint.
func (co *Coordinator) collect(ctx context.Context) {
	keep := co.cfg.Contract.Recovery.RetainedCheckpoints
	if keep == 0 {
		keep = contracts.DefaultRetainedCheckpoints
	}
	c, err := co.store.Collect(ctx, keep)
	if err != nil {
		co.log.Warn("checkpoint collection failed; it is tried again after the next checkpoint", "err", err)
		return
	}
	if len(c.Checkpoints) > 0 || c.Objects > 0 {
		co.log.Info("checkpoints collected", "checkpoints", c.Checkpoints, "manifests", c.Manifests, "files", c.Objects, "bytes", c.Bytes)
	}
	if len(c.Unreadable) > 0 {
		co.log.Warn("manifests that cannot be read: the files of their operators' buckets are all kept", "keys", c.Unreadable)
	}
}

func missing(expected []string, acks map[string]checkpoint.Ack) []string {
	var out []string
	for _, e := range expected {
		if _, ok := acks[e]; !ok {
			out = append(out, e)
		}
	}
	return out
}

// Memory is the resident memory a coordinator process declares it stays
// under: the Go runtime, its connection and status page, and the
// bookkeeping of one checkpoint at a time, whose acknowledgements are
// bounded by the pipeline's instances. Run sets it as the Go runtime's soft
// limit unless GOMEMLIMIT is set.
const Memory = 64 << 20

// Run runs the coordinator service with command-line args and environment
// (see -h): the NATS server, the pipeline's contract, this coordinator's
// name in the lease, the replicas of the checkpoint buckets (as for the
// operators), the checkpoint interval (default: the contract's), timeout
// and lease, and where to serve the status page.
func Run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, afterCommit func(uint64)) error {
	host, _ := os.Hostname()
	fs := envflag.New("coordinator", getenv, stderr)
	var cfg Config
	var contractPath string
	fs.String(&cfg.NATSURL, "nats", "NATS_URL", "nats://127.0.0.1:4222", "NATS server URL; several, comma-separated, on a cluster")
	cfg.Auth.Flags(fs)
	fs.String(&contractPath, "contract", "WEIR_CONTRACT", "", "the pipeline's contract file")
	fs.String(&cfg.Holder, "instance", "WEIR_INSTANCE", cmp.Or(strings.NewReplacer(".", "-", " ", "-").Replace(host), "coordinator"), "this coordinator's name in the lease")
	fs.Int(&cfg.Replicas, "replicas", "WEIR_REPLICAS", 1, "replicas of the checkpoint buckets, 1 to 5, as the operators' and weir provision's: a bucket with others is refused")
	fs.Duration(&cfg.Interval, "interval", "WEIR_CHECKPOINT_INTERVAL", 0, "time between checkpoints (0: the contract's recovery.checkpoint_interval)")
	fs.Duration(&cfg.Timeout, "timeout", "WEIR_CHECKPOINT_TIMEOUT", 0, "abort a checkpoint not acknowledged in time (0: max(10s, 2 × interval))")
	fs.Duration(&cfg.Lease, "lease", "WEIR_COORDINATOR_LEASE", 0, "how long the lease lasts unless renewed (0: timeout + 2s)")
	fs.String(&cfg.StatusAddr, "status", "WEIR_STATUS_ADDR", "", "serve the status page here, e.g. :8080 (empty: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("coordinator: unexpected arguments %q", fs.Args())
	}
	if contractPath == "" {
		return errors.New("coordinator: contract is required (flag -contract or WEIR_CONTRACT)")
	}
	c, err := contracts.Load(contractPath)
	if err != nil {
		return fmt.Errorf("coordinator: refusing to start: %w", err)
	}
	cfg.Contract = c
	cfg.Logger = slog.New(slog.NewJSONHandler(stderr, nil))
	cfg.AfterCommit = afterCommit
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(Memory)
	}
	co, err := New(cfg)
	if err != nil {
		return err
	}
	return co.Run(ctx)
}
