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
	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/jsapi"
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
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := startClusterRun(t, ctx, natstest.ClusterOptions{Nodes: 3}, 1500)
	cl, c := r.cl, r.c

	// The node leading the edge between the two operators dies.
	deduped := edge.StreamName(c.Pipeline, "deduped")
	victim := cl.StreamLeader(deduped)
	if victim < 0 {
		t.Fatalf("no leader of %s", deduped)
	}
	before, _, err := r.store.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s after %s: checkpoint %d complete; shutting down %s, leader of %s (meta leader %d)",
		cl.Servers[victim].Name(), r.since(), before.Checkpoint, cl.Servers[victim].Name(), deduped, cl.MetaLeader())
	killed := time.Now()
	cl.ShutdownNode(victim)
	if err := cl.WaitForLeader(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	r.publish(t, ctx, r.js, 1500, 0)
	after := r.finish(t, ctx, killed, "the node died")
	streamtest.CheckFor(t, 30*time.Second, func() error {
		for _, name := range r.streams {
			if l := cl.StreamLeader(name); l == victim || l < 0 {
				return fmt.Errorf("stream %s led by node %d after node %d died", name, l, victim)
			}
		}
		return nil
	})
	t.Logf("%d events exactly once at the sink, %d dead letters; checkpoint %d complete %s after the node died; %s in all",
		len(r.want), r.future, after.Checkpoint, after.Completed.Sub(killed).Round(time.Millisecond), r.since())
}

// TestClusterSurvivesAPartition runs the dedup pipeline and its
// coordinator on a three-node cluster with replicas 3 whose routes go
// through links the test can cut (natstest.Cluster.Isolate). First the
// JetStream meta leader is cut off from the other two while it keeps
// running and any client connected to it stays connected: the other two
// elect a meta leader, and the next part of the input is published through
// one of them. The partition heals. Then the meta leader by then is shut
// down, the last part of the input published, and the node restarted.
// Every event reaches the sink exactly once, and a checkpoint triggered
// once the node is back completes with every operator's manifest.
func TestClusterSurvivesAPartition(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a three-node cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const third = 1000
	r := startClusterRun(t, ctx, natstest.ClusterOptions{Nodes: 3, Partitionable: true}, third)
	cl := r.cl

	x := cl.MetaLeader()
	if x < 0 {
		t.Fatal("no meta leader")
	}
	t.Logf("isolating %s, the meta leader, after %s", cl.Servers[x].Name(), r.since())
	if err := cl.Isolate(x); err != nil {
		t.Fatal(err)
	}
	if n := cl.Servers[x].NumRoutes(); n != 0 {
		t.Fatalf("%s has %d routes while isolated", cl.Servers[x].Name(), n)
	}
	if err := cl.WaitForLeader(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	leader := cl.MetaLeader()
	if leader == x || leader < 0 {
		t.Fatalf("meta leader %d while %d is isolated", leader, x)
	}
	t.Logf("%s isolated, %s meta leader after %s", cl.Servers[x].Name(), cl.Servers[leader].Name(), r.since())
	// The test's own connection may be to the isolated node, and would get
	// no answers; publish through the new leader, which the majority serves.
	majority, err := jetstream.New(cl.Servers[leader].Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	r.publish(t, ctx, majority, third, third)
	t.Logf("second part of the input stored while %s is isolated after %s", cl.Servers[x].Name(), r.since())
	if err := cl.Heal(x); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitForLeader(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("partition healed after %s: %s routed again, %s meta leader", r.since(), cl.Servers[x].Name(), cl.Servers[cl.MetaLeader()].Name())

	victim := cl.MetaLeader()
	t.Logf("shutting down %s, the meta leader, after %s", cl.Servers[victim].Name(), r.since())
	cl.ShutdownNode(victim)
	if err := cl.WaitForLeader(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	r.publish(t, ctx, r.js, 2*third, 0)
	t.Logf("last part of the input stored while %s is down after %s", cl.Servers[victim].Name(), r.since())
	if err := cl.RestartNode(victim); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitForLeader(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	t.Logf("%s restarted after %s", cl.Servers[victim].Name(), r.since())

	after := r.finish(t, ctx, back, "the node restarted")
	// The restarted node has caught up: every stream has a leader and two
	// current replicas.
	streamtest.CheckFor(t, 30*time.Second, func() error {
		// A request whose answer is lost would otherwise wait for the
		// test's deadline, well past this check's.
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		for _, name := range r.streams {
			st, err := r.js.Stream(ctx, name)
			if err != nil {
				return err
			}
			info, err := st.Info(ctx)
			if err != nil {
				return err
			}
			if info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 ||
				!info.Cluster.Replicas[0].Current || !info.Cluster.Replicas[1].Current {
				return fmt.Errorf("stream %s: cluster %+v", name, info.Cluster)
			}
		}
		return nil
	})
	t.Logf("%d events exactly once at the sink, %d dead letters; checkpoint %d complete %s after the node restarted; %s in all",
		len(r.want), r.future, after.Checkpoint, after.Completed.Sub(back).Round(time.Millisecond), r.since())
}

// clusterRun is the dedup pipeline and its coordinator running on a
// three-node cluster, every stream and bucket with three replicas, and
// the input the tests publish to it: 3000 events.
type clusterRun struct {
	cl    *natstest.Cluster
	js    jetstream.JetStream
	c     *contracts.Contract
	cfg   nexmarkgen.Config
	store *checkpoint.Store
	// want and future are what the whole input must produce: the IDs at
	// the sink and the number of dead letters.
	want   map[string]bool
	future int
	// streams are every stream of the pipeline.
	streams []string
	start   time.Time
}

// startClusterRun starts a cluster with options o, publishes the first
// events of the input, starts the pipeline and the coordinator, checks
// that every stream has three replicas placed on the cluster, and returns
// once a checkpoint has completed and the sink holds events.
func startClusterRun(t *testing.T, ctx context.Context, o natstest.ClusterOptions, first uint64) *clusterRun {
	t.Helper()
	r := &clusterRun{start: time.Now()}
	const replicas = 3
	r.cl = natstest.RunClusterWith(t, o)
	urls := r.cl.ClientURLs()
	var err error
	if r.js, err = jetstream.New(r.cl.Connect(t)); err != nil {
		t.Fatal(err)
	}
	if r.c, err = contracts.Shipped("nexmark-dedup"); err != nil {
		t.Fatal(err)
	}
	c, js := r.c, r.js

	r.cfg = genConfig(c, 3000)
	r.cfg.Replicas = replicas
	r.want, r.future = expected(t, r.cfg)
	r.publish(t, ctx, js, 0, first)
	// Each phase says when it ended: a run that fails on time says where
	// the time went.
	t.Logf("first %d events of the input stored after %s", first, r.since())

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
	if r.store, err = checkpoint.Open(ctx, js, c.Pipeline, replicas); err != nil {
		t.Fatal(err)
	}
	t.Logf("pipeline and coordinator started, buckets open after %s", r.since())
	sink := edge.StreamName(c.Pipeline, "events")
	streamtest.CheckFor(t, 60*time.Second, func() error {
		// A request whose answer is lost would otherwise wait for the
		// test's deadline, well past this check's (it did, once, in CI).
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if l, _, err := r.store.Latest(ctx); err != nil || l.Checkpoint < 1 {
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
	r.streams = []string{c.Ingress.Stream, deadletter.StreamName(c.Pipeline), audit.StreamName(c.Pipeline), "KV_" + bucket}
	for _, op := range c.Operators {
		r.streams = append(r.streams, "OBJ_"+checkpoint.FilesBucket(c.Pipeline, op.ID))
	}
	for _, e := range c.Edges {
		r.streams = append(r.streams, edge.StreamName(c.Pipeline, e.Name))
	}
	var have []string
	for info := range js.ListStreams(ctx).Info() {
		have = append(have, info.Config.Name)
		if info.Config.Replicas != replicas || info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != replicas-1 {
			t.Errorf("stream %s: %d replicas configured, cluster %+v; want %d placed on the cluster", info.Config.Name, info.Config.Replicas, info.Cluster, replicas)
		}
	}
	slices.Sort(have)
	slices.Sort(r.streams)
	if !slices.Equal(have, r.streams) {
		t.Fatalf("streams %v, want %v", have, r.streams)
	}
	if t.Failed() {
		t.FailNow()
	}
	return r
}

// since is the time since the run started, for the logs.
func (r *clusterRun) since() time.Duration { return time.Since(r.start).Round(time.Millisecond) }

// publish publishes count events of the input from event start through
// js; count 0 publishes the rest.
func (r *clusterRun) publish(t *testing.T, ctx context.Context, js jetstream.JetStream, start, count uint64) {
	t.Helper()
	cfg := r.cfg
	cfg.Start, cfg.Count = start, count
	publishRetrying(t, ctx, js, cfg)
}

// finish waits until every event of the input is at the sink exactly once
// and the future ones are dead letters, then for a complete checkpoint
// with every operator's manifest triggered after fault, which happened
// when what did; it returns that checkpoint's record.
func (r *clusterRun) finish(t *testing.T, ctx context.Context, fault time.Time, what string) checkpoint.Record {
	t.Helper()
	js, c, want := r.js, r.c, r.want
	sink := edge.StreamName(c.Pipeline, "events")
	streamtest.CheckFor(t, 90*time.Second, func() error {
		// A request whose answer is lost would otherwise wait for the
		// test's deadline, well past this check's.
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		// Count first: reading the sink creates a consumer.
		if n, err := countStream(ctx, js, sink); err != nil || n < uint64(len(want)) {
			return fmt.Errorf("sink holds %d of %d events (%v)", n, len(want), err)
		}
		return checkSink(ctx, js, c, want, r.future)
	}, func() string { return consumers(ctx, js) })
	var after checkpoint.Record
	streamtest.CheckFor(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, _, err := r.store.Latest(ctx)
		if err != nil {
			return err
		}
		if after, err = r.store.GetRecord(ctx, l.Checkpoint); err != nil {
			return err
		}
		if !after.Triggered.After(fault) || after.Status != checkpoint.Complete || len(l.Manifests) != len(c.Operators) {
			return fmt.Errorf("latest checkpoint %d triggered %s before %s (status %s, %d manifests)",
				l.Checkpoint, fault.Sub(after.Triggered), what, after.Status, len(l.Manifests))
		}
		return nil
	})
	return after
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
