package stream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/pkg/edge"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream"
)

// TestRetentionPassingAReaderStopsIt: retention (a message limit) removes
// records a running instance's consumers had not yet been sent — the
// instance is stuck in a step — and the instance stops with an error
// naming them rather than read on past the gap.
func TestRetentionPassingAReaderStopsIt(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	const n = 8000
	var futures []jetstream.PubAckFuture
	ts := time.Now().Add(-time.Minute).UnixMilli()
	for i := range n {
		data := fmt.Sprintf(`{"id":"id-%d","key":"k%d","ts":%d}`, i, i, ts)
		f, err := h.js.PublishAsync(h.c.Ingress.Subject(i%h.c.Ingress.Partitions), []byte(data))
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
		if i%1000 == 999 {
			<-h.js.PublishAsyncComplete()
		}
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatal(err)
		}
	}
	stuck, release := make(chan struct{}), make(chan struct{})
	first := true
	op := operator.Func(func(env operator.Env, r record.Record) error {
		if first {
			first = false
			close(stuck)
			<-release
		}
		return env.Emit(r)
	})
	rt, err := stream.New(stream.Config{NATSURL: h.srv.ClientURL(), Contract: h.c, DataDir: t.TempDir(), Operator: "dedup", Instance: "0",
		TickInterval: 10 * time.Millisecond}, op)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- rt.Run(rctx) }()
	<-stuck
	st, err := h.js.Stream(ctx, h.c.Ingress.Stream)
	if err != nil {
		t.Fatal(err)
	}
	// The consumers have been sent what their ack-pending bound allows, a
	// fraction of the backlog; a message limit removes most of the rest.
	cfg := st.CachedInfo().Config
	cfg.MaxMsgs = 501
	if _, err := h.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	close(release)
	err = <-done
	var te *edge.TrimmedError
	if !errors.As(err, &te) {
		t.Fatalf("the instance read on past removed records: %v", err)
	}
	for _, in := range te.Inputs {
		if in.First != n-500 || in.Clear >= in.First-1 {
			t.Fatalf("trimmed input %+v: want the stream's first sequence %d past what its consumer was sent", in, n-500)
		}
	}
	t.Logf("stopped: %v", err)
}
