package test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/nexmark"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/pkg/window"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
	q7 "github.com/weirflow/weir/services/nexmark-q7"
)

// startOperators runs every operator of service in the contract and returns
// their runtimes by operator ID.
func startOperators(t *testing.T, url string, c *contracts.Contract, service string, factories map[string]stream.Factory) map[string]*stream.Runtime {
	t.Helper()
	dir := t.TempDir()
	rts := map[string]*stream.Runtime{}
	var list []*stream.Runtime
	for _, op := range c.Operators {
		if op.Service != service {
			continue
		}
		o, err := factories[op.ID](c)
		if err != nil {
			t.Fatal(err)
		}
		rt, err := stream.New(stream.Config{NATSURL: url, Contract: c, DataDir: filepath.Join(dir, op.ID),
			Operator: op.ID, Instance: "0", TickInterval: 20 * time.Millisecond, Logger: testLogger(t)}, o)
		if err != nil {
			t.Fatal(err)
		}
		rts[op.ID] = rt
		list = append(list, rt)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- stream.RunGroup(ctx, list...) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", service, err)
		}
	})
	return rts
}

// TestIdlePartitionThenLateData silences one ingress partition of q7 for
// longer than the idle timeout: the watermark does not wait for it. When
// the partition speaks again with its held-back, now old events, those
// within the allowed lateness update their windows as LATE panes, and
// those beyond it go to the side output with their coordinates.
func TestIdlePartitionThenLateData(t *testing.T) {
	if testing.Short() {
		t.Skip("paced in wall-clock time")
	}
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c, err := contracts.Shipped("nexmark-q7")
	if err != nil {
		t.Fatal(err)
	}
	// 100 events per second of event time, published at 500 per second:
	// partition 2 falls silent from event 1000 (10s) to 4500 (45s), seven
	// seconds of wall-clock time, more than the 2s idle timeout.
	first := time.Now().Add(-time.Hour).Truncate(10 * time.Second)
	gen := nexmarkgen.Config{
		Stream: c.Ingress.Stream, SubjectPrefix: c.Ingress.SubjectPrefix, Retention: c.Ingress.Retention.D(),
		Producer: "gen-idle", Rate: 500,
		Gen: nexmark.Config{
			Seed: 3, FirstEventTime: first, EventsPerSecond: 100,
			Partitions: c.Ingress.Partitions, KeyGroups: c.State.KeyGroups,
			OutOfOrder: 200 * time.Millisecond, Events: 6000,
			Hard: nexmark.HardCases{IdlePartition: 2, IdleFrom: 1000, IdleTo: 4500},
		},
	}
	rts := startOperators(t, srv.ClientURL(), c, q7.Service, q7.Factories())
	var published atomic.Uint64
	pubErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := nexmarkgen.EnsureStream(ctx, js, gen); err != nil {
			pubErr <- err
			return
		}
		_, err := nexmarkgen.Publish(ctx, js, gen, time.Now, func(n uint64) { published.Store(n) })
		pubErr <- err
	}()

	// While partition 2 is silent the watermark moves on without it.
	silentSince := first.Add(10 * time.Second)
	streamtest.CheckFor(t, 60*time.Second, func() error {
		wm := rts["q7-max"].Stats().Watermark
		if n := published.Load(); n >= 4400 {
			t.Fatalf("partition 2 speaks again (published %d) and the watermark %v never passed its silence at %v", n, wm, silentSince)
		}
		if !wm.After(silentSince.Add(10 * time.Second)) {
			return fmt.Errorf("watermark %v", wm)
		}
		return nil
	})
	if err := <-pubErr; err != nil {
		t.Fatal(err)
	}
	streamtest.CheckFor(t, 60*time.Second, func() error {
		if s := rts["q7-max"].Stats(); s.SideOutput == 0 {
			return fmt.Errorf("no side output yet (in %d)", s.In)
		}
		return nil
	})
	late := 0
	streamtest.CheckFor(t, 30*time.Second, func() error {
		late = 0
		for _, p := range resultPanes(t, js, c) {
			if p.Info.Timing == window.Late {
				late++
			}
		}
		if late == 0 {
			return fmt.Errorf("no LATE pane")
		}
		return nil
	})
	letters := sideLetters(t, js, c)
	if len(letters) == 0 {
		t.Fatal("no side-output letter in the stream")
	}
	for _, l := range letters {
		if l.At.Stream != "NEXMARK" || l.At.Seq == 0 || l.Reason == "" {
			t.Fatalf("side output without coordinate or reason: %+v", l)
		}
	}
	t.Logf("%d late panes, %d side outputs, e.g. %s: %s", late, len(letters), letters[0].At, letters[0].Reason)
}
