package test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/status"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
)

// overStreams is the shipped contract name with its ingress placed over n
// streams (ingress.streams), linted.
func overStreams(t *testing.T, name string, n int) *contracts.Contract {
	t.Helper()
	c, err := contracts.Shipped(name)
	if err != nil {
		t.Fatal(err)
	}
	cc := *c
	cc.Ingress.Streams = n
	if ps := cc.Lint(); len(ps) > 0 {
		t.Fatalf("%s over %d streams: %v", name, n, ps)
	}
	return &cc
}

// TestQueryOverIngressStreams runs q7 and q11 with their four ingress
// partitions over two streams (partitions 0 and 2 in NEXMARK_0, 1 and 3
// in NEXMARK_1): every pane equals the reference evaluator's, as it does
// over one stream (TestQueriesMatchReference), and the records are in the
// two streams alone.
func TestQueryOverIngressStreams(t *testing.T) {
	for _, name := range []string{"q7", "q11"} {
		t.Run(name, func(t *testing.T) {
			q, ok := queries[name]
			if !ok {
				t.Fatalf("no %s in the catalog", name)
			}
			checkOverStreams(t, q)
		})
	}
}

func checkOverStreams(t *testing.T, q query) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c := overStreams(t, q.contract, 2)
	gen := corpusConfig(c)
	want, flush := referencePanes(t, c, q, gen)
	n := publish(t, js, gen)
	publishFlush(t, js, c, flush, nil)
	ctx := context.Background()
	if _, err := js.Stream(ctx, c.Ingress.Stream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("stream %s: %v, want none: the ingress is %v", c.Ingress.Stream, err, c.Ingress.StreamNames())
	}
	var total uint64
	for i, name := range c.Ingress.StreamNames() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(c.Ingress.SubjectPrefix+".*"))
		if err != nil {
			t.Fatal(err)
		}
		for subject := range info.State.Subjects {
			if subject != c.Ingress.Subject(i) && subject != c.Ingress.Subject(i+2) {
				t.Errorf("stream %s holds %s", name, subject)
			}
		}
		total += info.State.Msgs
	}
	if total != n+uint64(c.Ingress.Partitions) {
		t.Errorf("the streams hold %d messages, want the %d published and %d flushes", total, n, c.Ingress.Partitions)
	}
	runService(t, srv.ClientURL(), c, q.service, q.factories)
	awaitPanes(t, js, c, want)
	// weir status counts the ingress over both streams, and its readers'
	// lag over both drains.
	nc := srv.Connect(t)
	streamtest.CheckFor(t, 30*time.Second, func() error {
		st, err := status.Gather(ctx, nc, js, c)
		if err != nil {
			return err
		}
		in := st.Edges[0]
		if !in.Ingress || len(in.Streams) != 2 || in.Messages != total || in.Error != "" || in.Lag != 0 {
			return fmt.Errorf("ingress in the status: %+v", in)
		}
		for _, p := range in.Partitions {
			if p.Messages == 0 {
				return fmt.Errorf("partition %d of the ingress counts no message: %+v", p.Partition, in)
			}
		}
		return nil
	})
}

// TestIngressStreamsChangeRefused: a service whose state holds positions
// in the ingress over one stream refuses to start on a contract placing
// it over two, whose streams hold those partitions at other sequences.
func TestIngressStreamsChangeRefused(t *testing.T) {
	q, ok := queries["q7"]
	if !ok {
		t.Fatal("no q7 in the catalog")
	}
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	one := overStreams(t, q.contract, 1)
	two := overStreams(t, q.contract, 2)
	publish(t, js, corpusConfig(one))
	data := t.TempDir()
	run := func(c *contracts.Contract) (*stream.Runtime, context.CancelFunc, chan error) {
		ctx, cancel := context.WithCancel(context.Background())
		rts, err := stream.Runtimes(stream.Config{NATSURL: srv.ClientURL(), Contract: c, DataDir: data,
			Instance: "0", TickInterval: 20 * time.Millisecond, Logger: testLogger(t)}, "", q.factories, []string{c.Operators[0].ID})
		if err != nil {
			t.Fatal(err)
		}
		rt := rts[0]
		done := make(chan error, 1)
		go func() { done <- rt.Run(ctx) }()
		return rt, cancel, done
	}
	rt, cancel, done := run(one)
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if s := rt.Stats(); s.In == 0 {
			return fmt.Errorf("nothing read yet")
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(context.Background(), one.Ingress.Stream); err != nil {
		t.Fatal(err)
	}
	publish(t, js, corpusConfig(two))
	_, cancel, done = run(two)
	defer cancel()
	select {
	case err := <-done:
		t.Logf("refused: %v", err)
		if err == nil || !strings.Contains(err.Error(), "ingress.streams") {
			t.Fatalf("start over two streams on positions over one: %v, want a refusal naming ingress.streams", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the service started over two streams on positions in one")
	}
}
