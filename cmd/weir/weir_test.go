package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/coordinator"
	"github.com/weirflow/weir/services/dedup"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
)

func weir(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut strings.Builder
	err := run(context.Background(), args, func(string) string { return "" }, &out, &errOut)
	return out.String() + errOut.String(), err
}

// deployment runs the dedup pipeline's operators with state under dir.
func deployment(t *testing.T, url string, c *contracts.Contract, dir string) func() {
	return streamtest.Run(t, url, c, dir, dedup.Factories()).Stop
}

// coordinate runs a checkpoint coordinator for c, triggering every
// interval, until the test ends.
func coordinate(t *testing.T, url string, c *contracts.Contract, interval, timeout time.Duration) {
	t.Helper()
	co, err := coordinator.New(coordinator.Config{NATSURL: url, Contract: c, Holder: "co", Interval: interval, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- co.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// dedupInput is a generator of events for the dedup pipeline's ingress,
// an hour old; publish(start, count) writes events start to start+count.
func dedupInput(t *testing.T, js jetstream.JetStream, c *contracts.Contract, seed int64, events uint64) (publish func(start, count uint64)) {
	gen := nexmarkgen.Config{Stream: c.Ingress.Stream, SubjectPrefix: c.Ingress.SubjectPrefix, Retention: c.Ingress.Retention.D(),
		Producer: "gen", Gen: nexmark.Config{Seed: seed, FirstEventTime: time.Now().Add(-time.Hour), EventsPerSecond: 1000,
			Partitions: c.Ingress.Partitions, KeyGroups: c.State.KeyGroups, Events: events, Hard: nexmark.HardCases{IdlePartition: -1}}}
	return func(start, count uint64) {
		t.Helper()
		g := gen
		g.Start, g.Count = start, count
		ctx := context.Background()
		if _, err := nexmarkgen.EnsureStream(ctx, js, g); err != nil {
			t.Fatal(err)
		}
		if _, err := nexmarkgen.Publish(ctx, js, g, time.Now, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func sinkIDs(t *testing.T, js jetstream.JetStream) (map[string]int, int) {
	ctx := context.Background()
	st, err := js.Stream(ctx, edge.StreamName("nexmark", "events"))
	if err != nil {
		return nil, 0
	}
	info, _ := st.Info(ctx)
	ids, total := map[string]int{}, 0
	if info.State.Msgs == 0 {
		return ids, 0
	}
	cons, _ := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	for i := uint64(0); i < info.State.Msgs; i++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ids[m.Headers().Get(jetstream.MsgIDHeader)]++
		total++
	}
	return ids, total
}

// TestSavepointRestoresIntoAFreshDeployment: `weir savepoint create` takes a
// savepoint of a running pipeline, `weir savepoint restore` puts it into a
// new deployment's empty data directory, and the new deployment continues
// the results with no gap and no duplicate. `weir checkpoint list` shows the
// savepoint's figures.
func TestSavepointRestoresIntoAFreshDeployment(t *testing.T) {
	srv := natstest.Run(t)
	url := srv.ClientURL()
	js := srv.JetStream(t)
	c, err := contracts.Shipped("nexmark-dedup")
	if err != nil {
		t.Fatal(err)
	}
	pub := dedupInput(t, js, c, 2, 3000)
	pub(0, 1000)
	stopOld := deployment(t, url, c, t.TempDir())
	coordinate(t, url, c, time.Hour, 10*time.Second)
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if _, n := sinkIDs(t, js); n < 1000 {
			return fmt.Errorf("sink at %d", n)
		}
		return nil
	})
	var out string
	streamtest.CheckFor(t, 30*time.Second, func() error {
		out, err = weir(t, "savepoint", "create", "before-upgrade", "-nats", url)
		return err
	})
	if !strings.Contains(out, "complete") {
		t.Fatalf("savepoint create:\n%s", out)
	}
	// The old deployment goes on for a while, then is retired.
	pub(1000, 1000)
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if _, n := sinkIDs(t, js); n < 2000 {
			return fmt.Errorf("sink at %d", n)
		}
		return nil
	})
	stopOld()

	list, err := weir(t, "checkpoint", "list", "-nats", url)
	if err != nil || !strings.Contains(list, "START DELAY") || !strings.Contains(list, "before-upgrade") || !strings.Contains(list, "complete") {
		t.Fatalf("checkpoint list (%v):\n%s", err, list)
	}
	sps, err := weir(t, "savepoint", "list", "-nats", url)
	if err != nil || !strings.Contains(sps, "before-upgrade") {
		t.Fatalf("savepoint list (%v):\n%s", err, sps)
	}
	fresh := t.TempDir()
	if out, err := weir(t, "savepoint", "restore", "before-upgrade", "-data", fresh, "-nats", url); err != nil {
		t.Fatalf("savepoint restore: %v\n%s", err, out)
	}
	if out, err := weir(t, "savepoint", "restore", "before-upgrade", "-data", fresh, "-nats", url); err == nil {
		t.Fatalf("restoring over existing state succeeded:\n%s", out)
	}
	stopNew := deployment(t, url, c, fresh)
	defer stopNew()
	pub(2000, 1000)
	streamtest.CheckFor(t, 60*time.Second, func() error {
		ids, total := sinkIDs(t, js)
		if len(ids) < 3000 {
			return fmt.Errorf("sink holds %d ids", len(ids))
		}
		if total != len(ids) {
			return fmt.Errorf("sink holds %d messages for %d ids: duplicates", total, len(ids))
		}
		return nil
	})
	t.Logf("checkpoint list:\n%s", list)
}
