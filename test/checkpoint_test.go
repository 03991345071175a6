package test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/restore"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/coordinator"
	"github.com/weirflow/weir/services/dedup"
)

// runPipeline runs every operator of the dedup pipeline with state under
// dir until stop is called.
func runPipeline(t *testing.T, url string, c *contracts.Contract, dir string) (rts []*stream.Runtime, stop func()) {
	t.Helper()
	p := streamtest.Run(t, url, c, dir, dedup.Factories(), func(cfg *stream.Config) { cfg.Logger = testLogger(t) })
	return p.Runtimes, p.Stop
}

// runCoordinator runs a coordinator of c named holder — checkpoints every
// 300 ms, and whatever configure changes — until stop or the test's end.
func runCoordinator(t *testing.T, url string, c *contracts.Contract, holder string, configure ...func(*coordinator.Config)) (*coordinator.Coordinator, func()) {
	t.Helper()
	cfg := coordinator.Config{NATSURL: url, Contract: c, Holder: holder,
		Interval: 300 * time.Millisecond, Timeout: 5 * time.Second, Lease: 2 * time.Second, Logger: testLogger(t)}
	for _, f := range configure {
		f(&cfg)
	}
	co, err := coordinator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- co.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("coordinator: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	return co, stop
}

// sinkEvents counts the IDs on the pipeline's json edge of events.
func sinkEvents(t *testing.T, js jetstream.JetStream, c *contracts.Contract) (map[string]int, int) {
	t.Helper()
	counts, total := map[string]int{}, 0
	for _, m := range streamtest.Messages(t, js, edge.StreamName(c.Pipeline, "events")) {
		id := m.Headers().Get(jetstream.MsgIDHeader)
		counts[id[len(c.Pipeline+".events."):]]++
		total++
	}
	return counts, total
}

// sinkExactlyOnce reports, for checkFor, whether the json events edge holds
// every wanted ID once and nothing else.
func sinkExactlyOnce(t *testing.T, js jetstream.JetStream, c *contracts.Contract, want map[string]bool) error {
	t.Helper()
	got, total := sinkEvents(t, js, c)
	if err := checkExactlyOnce(want, got); err != nil {
		return err
	}
	if total != len(want) {
		return fmt.Errorf("sink holds %d events for %d ids", total, len(want))
	}
	return nil
}

// TestCheckpointsRestoreOnANewHost runs the dedup pipeline with a
// coordinator until checkpoints complete, then throws every operator's
// local state away, as a new host would: the operators restore from the
// latest checkpoint in the Object Store, bump their generation, and the
// pipeline continues with no event missing or duplicated at the sink. In
// aligned and unaligned mode.
func TestCheckpointsRestoreOnANewHost(t *testing.T) {
	for _, mode := range []string{contracts.CheckpointAligned, contracts.CheckpointUnaligned} {
		t.Run(mode, func(t *testing.T) {
			srv := natstest.Run(t)
			js := srv.JetStream(t)
			c := loadContract(t)
			c.Recovery.Mode = mode
			ctx := context.Background()

			cfg := genConfig(c, 4000)
			cfg.Gen.Hard.FutureEvery = 0
			want, _ := expected(t, cfg)
			first := cfg
			first.Count = 1500
			publish(t, js, first)
			_, stopPipeline := runPipeline(t, srv.ClientURL(), c, t.TempDir())
			_, stopCoordinator := runCoordinator(t, srv.ClientURL(), c, "co-1")

			store, err := checkpoint.Open(ctx, js, c.Pipeline, 1)
			if err != nil {
				t.Fatal(err)
			}
			// Three complete checkpoints: one may abort while the
			// instances register.
			streamtest.CheckFor(t, 60*time.Second, func() error {
				recs, err := store.Records(ctx)
				complete := 0
				for _, r := range recs {
					if r.Status == checkpoint.Complete {
						complete++
					}
				}
				if err != nil || complete < 3 {
					return fmt.Errorf("%d checkpoints complete (%v)", complete, err)
				}
				return nil
			})
			stopCoordinator()
			// More input is processed after the last checkpoint: a restore
			// rolls it back, and its output of the old generation beyond the
			// checkpoint's cut must be ignored downstream.
			second := cfg
			second.Start, second.Count = 1500, 1000
			publish(t, js, second)
			upTo := cfg
			upTo.Count = 2500
			before, _ := expected(t, upTo)
			streamtest.CheckFor(t, 60*time.Second, func() error {
				if _, total := sinkEvents(t, js, c); total < len(before) {
					return fmt.Errorf("sink at %d of %d", total, len(before))
				}
				return nil
			})
			stopPipeline()
			latest, _, _ := store.Latest(ctx)
			recs, err := store.Records(ctx)
			if err != nil {
				t.Fatal(err)
			}
			complete := 0
			for _, r := range recs {
				if r.Status == checkpoint.Complete {
					complete++
					full, _ := r.Sizes()
					if len(r.Acks) != len(c.Operators) || full == 0 {
						t.Fatalf("checkpoint %d complete with acks %v, %d bytes", r.Checkpoint, r.Acks, full)
					}
				}
			}
			if complete < 3 || len(latest.Manifests) != len(c.Operators) {
				t.Fatalf("%d complete checkpoints, latest %+v", complete, latest)
			}

			// A new host: no local state. The rest of the input arrives.
			rest := cfg
			rest.Start = 2500
			publish(t, js, rest)
			rts, _ := runPipeline(t, srv.ClientURL(), c, t.TempDir())
			streamtest.CheckFor(t, 60*time.Second, func() error {
				return sinkExactlyOnce(t, js, c, want)
			})
			for _, op := range c.Operators {
				f, ok, err := store.Fence(ctx, op.ID, "0")
				if err != nil || !ok {
					t.Fatalf("%s restored without a fence: %v", op.ID, err)
				}
				if f.Generation < 2 {
					t.Fatalf("%s: fence %+v names no new generation", op.ID, f)
				}
			}
			// The restore reads again what came after the checkpoint: at
			// least the second slice, and the rest besides.
			if r := rts[0].Stats().Replayed; r < int64(second.Count) {
				t.Errorf("dedup restored with a replay of %d records, want at least the %d published after its checkpoint", r, second.Count)
			}
			fenced := rts[1].Stats().FencedFrames
			if fenced == 0 {
				t.Fatal("the restored reader ignored no frame of the old generation: the rollback was not exercised")
			}
			t.Logf("%d checkpoints complete, restored from %d, fenced frames %d", complete, latest.Checkpoint, fenced)
		})
	}
}

// v2 is a build of the dedup operator whose state layout changed.
type v2 struct{ *dedup.Operator }

func (v2) SchemaVersion() int { return 2 }

// TestRestoreChecksStateCompatibility: a snapshot written by the previous
// build of an operator (state schema 1) restores into a build that reads
// schema 1, and a build whose state schema is 2 refuses it with a clear
// message instead of misreading it.
func TestRestoreChecksStateCompatibility(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c := loadContract(t)
	publish(t, js, genConfig(c, 500))
	_, stopPipeline := runPipeline(t, srv.ClientURL(), c, t.TempDir())
	_, stopCoordinator := runCoordinator(t, srv.ClientURL(), c, "co")
	ctx := context.Background()
	store, _ := checkpoint.Open(ctx, js, c.Pipeline, 1)
	streamtest.CheckFor(t, 60*time.Second, func() error {
		if l, _, err := store.Latest(ctx); err != nil || l.Checkpoint < 1 {
			return fmt.Errorf("no checkpoint yet (%v)", err)
		}
		return nil
	})
	stopCoordinator()
	stopPipeline()

	restore := func(op operator.Operator) error {
		rt, err := stream.New(stream.Config{NATSURL: srv.ClientURL(), Contract: c, DataDir: filepath.Join(t.TempDir(), "dedup"),
			Operator: "dedup", Instance: "0"}, op)
		if err != nil {
			return err
		}
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- rt.Run(runCtx) }()
		var runErr error
		streamtest.CheckFor(t, 30*time.Second, func() error {
			select {
			case runErr = <-done:
				return nil
			default:
			}
			if rt.Ready() {
				return nil
			}
			return fmt.Errorf("starting")
		})
		return runErr
	}
	if err := restore(v2{dedup.New()}); err == nil || !strings.Contains(err.Error(), "state schema version 1") || !strings.Contains(err.Error(), "reads version 2") {
		t.Fatalf("restoring a schema-1 snapshot into a schema-2 build: %v, want a refusal naming both versions", err)
	}
	if err := restore(dedup.New()); err != nil {
		t.Fatalf("restoring into a compatible build: %v", err)
	}
}

// TestRestoreInterruptedBeforeItsFence puts each operator's snapshot of the
// latest checkpoint in place with the marker a restore writes first, as if
// the process died after the restore and before its fence: at start the
// instances fence their older generations anyway, remove the marker, and
// the pipeline ends with every event exactly once.
func TestRestoreInterruptedBeforeItsFence(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c := loadContract(t)
	ctx := context.Background()
	cfg := genConfig(c, 3000)
	cfg.Gen.Hard.FutureEvery = 0
	want, _ := expected(t, cfg)
	first := cfg
	first.Count = 1200
	publish(t, js, first)
	dir := t.TempDir()
	_, stopPipeline := runPipeline(t, srv.ClientURL(), c, dir)
	_, stopCoordinator := runCoordinator(t, srv.ClientURL(), c, "co-1")
	store, err := checkpoint.Open(ctx, js, c.Pipeline, 1)
	if err != nil {
		t.Fatal(err)
	}
	streamtest.CheckFor(t, 60*time.Second, func() error {
		if l, _, err := store.Latest(ctx); err != nil || l.Checkpoint < 2 {
			return fmt.Errorf("latest checkpoint %d (%v)", l.Checkpoint, err)
		}
		return nil
	})
	stopCoordinator()
	second := cfg
	second.Start, second.Count = 1200, 800
	publish(t, js, second)
	streamtest.CheckFor(t, 60*time.Second, func() error {
		if _, total := sinkEvents(t, js, c); total < 1500 {
			return fmt.Errorf("sink at %d", total)
		}
		return nil
	})
	stopPipeline()
	latest, _, err := store.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gens := map[string]uint64{}
	for _, op := range c.Operators {
		m, err := store.Manifest(ctx, latest.Manifests[op.ID+"/0"])
		if err != nil {
			t.Fatal(err)
		}
		opDir := filepath.Join(dir, op.ID)
		if err := os.RemoveAll(filepath.Join(opDir, "state")); err != nil {
			t.Fatal(err)
		}
		if err := store.Download(ctx, m, filepath.Join(opDir, "state")); err != nil {
			t.Fatal(err)
		}
		if err := restore.WriteMarker(opDir, restore.MarkerOf(m, false)); err != nil {
			t.Fatal(err)
		}
		gens[op.ID] = m.Generation
	}
	rest := cfg
	rest.Start = 2000
	publish(t, js, rest)
	runPipeline(t, srv.ClientURL(), c, dir)
	streamtest.CheckFor(t, 60*time.Second, func() error {
		return sinkExactlyOnce(t, js, c, want)
	})
	for _, op := range c.Operators {
		f, ok, err := store.Fence(ctx, op.ID, "0")
		if err != nil || !ok {
			t.Fatalf("%s did not fence after an interrupted restore: %v", op.ID, err)
		}
		if f.Generation <= gens[op.ID] || f.Checkpoint != latest.Checkpoint {
			t.Fatalf("%s fence %+v, want a generation above %d at checkpoint %d", op.ID, f, gens[op.ID], latest.Checkpoint)
		}
		if _, err := os.Stat(filepath.Join(dir, op.ID, stream.RestoredMarker)); !os.IsNotExist(err) {
			t.Fatalf("%s kept its restore marker after fencing (%v)", op.ID, err)
		}
	}
}
