package test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirflow/weir/pkg/ingress"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/dedup"
)

// TestDedupAtItsTTLBoundary: the dedup operator remembers an ID for its
// family's TTL (state.families seen, 26h) of processing time after it
// first saw it. A duplicate arriving a millisecond before the TTL ends is
// dropped; one arriving a millisecond after it is emitted again — the
// contract's dedup horizon, end to end, on a processing clock the test
// moves.
func TestDedupAtItsTTLBoundary(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c := loadContract(t)
	var ttl time.Duration
	for _, f := range c.State.Families {
		if f.Name == dedup.Family {
			ttl = f.TTL.D()
		}
	}
	if ttl == 0 {
		t.Fatal("the dedup contract's seen family has no ttl")
	}
	if _, err := ingress.Create(context.Background(), js, c.Ingress, 1); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Truncate(time.Second)
	var clock atomic.Int64
	clock.Store(start.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	op := dedup.New()
	rt, err := stream.New(stream.Config{NATSURL: srv.ClientURL(), Contract: c, DataDir: t.TempDir(), Operator: "dedup", Instance: "0",
		Clock: now, TickInterval: 20 * time.Millisecond, Logger: testLogger(t)}, op)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	seq := 0
	send := func(at time.Time) {
		t.Helper()
		clock.Store(at.UnixNano())
		seq++
		m := nats.NewMsg(c.Ingress.Subject(0))
		// Each copy is its own message to the broker: only the operator
		// knows they carry one event.
		m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("copy-%d", seq))
		m.Data = fmt.Appendf(nil, `{"id":"evt-1","key":"k","ts":%d}`, start.Add(-time.Minute).UnixMilli())
		if _, err := js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		streamtest.CheckFor(t, 30*time.Second, func() error {
			if s := rt.Stats(); s.In < int64(seq) {
				return fmt.Errorf("dedup read %d of %d copies", s.In, seq)
			}
			return nil
		})
	}
	for _, tc := range []struct {
		at         time.Time
		out, dupes int64
		what       string
	}{
		{start, 1, 0, "the first copy is emitted"},
		{start.Add(ttl - time.Millisecond), 1, 1, "a copy a millisecond before the TTL ends is a duplicate"},
		{start.Add(ttl + time.Millisecond), 2, 1, "a copy a millisecond after the TTL ended is emitted again"},
		{start.Add(ttl + time.Second), 2, 2, "and is remembered from then on"},
	} {
		send(tc.at)
		if s := rt.Stats(); s.Out != tc.out || op.Duplicates() != tc.dupes {
			t.Fatalf("%s: emitted %d, duplicates %d; want %d and %d", tc.what, s.Out, op.Duplicates(), tc.out, tc.dupes)
		}
	}
}
