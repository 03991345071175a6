package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/coordinator"
)

// TestCoordinatorChild is the coordinator run as a child process by
// TestCoordinatorDiesAfterCommit; on its own it skips.
func TestCoordinatorChild(t *testing.T) {
	if os.Getenv("WEIR_TEST_CHILD") != "coordinator" {
		t.Skip("runs only as the child process of TestCoordinatorDiesAfterCommit")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	var die func(uint64)
	if os.Getenv("WEIR_TEST_DIE_AFTER_COMMIT") != "" {
		// Die the way kill -9 would, between the commit point and the
		// announcement of the first checkpoint.
		die = func(uint64) { os.Exit(137) }
	}
	if err := coordinator.Run(ctx, nil, os.Getenv, os.Stderr, die); err != nil {
		t.Fatal(err)
	}
}

// TestCoordinatorDiesAfterCommit kills the leading coordinator — a real
// process — right after it committed checkpoint 1 and before it announced
// it. The standby takes the lease over, finds checkpoint 1 committed but
// still pending in the log, marks it complete and announces it, and goes
// on with checkpoint 2: nothing is committed twice and no checkpoint is
// lost.
func TestCoordinatorDiesAfterCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a real process")
	}
	srv := natstest.Run(t)
	nc := srv.Connect(t)
	js, _ := jetstream.New(nc)
	c := loadContract(t)
	cfg := genConfig(c, 500)
	publish(t, js, cfg)
	runPipeline(t, srv.ClientURL(), c, t.TempDir())

	announced := make(chan uint64, 16)
	sub, err := nc.Subscribe("weir.ctl."+c.Pipeline+".checkpoint.complete", func(m *nats.Msg) {
		var v struct{ Checkpoint uint64 }
		if json.Unmarshal(m.Data, &v) == nil {
			announced <- v.Checkpoint
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	child := exec.Command(os.Args[0], "-test.run=^TestCoordinatorChild$")
	child.Env = append(os.Environ(), "WEIR_TEST_CHILD=coordinator", "WEIR_TEST_DIE_AFTER_COMMIT=1", "NATS_URL="+srv.ClientURL(),
		"WEIR_CONTRACT="+contractPath(t), "WEIR_INSTANCE=leader",
		"WEIR_CHECKPOINT_INTERVAL=300ms", "WEIR_CHECKPOINT_TIMEOUT=5s", "WEIR_COORDINATOR_LEASE=1s")
	if testing.Verbose() {
		child.Stderr = os.Stderr
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- child.Wait() }()
	// The standby starts once the child holds the lease, and waits.
	ctx := context.Background()
	store, err := checkpoint.Open(ctx, js, c.Pipeline, 1)
	if err != nil {
		t.Fatal(err)
	}
	streamtest.CheckFor(t, 30*time.Second, func() error {
		holder, err := store.LeaseHolder(ctx)
		if err != nil {
			return err
		}
		if holder != "leader" {
			return fmt.Errorf("lease held by %q", holder)
		}
		return nil
	})
	standby, _ := runCoordinator(t, srv.ClientURL(), c, "standby")

	select {
	case err := <-waitErr:
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 137 {
			t.Fatalf("leader ended with %v, want exit 137 after its commit", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the leader never committed a checkpoint")
	}
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if !standby.Leader() {
			return fmt.Errorf("standby not leading yet")
		}
		l, _, err := store.Latest(ctx)
		if err != nil || l.Checkpoint < 2 {
			return fmt.Errorf("latest %d (%v)", l.Checkpoint, err)
		}
		return nil
	})
	r1, err := store.GetRecord(ctx, 1)
	if err != nil || r1.Status != checkpoint.Complete {
		t.Fatalf("checkpoint 1: %+v, %v; want complete, re-announced by the standby", r1, err)
	}
	got := map[uint64]bool{}
	timeout := time.After(10 * time.Second)
	for !got[1] || !got[2] {
		select {
		case n := <-announced:
			got[n] = true
		case <-timeout:
			t.Fatalf("announcements %v, want 1 (by the standby) and 2", got)
		}
	}
	// The latest key moved once per checkpoint: 1, then 2, …
	kv, err := js.KeyValue(ctx, checkpoint.BucketName(c.Pipeline))
	if err != nil {
		t.Fatal(err)
	}
	hist, err := kv.History(ctx, "latest")
	if err != nil {
		t.Fatal(err)
	}
	var seen []uint64
	for _, e := range hist {
		var l checkpoint.Latest
		_ = json.Unmarshal(e.Value(), &l)
		if len(seen) > 0 && l.Checkpoint <= seen[len(seen)-1] {
			t.Fatalf("latest went %v then %d: a checkpoint committed twice or backwards", seen, l.Checkpoint)
		}
		seen = append(seen, l.Checkpoint)
	}
	if len(seen) == 0 || seen[0] != 1 {
		t.Fatalf("latest history %v, want to start at 1", seen)
	}
}
