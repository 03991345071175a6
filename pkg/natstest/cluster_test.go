package natstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/pkg/natstest"
)

// TestClusterSurvivesANode: a stream of three replicas created as R1 is
// scaled up in place, keeps its messages, and takes writes and reads after
// the node leading it dies.
func TestClusterSurvivesANode(t *testing.T) {
	c := natstest.RunCluster(t, 3)
	js, err := jetstream.New(c.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage}
	if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.1", []byte("before")); err != nil {
		t.Fatal(err)
	}
	cfg.Replicas = 3
	st, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		t.Fatalf("scaling R1 to R3: %v", err)
	}
	if r := st.CachedInfo().Config.Replicas; r != 3 {
		t.Fatalf("replicas %d after scaling up, want 3", r)
	}
	// Wait for the replicas to catch up before killing the leader.
	var leader int
	for deadline := time.Now().Add(30 * time.Second); ; {
		info, err := st.Info(ctx)
		if err == nil && info.Cluster != nil && len(info.Cluster.Replicas) == 2 &&
			info.Cluster.Replicas[0].Current && info.Cluster.Replicas[1].Current {
			if leader = c.StreamLeader("S"); leader >= 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas not current: %+v (%v)", info, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.ShutdownNode(leader)
	if err := c.WaitForLeader(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Each try has its own deadline: a publish sent while the client is
	// reconnecting, or while the stream has no leader yet, gets no answer,
	// and waiting for it on the test's context would spend all of it. The
	// message ID makes a retry of a try that was stored but not answered a
	// duplicate.
	for deadline := time.Now().Add(30 * time.Second); ; {
		try, cancelTry := context.WithTimeout(ctx, 2*time.Second)
		_, err = js.Publish(try, "s.2", []byte("after"), jetstream.WithMsgID("after"))
		cancelTry()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("publish after node %d died: %v", leader, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("%d messages, want 2", info.State.Msgs)
	}
	if got := c.StreamLeader("S"); got == leader || got < 0 {
		t.Fatalf("stream leader %d after node %d died", got, leader)
	}
}

// TestClusterIsolateAndHeal: a node cut off by Isolate keeps running with
// no route to the others, which elect a meta leader among themselves when
// it led and keep theirs when it did not; Heal routes it back. The node is
// isolated twice because it is rejoining that would route around the
// links: its peers learn its route address by gossip when it reconnects.
func TestClusterIsolateAndHeal(t *testing.T) {
	c := natstest.RunClusterWith(t, natstest.ClusterOptions{Nodes: 3, Partitionable: true})
	x := c.MetaLeader()
	for round, led := range []bool{true, false} {
		leader := c.MetaLeader()
		if err := c.Isolate(x); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if n := c.Servers[x].NumRoutes(); n != 0 {
			t.Fatalf("round %d: isolated node %d has %d routes", round, x, n)
		}
		for i, s := range c.Servers {
			if i != x && s.NumRoutes() == 0 {
				t.Fatalf("round %d: node %d lost its routes to the node not isolated", round, i)
			}
		}
		if err := c.WaitForLeader(30 * time.Second); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		switch l := c.MetaLeader(); {
		case led && l == x:
			t.Fatalf("round %d: isolated node %d still meta leader", round, x)
		case !led && l != leader:
			t.Fatalf("round %d: meta leader moved from %d to %d when a follower was isolated", round, leader, l)
		}
		if err := c.Heal(x); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if err := c.WaitForLeader(30 * time.Second); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}
