package stream_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream"
)

// publishN publishes n events, numbered from start, round-robin over the
// ingress partitions.
func (h *harness) publishN(start, n int) {
	h.t.Helper()
	ts := time.Now().Add(-time.Minute).UnixMilli()
	for i := start; i < start+n; i++ {
		data := fmt.Sprintf(`{"id":"id-%d","key":"k%d","ts":%d}`, i, i, ts)
		if _, err := h.js.PublishAsync(h.c.Ingress.Subject(i%h.c.Ingress.Partitions), []byte(data)); err != nil {
			h.t.Fatal(err)
		}
		if i%1000 == 999 {
			<-h.js.PublishAsyncComplete()
		}
	}
	<-h.js.PublishAsyncComplete()
}

// TestRetentionPassingAReaderStopsIt: a message limit removes records a
// running instance's consumers had not yet been sent — the instance is
// stuck in a step, and producers keep writing, so the stream's count of
// what each consumer has still to deliver does not drop — and the
// instance stops with an error naming them rather than read on past the
// gap. Started again, it refuses: its positions never passed the gap.
func TestRetentionPassingAReaderStopsIt(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.publishN(0, 8000)
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
	dir := t.TempDir()
	run := func(op operator.Operator) error {
		rt, err := stream.New(stream.Config{NATSURL: h.srv.ClientURL(), Contract: h.c, DataDir: dir, Operator: "dedup", Instance: "0",
			TickInterval: 10 * time.Millisecond}, op)
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return rt.Run(rctx)
	}
	done := make(chan error, 1)
	go func() { done <- run(op) }()
	<-stuck
	st, err := h.js.Stream(ctx, h.c.Ingress.Stream)
	if err != nil {
		t.Fatal(err)
	}
	// The consumers have been sent what their ack-pending bound allows, a
	// fraction of the backlog; a message limit removes most of the rest,
	// and every message published since removes one more.
	cfg := st.CachedInfo().Config
	cfg.MaxMsgs = 2000
	if _, err := h.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	h.publishN(8000, 4000)
	close(release)
	err = <-done
	var te *edge.TrimmedError
	if !errors.As(err, &te) {
		t.Fatalf("the instance read on past removed records: %v", err)
	}
	t.Logf("stopped: %v", err)
	err = run(operator.Func(func(env operator.Env, r record.Record) error { return env.Emit(r) }))
	if !errors.As(err, &te) {
		t.Fatalf("started again, the instance read past the removed records: %v", err)
	}
	for _, in := range te.Inputs {
		if in.First < 10001 || in.Known() >= 10000 {
			t.Fatalf("refused input %+v: want a gap reaching the stream's first sequence 10001, after the position", in)
		}
	}
}

// TestADeletedRecordStopsTheReaderUntilDeclared: a record deleted from the
// middle of the ingress before it was read — where the stream begins does
// not move, so only the consumer's count of what it has still to deliver
// shows it — stops the instance; a restart refuses until the loss is
// declared, and then reads on.
func TestADeletedRecordStopsTheReaderUntilDeclared(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.publishN(0, 8000)
	stuck, release := make(chan struct{}), make(chan struct{})
	first := true
	var processed atomic.Int64
	op := operator.Func(func(env operator.Env, r record.Record) error {
		if first {
			first = false
			close(stuck)
			<-release
		}
		processed.Add(1)
		return env.Emit(r)
	})
	dir := t.TempDir()
	run := func(op operator.Operator, wait time.Duration) error {
		rt, err := stream.New(stream.Config{NATSURL: h.srv.ClientURL(), Contract: h.c, DataDir: dir, Operator: "dedup", Instance: "0",
			TickInterval: 10 * time.Millisecond}, op)
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		return rt.Run(rctx)
	}
	done := make(chan error, 1)
	go func() { done <- run(op, time.Minute) }()
	<-stuck
	st, err := h.js.Stream(ctx, h.c.Ingress.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, 7001); err != nil {
		t.Fatal(err)
	}
	close(release)
	err = <-done
	var te *edge.TrimmedError
	if !errors.As(err, &te) || len(te.Inputs) != 1 || te.Inputs[0].Removed != 1 || !te.Inputs[0].Exact || !te.Inputs[0].Ahead || te.Inputs[0].First <= 7001 || te.Inputs[0].Known() >= 7001 {
		t.Fatalf("the instance read on past a deleted record: %v", err)
	}
	t.Logf("stopped: %v", err)
	emit := operator.Func(func(env operator.Env, r record.Record) error { return env.Emit(r) })
	if err := run(emit, 30*time.Second); !errors.As(err, &te) {
		t.Fatalf("started again, the instance read past the deleted record: %v", err)
	}
	lost := te.Inputs[0]
	if _, err := audit.DeclareLoss(ctx, h.js, h.c.Pipeline, audit.Declaration{Stream: lost.Stream, From: lost.Known() + 1, Through: lost.First - 1,
		Record: audit.Record{Actor: "test", Reason: "a deleted record"}}); err != nil {
		t.Fatal(err)
	}
	// Declared, the instance reads everything else: 7999 records.
	all := make(chan struct{})
	var n atomic.Int64
	count := operator.Func(func(env operator.Env, r record.Record) error {
		if n.Add(1)+processed.Load() >= 7999 {
			select {
			case <-all:
			default:
				close(all)
			}
		}
		return env.Emit(r)
	})
	rctx, cancel := context.WithCancel(ctx)
	rt, err := stream.New(stream.Config{NATSURL: h.srv.ClientURL(), Contract: h.c, DataDir: dir, Operator: "dedup", Instance: "0",
		TickInterval: 10 * time.Millisecond}, count)
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- rt.Run(rctx) }()
	select {
	case <-all:
	case err := <-done:
		t.Fatalf("after the declaration: %v", err)
	case <-time.After(time.Minute):
		t.Fatalf("after the declaration the instance processed %d of the %d records left", n.Load(), 7999-processed.Load())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
