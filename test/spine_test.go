package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/dedup"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
)

// runDedup runs the dedup operator in this process until stop is called.
func runDedup(t *testing.T, url, dir string) (op *dedup.Operator, rt *stream.Runtime, stop func()) {
	t.Helper()
	op = dedup.New()
	cfg := stream.Config{NATSURL: url, DataDir: dir, Operator: "dedup", Instance: "0", Version: dedup.Version, Logger: testLogger(t), TickInterval: 50 * time.Millisecond}
	cfg.Contract = loadContract(t)
	rt, err := stream.New(cfg, op)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dedup stopped with %v", err)
		}
	}
	t.Cleanup(stop)
	return op, rt, stop
}

// TestGeneratorDedupOutput runs generator → dedup → deduped edge: every
// event comes out exactly once, duplicates are dropped, and bad input —
// future timestamps, a malformed payload, a missing ID, an oversized
// message — is dead-lettered with its coordinate while the rest flows.
func TestGeneratorDedupOutput(t *testing.T) {
	srv := natstest.Run(t)
	nc := srv.Connect(t)
	js, _ := jetstream.New(nc)
	c := loadContract(t)
	cfg := genConfig(c, 3000)
	publish(t, js, cfg)
	want, future := expected(t, cfg)
	ctx := context.Background()
	for _, bad := range [][]byte{
		[]byte(`{"id":"broken"`),
		[]byte(`{"key":"1","ts":1}`),
		make([]byte, c.Ingress.MaxMessageBytes+1),
	} {
		if _, err := js.Publish(ctx, c.Ingress.Subject(1), bad); err != nil {
			t.Fatal(err)
		}
	}

	op, rt, _ := runDedup(t, srv.ClientURL(), t.TempDir())
	streamtest.CheckFor(t, 60*time.Second, func() error {
		got, _ := output(t, js, c)
		return checkExactlyOnce(want, got)
	})
	streamtest.CheckFor(t, 10*time.Second, func() error {
		if s := rt.Stats(); s.DeadLettered != int64(future+3) {
			return errorf("dead-lettered %d, want %d", s.DeadLettered, future+3)
		}
		return nil
	})
	letters := deadLetters(t, js, c)
	if letters["event_time"] != future || letters["payload"] != 2 || letters["id"] != 1 {
		t.Fatalf("dead letters by field = %v, want event_time:%d payload:2 id:1", letters, future)
	}
	if op.Duplicates() == 0 {
		t.Fatal("the generator injected duplicates but dedup dropped none")
	}
	// The instance is discoverable through the micro framework.
	msg, err := nc.Request("$SRV.INFO.weir-dedup", nil, 5*time.Second)
	if err != nil {
		t.Fatalf("$SRV.INFO: %v", err)
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	if info.Metadata["instance"] != "0" || info.Metadata["pipeline"] != "nexmark" || info.Version != dedup.Version {
		t.Fatalf("$SRV.INFO = %+v, want instance 0 of pipeline nexmark at version %s", info, dedup.Version)
	}
	s := rt.Stats()
	if s.StateKeys["seen"] != int64(len(want)) {
		t.Errorf("state holds %d ids, want %d", s.StateKeys["seen"], len(want))
	}
	t.Logf("in %d out %d duplicates %d dead letters %v", s.In, s.Out, op.Duplicates(), letters)
}

// TestDedupRestartKeepsState stops dedup mid-stream and starts it again on
// the same data directory: IDs seen before the restart are still dropped
// when they arrive again, and nothing is lost or duplicated.
func TestDedupRestartKeepsState(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c := loadContract(t)
	dir := t.TempDir()
	cfg := genConfig(c, 4000)
	want, _ := expected(t, cfg)

	first := cfg
	first.Count = 2000
	publish(t, js, first)
	_, rt, stop := runDedup(t, srv.ClientURL(), dir)
	streamtest.CheckFor(t, 60*time.Second, func() error {
		if s := rt.Stats(); s.In+s.DeadLettered < 1900 {
			return errorf("processed %d of the first 2000", s.In+s.DeadLettered)
		}
		return nil
	})
	stop()

	// A producer that lost track re-sends 600 events the first run saw,
	// under new message IDs, so JetStream cannot drop them.
	again := cfg
	again.Producer = "gen-retry"
	again.Count = 600
	publish(t, js, again)
	rest := cfg
	rest.Start = 2000
	publish(t, js, rest)

	op, _, _ := runDedup(t, srv.ClientURL(), dir)
	streamtest.CheckFor(t, 60*time.Second, func() error {
		got, _ := output(t, js, c)
		return checkExactlyOnce(want, got)
	})
	if op.Duplicates() < 500 {
		t.Fatalf("after restart dedup dropped %d duplicates, want at least the 500 re-sent ids it had seen", op.Duplicates())
	}
}

// TestDedupChild is the dedup service run as a child process by
// TestDedupSurvivesKill9; on its own it skips.
func TestDedupChild(t *testing.T) {
	if os.Getenv("WEIR_TEST_CHILD") != "dedup" {
		t.Skip("runs only as the child process of TestDedupSurvivesKill9")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := dedup.Run(ctx, nil, os.Getenv, os.Stderr); err != nil {
		t.Fatal(err)
	}
}

// TestDedupSurvivesKill9 kills the dedup service with SIGKILL again and
// again while events stream in, restarting it each time on the same data
// directory; in the end every event has come out exactly once.
func TestDedupSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("kills real processes")
	}
	srv := natstest.Run(t)
	nc := srv.Connect(t)
	js, _ := jetstream.New(nc)
	c := loadContract(t)
	dir := t.TempDir()
	cfg := genConfig(c, 20000)
	cfg.Rate = 5000
	want, _ := expected(t, cfg)

	pubDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := publishErr(ctx, js, cfg); err != nil {
			pubDone <- err
			return
		}
		pubDone <- nil
	}()

	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	t.Logf("kill schedule seed %d", seed)
	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDedupChild$")
		cmd.Env = append(os.Environ(),
			"WEIR_TEST_CHILD=dedup",
			"NATS_URL="+srv.ClientURL(),
			"WEIR_CONTRACT="+contractPath(t),
			"WEIR_DATA_DIR="+dir,
			"WEIR_INSTANCE=0",
		)
		if testing.Verbose() {
			cmd.Stderr = os.Stderr
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	kills := 0
	for round := 0; round < 5; round++ {
		before, _ := output(t, js, c)
		cmd := start()
		// Let it make some progress, then kill it at a random moment.
		streamtest.CheckFor(t, 60*time.Second, func() error {
			now, _ := output(t, js, c)
			if len(now) <= len(before) && len(before) < len(want) {
				return errorf("no progress yet (%d of %d ids out)", len(now), len(want))
			}
			return nil
		})
		time.Sleep(time.Duration(rng.Intn(400)) * time.Millisecond) // random kill point, not a wait for an outcome
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		kills++
	}
	if err := <-pubDone; err != nil {
		t.Fatal(err)
	}
	cmd := start()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	streamtest.CheckFor(t, 90*time.Second, func() error {
		got, _ := output(t, js, c)
		return checkExactlyOnce(want, got)
	})
	got, total := output(t, js, c)
	if total != len(want) || len(got) != len(want) {
		t.Fatalf("after %d kills the edge holds %d records for %d ids, want %d exactly once", kills, total, len(got), len(want))
	}
	t.Logf("%d kills, %d ids exactly once", kills, len(want))
}

func publishErr(ctx context.Context, js jetstream.JetStream, cfg nexmarkgen.Config) (uint64, error) {
	if _, err := nexmarkgen.EnsureStream(ctx, js, cfg); err != nil {
		return 0, err
	}
	return nexmarkgen.Publish(ctx, js, cfg, time.Now, nil)
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// TestCrashChild runs the dedup operator as a child process that exits
// (like kill -9: no cleanup) right before or right after a chosen step's
// Pebble commit; TestCrashAtCommitPoints starts it. On its own it skips.
func TestCrashChild(t *testing.T) {
	point, at := os.Getenv("WEIR_TEST_CRASH_POINT"), os.Getenv("WEIR_TEST_CRASH_STEP")
	if os.Getenv("WEIR_TEST_CHILD") != "crash" {
		t.Skip("runs only as the child process of TestCrashAtCommitPoints")
	}
	step, _ := strconv.ParseInt(at, 10, 64)
	die := func(n int64) {
		if n == step {
			os.Exit(137)
		}
	}
	cfg := stream.Config{NATSURL: os.Getenv("NATS_URL"), ContractPath: os.Getenv("WEIR_CONTRACT"),
		DataDir: os.Getenv("WEIR_DATA_DIR"), Operator: "dedup", Instance: "0"}
	switch point {
	case "before":
		cfg.Faults = &stream.Faults{BeforeCommit: die}
	case "after":
		cfg.Faults = &stream.Faults{AfterCommit: die}
	}
	rt, err := stream.New(cfg, dedup.New())
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := rt.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCrashAtCommitPoints kills the dedup operator exactly before and
// exactly after its local state update — the Pebble commit of a step — at
// several steps, restarting it each time: the step lost before its commit
// is read again, the step committed but not yet published is published
// from its staged frames, and every event comes out exactly once.
func TestCrashAtCommitPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("kills real processes")
	}
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c := loadContract(t)
	// Enough events that every run finds the step it crashes at: the six
	// runs commit twelve steps and reach a thirteenth, and under backlog a
	// step takes up to max_ack_pending (1024) ingress messages.
	cfg := genConfig(c, 16000)
	publish(t, js, cfg)
	want, _ := expected(t, cfg)
	dir := t.TempDir()
	run := func(point string, step int) error {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$")
		cmd.Env = append(os.Environ(), "WEIR_TEST_CHILD=crash", "NATS_URL="+srv.ClientURL(),
			"WEIR_CONTRACT="+contractPath(t), "WEIR_DATA_DIR="+dir,
			"WEIR_TEST_CRASH_POINT="+point, "WEIR_TEST_CRASH_STEP="+strconv.Itoa(step))
		if testing.Verbose() {
			cmd.Stderr = os.Stderr
		}
		return cmd.Run()
	}
	// Each run crashes at its first step after the ones already committed.
	crashes := 0
	for i, point := range []string{"before", "after", "before", "after", "after", "before"} {
		err := run(point, 1+i%2)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 137 {
			t.Fatalf("run %d (%s commit): %v, want the crash", i, point, err)
		}
		crashes++
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$")
	cmd.Env = append(os.Environ(), "WEIR_TEST_CHILD=crash", "NATS_URL="+srv.ClientURL(),
		"WEIR_CONTRACT="+contractPath(t), "WEIR_DATA_DIR="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	streamtest.CheckFor(t, 60*time.Second, func() error {
		got, total := output(t, js, c)
		if err := checkExactlyOnce(want, got); err != nil {
			return err
		}
		if total != len(want) {
			return fmt.Errorf("edge holds %d records for %d ids", total, len(want))
		}
		return nil
	})
	t.Logf("%d crashes at commit points, %d ids exactly once", crashes, len(want))
}
