package test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/audit"
	"github.com/weirflow/weir/pkg/checkpoint"
	"github.com/weirflow/weir/pkg/deadletter"
	"github.com/weirflow/weir/pkg/edge"
	"github.com/weirflow/weir/pkg/jsapi"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/coordinator"
	"github.com/weirflow/weir/services/dedup"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
)

// TestClusterSurvivesANodeDying runs the dedup pipeline and its coordinator
// on a three-node JetStream cluster with replicas 3: every stream and
// bucket of the pipeline is created with three replicas placed on the
// three nodes. Then the node leading the pipeline's first edge dies. The
// clients reconnect to the survivors, the streams elect new leaders, the
// rest of the input is processed, every event reaches the sink exactly
// once, and checkpoints triggered after the death complete.
func TestClusterSurvivesANodeDying(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a three-node cluster")
	}
	start := time.Now()
	const replicas = 3
	cl := natstest.RunCluster(t, 3)
	urls := cl.ClientURLs()
	js, err := jetstream.New(cl.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := contracts.Shipped("nexmark-dedup")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	cfg := genConfig(c, 3000)
	cfg.Replicas = replicas
	want, future := expected(t, cfg)
	first := cfg
	first.Count = 1500
	publishRetrying(t, ctx, js, first)
	// Each phase says when it ended: a run that fails on time says where
	// the time went.
	t.Logf("first half of the input stored after %s", time.Since(start).Round(time.Millisecond))

	dir := t.TempDir()
	var rts []*stream.Runtime
	for _, op := range c.Operators {
		o, err := dedup.Factories()[op.ID](c)
		if err != nil {
			t.Fatal(err)
		}
		rt, err := stream.New(stream.Config{NATSURL: urls, Replicas: replicas, Contract: c, DataDir: filepath.Join(dir, op.ID),
			Operator: op.ID, Instance: "0", Version: dedup.Version, TickInterval: 20 * time.Millisecond, Logger: testLogger(t)}, o)
		if err != nil {
			t.Fatal(err)
		}
		rts = append(rts, rt)
	}
	runUntilCleanup(t, "pipeline", func(ctx context.Context) error { return stream.RunGroup(ctx, rts...) })
	co, err := coordinator.New(coordinator.Config{NATSURL: urls, Replicas: replicas, Contract: c, Holder: "co",
		Interval: 300 * time.Millisecond, Timeout: 5 * time.Second, Lease: 2 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, "coordinator", co.Run)

	// Opened with the pipeline's replicas: opening with fewer would scale
	// the buckets down.
	store, err := checkpoint.Open(ctx, js, c.Pipeline, replicas)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pipeline and coordinator started, buckets open after %s", time.Since(start).Round(time.Millisecond))
	sink := edge.StreamName(c.Pipeline, "events")
	streamtest.CheckFor(t, 60*time.Second, func() error {
		if l, _, err := store.Latest(ctx); err != nil || l.Checkpoint < 1 {
			return fmt.Errorf("no checkpoint yet (%v)", err)
		}
		if n, err := countStream(ctx, js, sink); err != nil || n == 0 {
			return fmt.Errorf("sink empty (%v)", err)
		}
		return nil
	})

	// Every stream of the pipeline — the user's ingress, created by the
	// generator, and weir's own — has three replicas on three nodes.
	bucket := checkpoint.BucketName(c.Pipeline)
	wantStreams := []string{c.Ingress.Stream, deadletter.StreamName(c.Pipeline), audit.StreamName(c.Pipeline), "KV_" + bucket, "OBJ_" + bucket}
	for _, e := range c.Edges {
		wantStreams = append(wantStreams, edge.StreamName(c.Pipeline, e.Name))
	}
	var have []string
	for info := range js.ListStreams(ctx).Info() {
		have = append(have, info.Config.Name)
		if info.Config.Replicas != replicas || info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != replicas-1 {
			t.Errorf("stream %s: %d replicas configured, cluster %+v; want %d placed on the cluster", info.Config.Name, info.Config.Replicas, info.Cluster, replicas)
		}
	}
	slices.Sort(have)
	slices.Sort(wantStreams)
	if !slices.Equal(have, wantStreams) {
		t.Fatalf("streams %v, want %v", have, wantStreams)
	}
	if t.Failed() {
		t.FailNow()
	}

	// The node leading the edge between the two operators dies.
	deduped := edge.StreamName(c.Pipeline, "deduped")
	victim := cl.StreamLeader(deduped)
	if victim < 0 {
		t.Fatalf("no leader of %s", deduped)
	}
	before, _, err := store.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s after %s: checkpoint %d complete; shutting down %s, leader of %s (meta leader %d)",
		cl.Servers[victim].Name(), time.Since(start).Round(time.Millisecond), before.Checkpoint, cl.Servers[victim].Name(), deduped, cl.MetaLeader())
	killed := time.Now()
	cl.ShutdownNode(victim)
	if err := cl.WaitForLeader(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	rest := cfg
	rest.Start = first.Count
	publishRetrying(t, ctx, js, rest)
	streamtest.CheckFor(t, 90*time.Second, func() error {
		// Count first: reading the sink creates a consumer.
		if n, err := countStream(ctx, js, sink); err != nil || n < uint64(len(want)) {
			return fmt.Errorf("sink holds %d of %d events (%v)", n, len(want), err)
		}
		got, total, err := sinkCounts(ctx, js, c)
		if err != nil {
			return err
		}
		if err := checkExactlyOnce(want, got); err != nil {
			return err
		}
		if total != len(want) {
			return fmt.Errorf("sink holds %d events for %d ids", total, len(want))
		}
		if n, err := countStream(ctx, js, deadletter.StreamName(c.Pipeline)); err != nil || n != uint64(future) {
			return fmt.Errorf("%d dead letters, want %d future events (%v)", n, future, err)
		}
		return nil
	}, func() string { return consumers(ctx, js) })
	var after checkpoint.Record
	streamtest.CheckFor(t, 60*time.Second, func() error {
		l, _, err := store.Latest(ctx)
		if err != nil {
			return err
		}
		if after, err = store.GetRecord(ctx, l.Checkpoint); err != nil {
			return err
		}
		if !after.Triggered.After(killed) || after.Status != checkpoint.Complete || len(l.Manifests) != len(c.Operators) {
			return fmt.Errorf("latest checkpoint %d triggered %s before the node died (status %s, %d manifests)",
				l.Checkpoint, killed.Sub(after.Triggered), after.Status, len(l.Manifests))
		}
		return nil
	})
	streamtest.CheckFor(t, 30*time.Second, func() error {
		for _, name := range wantStreams {
			if l := cl.StreamLeader(name); l == victim || l < 0 {
				return fmt.Errorf("stream %s led by node %d after node %d died", name, l, victim)
			}
		}
		return nil
	})
	t.Logf("%d events exactly once at the sink, %d dead letters; checkpoint %d complete %s after the node died; %s in all",
		len(want), future, after.Checkpoint, after.Completed.Sub(killed).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// runUntilCleanup runs f until the end of the test, which fails if f
// returns an error or returns early.
func runUntilCleanup(t *testing.T, what string, f func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	t.Cleanup(func() {
		select {
		case err := <-done:
			t.Errorf("%s ended before the test did: %v", what, err)
			return
		default:
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", what, err)
		}
	})
}

// publishRetrying publishes cfg, resuming after what was acknowledged when
// a publish fails — as while a stream elects a new leader. Message IDs
// make a message published twice stored once.
func publishRetrying(t *testing.T, ctx context.Context, js jetstream.JetStream, cfg nexmarkgen.Config) {
	t.Helper()
	err := jsapi.Retry(ctx, "ensure ingress", func(ctx context.Context) error {
		_, err := nexmarkgen.EnsureStream(ctx, js, cfg)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.AckTimeout = 5 * time.Second
	for {
		n, err := nexmarkgen.Publish(ctx, js, cfg, time.Now, nil)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("publish: %v", err)
		}
		cfg.Start += n
		if cfg.Count > 0 {
			cfg.Count -= n // still > 0: the publish failed before the end
		}
		t.Logf("publish at %d: %v; resuming", cfg.Start, err)
		time.Sleep(250 * time.Millisecond) // back-off before retrying, not a wait for an outcome
	}
}

// countStream is the number of messages in a stream.
func countStream(ctx context.Context, js jetstream.JetStream, name string) (uint64, error) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// sinkCounts counts the IDs on the pipeline's json edge of events, like
// sinkEvents, reporting errors instead of failing: while a stream elects a
// new leader reads fail for a moment. It reads with one ordered consumer
// for the whole stream: on a cluster, an ordered consumer's Next recreates
// the consumer for every message and soon asks one the cluster does not yet
// know of ("no responders").
func sinkCounts(ctx context.Context, js jetstream.JetStream, c *contracts.Contract) (map[string]int, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, edge.StreamName(c.Pipeline, "events"))
	if err != nil {
		return nil, 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, 0, err
	}
	counts, total := map[string]int{}, 0
	if info.State.Msgs == 0 {
		return counts, 0, nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, 0, err
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, 0, err
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	prefix := c.Pipeline + ".events."
	for seq := uint64(0); seq < info.State.LastSeq; {
		m, err := it.Next()
		if err != nil {
			return nil, 0, fmt.Errorf("read the sink after seq %d of %d: %w", seq, info.State.LastSeq, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return nil, 0, err
		}
		seq = meta.Sequence.Stream
		id, ok := strings.CutPrefix(m.Headers().Get(jetstream.MsgIDHeader), prefix)
		if !ok {
			return nil, 0, errors.New("sink message without an event message ID")
		}
		counts[id]++
		total++
	}
	return counts, total, nil
}

// consumers describes the consumers of every stream, for a failure.
func consumers(ctx context.Context, js jetstream.JetStream) string {
	var b strings.Builder
	for name := range js.StreamNames(ctx).Name() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", name, err)
			continue
		}
		info := st.CachedInfo()
		fmt.Fprintf(&b, "%s: %d messages, last %d, cluster %+v\n", name, info.State.Msgs, info.State.LastSeq, info.Cluster)
		for ci := range st.ListConsumers(ctx).Info() {
			fmt.Fprintf(&b, "  %s: delivered %d, ack floor %d, ack pending %d, pending %d, waiting %d, cluster %+v\n",
				ci.Name, ci.Delivered.Stream, ci.AckFloor.Stream, ci.NumAckPending, ci.NumPending, ci.NumWaiting, ci.Cluster)
		}
	}
	return b.String()
}
