package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/dispatcher"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/status"
	"github.com/weirflow/weir/outbox"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/coordinator"
	"github.com/weirflow/weir/services/dedup"
	"github.com/weirflow/weir/services/provider"
)

// transactional is the dedup contract with a transactional result edge.
func transactional(t testing.TB) *contracts.Contract {
	t.Helper()
	c := loadContract(t)
	c.Sink.Effect, c.Sink.MaxPendingEpochs = contracts.EffectTransactional, 2
	if ps := c.Lint(); len(ps) > 0 {
		t.Fatalf("transactional dedup contract: %v", ps)
	}
	return c
}

// committed reads the dedup pipeline's result stream as a reader of
// committed results does: results by ID, the commit markers apart. It
// fails on a result that carries a Nats-Msg-Id — a transactional edge must
// not lean on the duplicate window — or no epoch.
func committed(t testing.TB, js jetstream.JetStream, c *contracts.Contract) (ids map[string]int, epochs map[uint64]int, markers int) {
	t.Helper()
	ids, epochs = map[string]int{}, map[uint64]int{}
	prefix := c.Pipeline + ".events."
	for _, m := range streamtest.Messages(t, js, edge.StreamName(c.Pipeline, "events")) {
		if edge.IsCommitMarker(m.Headers()) {
			markers++
			continue
		}
		if id := m.Headers().Get(jetstream.MsgIDHeader); id != "" {
			t.Fatalf("result %s carries Nats-Msg-Id %s", m.Subject(), id)
		}
		n, err := strconv.ParseUint(m.Headers().Get(edge.HeaderEpoch), 10, 64)
		if err != nil {
			t.Fatalf("result on %s without an epoch: %v", m.Subject(), err)
		}
		epochs[n]++
		ids[strings.TrimPrefix(m.Headers().Get(edge.HeaderResultID), prefix)]++
	}
	return ids, epochs, markers
}

// inSlices splits n·size generated messages into n slices: feed(i)
// publishes slice i; want lists the IDs all of them must bring out.
func inSlices(t testing.TB, js jetstream.JetStream, c *contracts.Contract, size, n int) (feed func(i int), want map[string]bool) {
	all := genConfig(c, uint64(size*n))
	all.Count = uint64(size * n) // messages, duplicates included
	want, _ = expected(t, all)
	return func(i int) {
		cfg := all
		cfg.Start, cfg.Count = uint64(i*size), uint64(size)
		publish(t, js, cfg)
	}, want
}

// checkEpochsComplete fails unless every epoch a result carries is a
// checkpoint the coordinator completed.
func checkEpochsComplete(t testing.TB, ctx context.Context, store *checkpoint.Store, epochs map[uint64]int) {
	t.Helper()
	for n, k := range epochs {
		r, err := store.GetRecord(ctx, n)
		if err != nil || r.Status != checkpoint.Complete {
			t.Errorf("%d results of epoch %d, whose checkpoint is %q (%v): visible before it completed", k, n, r.Status, err)
		}
	}
}

// TestTransactionalChild runs the dedup pipeline's publish operator, which
// writes the transactional result edge, as a child process that exits like
// kill -9 at a chosen point: before its first step's commit (the epoch's
// results not yet prepared), after it (prepared: held in the state), or
// after its first batch of results is stored and before they are released
// from the state. TestTransactionalResultsSurviveKills starts it.
func TestTransactionalChild(t *testing.T) {
	if os.Getenv("WEIR_TEST_CHILD") != "transactional" {
		t.Skip("runs only as the child process of TestTransactionalResultsSurviveKills")
	}
	die := func(int64) { os.Exit(137) }
	cfg := stream.Config{NATSURL: os.Getenv("NATS_URL"), Contract: transactional(t), DataDir: os.Getenv("WEIR_DATA_DIR"),
		Operator: "publish", Instance: "0", Version: dedup.Version, TickInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)).With("crash_point", os.Getenv("WEIR_TEST_CRASH_POINT"))}
	switch os.Getenv("WEIR_TEST_CRASH_POINT") {
	case "before":
		cfg.Faults = &stream.Faults{BeforeCommit: die}
	case "after":
		cfg.Faults = &stream.Faults{AfterCommit: die}
	case "released":
		cfg.Faults = &stream.Faults{AfterRelease: die}
	}
	o, err := dedup.Factories()["publish"](cfg.Contract)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := stream.New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := rt.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestTransactionalResultsSurviveKills runs the dedup pipeline with a
// transactional result edge. Results wait for their checkpoint: with no
// coordinator running, none is visible. Then the result operator, a real
// process, is killed with SIGKILL before an epoch's results are prepared,
// after they are prepared, and after their commit is acknowledged and
// before they are released — twice each, new input arriving before each
// run. At the end a reader of the result stream sees every result exactly
// once, each in an epoch whose checkpoint completed, and no result carries
// a Nats-Msg-Id: the duplicate window played no part.
func TestTransactionalResultsSurviveKills(t *testing.T) {
	if testing.Short() {
		t.Skip("kills real processes")
	}
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c := transactional(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	points := []string{"before", "after", "released", "before", "after", "released"}
	feed, want := inSlices(t, js, c, 1000, len(points)+1)
	feed(0)

	dir := t.TempDir()
	startDedup := func() (stop func()) {
		o, err := dedup.Factories()["dedup"](c)
		if err != nil {
			t.Fatal(err)
		}
		rt, err := stream.New(stream.Config{NATSURL: srv.ClientURL(), Contract: c, DataDir: filepath.Join(dir, "dedup"),
			Operator: "dedup", Instance: "0", Version: dedup.Version, TickInterval: 50 * time.Millisecond, Logger: testLogger(t)}, o)
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- rt.Run(rctx) }()
		stop = func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("dedup: %v", err)
			}
		}
		t.Cleanup(func() {
			select {
			case <-rctx.Done():
			default:
				stop()
			}
		})
		return stop
	}
	stopDedup := startDedup()
	child := func(point string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTransactionalChild$")
		cmd.Env = append(os.Environ(), "WEIR_TEST_CHILD=transactional", "NATS_URL="+srv.ClientURL(),
			"WEIR_DATA_DIR="+filepath.Join(dir, "publish"), "WEIR_TEST_CRASH_POINT="+point)
		if testing.Verbose() {
			cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		}
		return cmd
	}

	// No coordinator, no completed checkpoint: the results are held.
	first := child("")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	var released int64
	nc := srv.Connect(t)
	streamtest.CheckFor(t, 30*time.Second, func() error {
		st, err := status.RequestStats(ctx, nc, c.Pipeline, "publish", "0")
		if err != nil {
			return err
		}
		if st.In == 0 || st.Out < st.In {
			return fmt.Errorf("publish has taken %d records and emitted %d", st.In, st.Out)
		}
		released = st.Released
		return nil
	})
	if ids, _, markers := committed(t, js, c); len(ids) > 0 || markers > 0 || released > 0 {
		t.Fatalf("with no checkpoint completed, %d results and %d commit markers are visible (%d released)", len(ids), markers, released)
	}
	_ = first.Process.Signal(syscall.SIGKILL)
	_ = first.Wait()

	co, err := coordinator.New(coordinator.Config{NATSURL: srv.ClientURL(), Contract: c, Holder: "co",
		// A checkpoint may take seconds on a loaded machine: one that times
		// out is retried, but one that always does never releases anything.
		Interval: 200 * time.Millisecond, Timeout: 5 * time.Second, Lease: 2 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, "coordinator", co.Run)

	crash := func(i int, point string) {
		cmd := child(point)
		// The child's log, to say what it was doing if it never crashes.
		var log bytes.Buffer
		if cmd.Stderr == nil {
			cmd.Stderr = &log
		}
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 137 {
				t.Fatalf("run %d (%s): %v, want the crash", i, point, err)
			}
		case <-time.After(90 * time.Second):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-done
			tail := log.Bytes()
			tail = tail[max(0, len(tail)-4000):]
			t.Fatalf("run %d (%s) did not reach its crash point in 90s; the end of its log:\n%s", i, point, tail)
		}
	}
	for i, point := range points {
		if i > 0 {
			feed(i)
		}
		crash(i, point)
	}
	store, err := checkpoint.Open(ctx, js, c.Pipeline, 1)
	if err != nil {
		t.Fatal(err)
	}

	// The last input's results are released after its checkpoint C
	// completes, and the result operator dies after their first batch is
	// stored. Then new hosts: the pipeline's local state is gone, and both
	// operators restore C — whose snapshot of the result operator holds
	// every one of those results, the stored ones too — and replay their
	// input from C's positions. The markers say what is stored: the
	// replay adds nothing, with no Nats-Msg-Id to lean on.
	feed(len(points))
	crash(len(points), "released")
	stopDedup()
	restored, _, err := store.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	startDedup()
	last := child("")
	if err := last.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = last.Process.Signal(syscall.SIGTERM)
		_ = last.Wait()
	}()
	var epochs map[uint64]int
	var markers int
	streamtest.CheckFor(t, 60*time.Second, func() error {
		var ids map[string]int
		ids, epochs, markers = committed(t, js, c)
		return checkExactlyOnce(want, ids)
	}, func() string {
		var b strings.Builder
		for _, name := range []string{c.Ingress.Stream, edge.StreamName(c.Pipeline, "deduped"), edge.StreamName(c.Pipeline, "events")} {
			n, err := countStream(ctx, js, name)
			fmt.Fprintf(&b, "%s holds %d (%v); ", name, n, err)
		}
		for _, op := range []string{"dedup", "publish"} {
			st, err := status.RequestStats(ctx, nc, c.Pipeline, op, "0")
			fmt.Fprintf(&b, "%s: %+v (%v); ", op, st, err)
		}
		return b.String()
	})
	checkEpochsComplete(t, ctx, store, epochs)
	t.Logf("%d kills, then a restore of checkpoint %d on new hosts: %d results exactly once in %d epochs under %d commit markers",
		len(points)+1, restored.Checkpoint, len(want), len(epochs), markers)
}

// TestTransactionalSinkBackpressures holds checkpoints back — an instance
// registered that never acknowledges makes every checkpoint abort after
// its snapshots — so the result operator cuts epoch after epoch that
// never completes. At max_pending_epochs it stops reading: new input waits
// on its edge as lag, nothing is visible, and once checkpoints complete
// again everything drains, exactly once.
func TestTransactionalSinkBackpressures(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a pipeline and its coordinator")
	}
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c := transactional(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const slice = 500
	feed, want := inSlices(t, js, c, slice, 3)
	store, err := checkpoint.Open(ctx, js, c.Pipeline, 1)
	if err != nil {
		t.Fatal(err)
	}
	ghost := checkpoint.Instance{Operator: "ghost", Instance: "0", Started: time.Now().UTC()}
	if err := store.Register(ctx, ghost); err != nil {
		t.Fatal(err)
	}
	feed(0)
	p := streamtest.Run(t, srv.ClientURL(), c, t.TempDir(), dedup.Factories())
	co, err := coordinator.New(coordinator.Config{NATSURL: srv.ClientURL(), Contract: c, Holder: "co",
		Interval: 100 * time.Millisecond, Timeout: 2 * time.Second, Lease: 2 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, "coordinator", co.Run)
	sink, source := p.ByID["publish"], p.ByID["dedup"]
	held := func(n int64) {
		t.Helper()
		streamtest.CheckFor(t, 30*time.Second, func() error {
			if st := sink.Stats(); st.HeldEpochs != n || st.Released != 0 {
				return fmt.Errorf("the result operator holds %d epochs and released %d results, want %d held and none released", st.HeldEpochs, st.Released, n)
			}
			return nil
		})
	}
	held(1)
	feed(1)
	held(2)
	in := sink.Stats().In
	feed(2)
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if st := source.Stats(); st.In+st.DeadLettered < 3*slice {
			return fmt.Errorf("dedup has taken %d and dead-lettered %d of %d", st.In, st.DeadLettered, 3*slice)
		}
		return nil
	})
	time.Sleep(time.Second) // what an unblocked operator would take in a few steps; the check is that it took nothing
	if st := sink.Stats(); st.In != in || st.HeldEpochs != 2 {
		t.Fatalf("holding %d epochs of a bound of 2, the result operator took %d more records (%d epochs held)", st.HeldEpochs, st.In-in, st.HeldEpochs)
	}
	if ids, _, markers := committed(t, js, c); len(ids) > 0 || markers > 0 {
		t.Fatalf("no checkpoint completed, yet %d results and %d markers are visible", len(ids), markers)
	}

	if err := store.Deregister(ctx, ghost.Operator, ghost.Instance); err != nil {
		t.Fatal(err)
	}
	var epochs map[uint64]int
	streamtest.CheckFor(t, 30*time.Second, func() error {
		var ids map[string]int
		ids, epochs, _ = committed(t, js, c)
		return checkExactlyOnce(want, ids)
	})
	// The held epochs' checkpoints aborted: the results carry the one that
	// completed and released them.
	checkEpochsComplete(t, ctx, store, epochs)
	t.Logf("held 2 epochs and stopped at %d records; drained %d results once checkpoints completed", in, len(want))
}

// TestTransactionalResultsSurviveRescale scales the transactional result
// operator from one instance to two. The checkpoint the rescale restarts
// from holds, in the old instance's snapshot, results it published after
// the checkpoint completed; the new instance owning its first partition
// inherits them with the old writer's name, finds them stored by the old
// writer's commit marker, and releases them unpublished. Every result is
// in the stream exactly once, before and after.
func TestTransactionalResultsSurviveRescale(t *testing.T) {
	if testing.Short() {
		t.Skip("rescales a pipeline")
	}
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c := transactional(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	feed, want := inSlices(t, js, c, 600, 3)
	store, err := checkpoint.Open(ctx, js, c.Pipeline, 1)
	if err != nil {
		t.Fatal(err)
	}
	assign := func(publish ...string) checkpoint.Assignment {
		t.Helper()
		a, err := checkpoint.Rescale(ctx, js, c, map[string][]string{"dedup": {"d0"}, "publish": publish}, "")
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	dir := t.TempDir()
	runs := map[string]*stream.Runtime{}
	start := func(op, inst string) {
		o, err := dedup.Factories()[op](c)
		if err != nil {
			t.Fatal(err)
		}
		rt, err := stream.New(stream.Config{NATSURL: srv.ClientURL(), Contract: c, DataDir: filepath.Join(dir, op, inst),
			Operator: op, Instance: inst, Version: dedup.Version, TickInterval: 20 * time.Millisecond, Logger: testLogger(t)}, o)
		if err != nil {
			t.Fatal(err)
		}
		runUntilCleanup(t, op+"/"+inst, rt.Run)
		runs[op+"/"+inst] = rt
	}
	// settled waits until dedup has taken n messages and the result
	// operator has released every result it emitted.
	settled := func(n int64) {
		t.Helper()
		streamtest.CheckFor(t, 60*time.Second, func() error {
			d := runs["dedup/d0"].Stats()
			if d.In+d.DeadLettered < n {
				return fmt.Errorf("dedup has taken %d of %d", d.In+d.DeadLettered, n)
			}
			var in, out, released int64
			for name, rt := range runs {
				if strings.HasPrefix(name, "publish/") {
					st := rt.Stats()
					in, out, released = in+st.In, out+st.Out, released+st.Released
				}
			}
			if in < d.Out || released < out {
				return fmt.Errorf("dedup emitted %d; the result operators took %d, emitted %d, released %d", d.Out, in, out, released)
			}
			return nil
		})
	}

	assign("p0")
	start("dedup", "d0")
	start("publish", "p0")
	_, stop := runCoordinator(t, srv.ClientURL(), c, "co-1")
	feed(0)
	settled(600)
	// The next input's results are held in an epoch whose checkpoint is
	// the last before the rescale: released once it completes, and still
	// in that checkpoint's snapshot.
	stop()
	feed(1)
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if d, p := runs["dedup/d0"].Stats(), runs["publish/p0"].Stats(); d.In+d.DeadLettered < 1200 || p.In < d.Out {
			return fmt.Errorf("dedup has taken %d of 1200, emitted %d; publish took %d", d.In+d.DeadLettered, d.Out, p.In)
		}
		return nil
	})
	_, stop = runCoordinator(t, srv.ClientURL(), c, "co-2")
	settled(1200)
	stop()

	a := assign("p0", "p1")
	start("publish", "p1")
	runCoordinator(t, srv.ClientURL(), c, "co-3")
	feed(2)
	streamtest.CheckFor(t, 60*time.Second, func() error {
		ids, _, _ := committed(t, js, c)
		return checkExactlyOnce(want, ids)
	})
	inherited := runs["publish/p0"].Stats().AlreadyStored
	if inherited == 0 {
		t.Fatalf("the rescale from checkpoint %d carried no held result to the heir: the test did not exercise what it is for", a.Checkpoint)
	}
	ids, epochs, markers := committed(t, js, c)
	checkEpochsComplete(t, ctx, store, epochs)
	t.Logf("rescaled from checkpoint %d: the heir found %d inherited results stored; %d results exactly once under %d commit markers", a.Checkpoint, inherited, len(ids), markers)
}

// intentsOperator records, for each record, an intent to charge for it:
// keyed by its source coordinate, so a replay mints the same key.
func intentsOperator(pipeline string) stream.Factory {
	return func(*contracts.Contract) (operator.Operator, error) {
		return operator.Func(func(env operator.Env, r record.Record) error {
			in := outbox.Intent{Key: outbox.Key(pipeline, "publish", r.At, 0), Kind: "charges",
				Payload: json.RawMessage(fmt.Sprintf(`{"event":%q}`, r.ID)), Source: r.At.String()}
			rec, err := in.Record(r.Time)
			if err != nil {
				return err
			}
			return env.Emit(rec)
		}), nil
	}
}

// TestOutboxEffectsHappenOnce runs the dedup pipeline with its result
// operator recording an intent per event into an outbox (sink.effect
// outbox), its coordinator, the dispatcher configured from the contract
// and the provider simulator, which fails, loses answers and refuses
// nothing: every event is charged exactly once, under its intent's key,
// and only once its checkpoint completed.
func TestOutboxEffectsHappenOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a pipeline, its coordinator and the dispatcher")
	}
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c := loadContract(t)
	c.Sink.Effect, c.Sink.MaxPendingEpochs = contracts.EffectOutbox, 2
	if ps := c.Lint(); len(ps) > 0 {
		t.Fatal(ps)
	}
	feed, want := inSlices(t, js, c, 1000, 1)
	feed(0)
	p := provider.New()
	hs := httptest.NewServer(p)
	defer hs.Close()
	control(t, hs.URL, provider.Control{Fail: 5, FailAfter: 5})
	factories := map[string]stream.Factory{"dedup": dedup.Factories()["dedup"], "publish": intentsOperator(c.Pipeline)}
	streamtest.Run(t, srv.ClientURL(), c, t.TempDir(), factories)
	runCoordinator(t, srv.ClientURL(), c, "co")
	cfg, err := dispatcher.ForContract(c, hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Backoff, cfg.MaxBackoff, cfg.Timeout, cfg.Logger = 10*time.Millisecond, 50*time.Millisecond, time.Second, testLogger(t)
	d, err := dispatcher.New(context.Background(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, "dispatcher", d.Run)
	streamtest.CheckFor(t, 60*time.Second, func() error { return checkCharged(p, want) })
	t.Logf("%d events charged exactly once in %d provider requests", len(want), p.Requests())
}

// checkCharged returns nil once the provider performed one effect per
// event of want, each under a key of its own.
func checkCharged(p *provider.Provider, want map[string]bool) error {
	effects := p.Effects()
	charged := map[string]int{}
	keys := map[string]bool{}
	for _, e := range effects {
		var b struct {
			Event string `json:"event"`
		}
		if err := json.Unmarshal(e.Payload, &b); err != nil {
			return err
		}
		charged[b.Event]++
		keys[e.Key] = true
	}
	if len(keys) != len(effects) {
		return fmt.Errorf("%d effects under %d keys", len(effects), len(keys))
	}
	return checkExactlyOnce(want, charged)
}
