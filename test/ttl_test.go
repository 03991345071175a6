package test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/ingress"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/dedup"
	q8 "github.com/weirflow/weir/services/nexmark-q8"
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
			// Out counts what is stored, after the step that read the
			// copy committed: none may be in flight.
			if s := rt.Stats(); s.In < int64(seq) || s.Storing > 0 {
				return fmt.Errorf("dedup read %d of %d copies, %d records being stored", s.In, seq, s.Storing)
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

// TestJoinAtItsWindowBoundary: q8's join keeps a person and an auction of
// the same seller until their window fires — when the watermark reaches
// the window's maximum timestamp (allowed_lateness 0s) — and then forgets
// them. An auction at the window's last millisecond that arrives while the
// watermark is a millisecond short of it is joined; the same auction
// arriving once the watermark is there is too late, and goes to the side
// output with the window and the watermark in its reason, not silently
// away. End to end: the ingress, q8-key, the entities edge, q8-join and
// the json result edge, on the pipeline's own watermark (out_of_orderness
// 2s, a bid moving it).
func TestJoinAtItsWindowBoundary(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c, err := contracts.Shipped("nexmark-q8")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := ingress.Create(ctx, js, c.Ingress, 1); err != nil {
		t.Fatal(err)
	}
	p := streamtest.Run(t, srv.ClientURL(), c, t.TempDir(), q8.Factories())
	join := p.ByID["q8-join"]
	start := time.Now().Add(-time.Hour).Truncate(q8.Size)
	last := start.Add(q8.Size - time.Millisecond) // the window's maximum timestamp
	publish := func(e nexmark.Event) {
		t.Helper()
		data, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		// One partition: the others fall idle, and its watermark is the
		// pipeline's.
		if _, err := js.Publish(ctx, c.Ingress.Subject(0), data); err != nil {
			t.Fatal(err)
		}
	}
	person := func(id int64, at time.Time) nexmark.Event {
		ms := at.UnixMilli()
		return nexmark.Event{ID: fmt.Sprintf("p-%d", id), Kind: nexmark.KindPerson, Key: fmt.Sprint(id), TS: ms,
			Person: &nexmark.Person{ID: id, Name: "ann", DateTime: ms}}
	}
	auction := func(id, seller int64, at time.Time) nexmark.Event {
		ms := at.UnixMilli()
		return nexmark.Event{ID: fmt.Sprintf("a-%d", id), Kind: nexmark.KindAuction, Key: fmt.Sprint(id), TS: ms,
			Auction: &nexmark.Auction{ID: id, Seller: seller, Reserve: 100, DateTime: ms, Expires: ms + 60_000}}
	}
	bids := 0
	// watermark moves the pipeline's watermark to wm with a bid at wm plus
	// the out-of-orderness, and waits until q8-join has it.
	watermark := func(wm time.Time) {
		t.Helper()
		bids++
		at := wm.Add(c.Progress.OutOfOrderness.D() + time.Millisecond)
		publish(nexmark.Event{ID: fmt.Sprintf("b-%d", bids), Kind: nexmark.KindBid, Key: "1", TS: at.UnixMilli(),
			Bid: &nexmark.Bid{Auction: 1, Bidder: 2, Price: 3, DateTime: at.UnixMilli()}})
		streamtest.CheckFor(t, 30*time.Second, func() error {
			if got := join.Stats().Watermark; !got.Equal(wm) {
				return fmt.Errorf("q8-join's watermark is %s, want %s", got, wm)
			}
			return nil
		})
	}
	read := func(n int64) {
		t.Helper()
		streamtest.CheckFor(t, 30*time.Second, func() error {
			if s := join.Stats(); s.In < n {
				return fmt.Errorf("q8-join read %d of %d records", s.In, n)
			}
			return nil
		})
	}

	publish(person(7001, start.Add(time.Second)))
	watermark(last.Add(-time.Millisecond))
	publish(auction(9001, 7001, last)) // a millisecond before its window fires
	read(2)
	if s := join.Stats(); s.SideOutput != 0 {
		t.Fatalf("the auction a millisecond before its window fired went to the side output")
	}
	watermark(last) // the window fires
	var results []jetstream.Msg
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if results = streamtest.Messages(t, js, edge.StreamName(c.Pipeline, "results")); len(results) < 1 {
			return fmt.Errorf("%d results", len(results))
		}
		return nil
	})
	var u q8.NewUser
	if err := json.Unmarshal(results[0].Data(), &u); err != nil || u.Person != 7001 || u.Auction != 9001 || !u.WindowStart.Equal(start) {
		t.Fatalf("the join's result: %s (%v), want person 7001 with auction 9001 in the window from %s", results[0].Data(), err, start)
	}

	publish(auction(9002, 7001, last)) // the same time, once the window fired
	read(3)
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if s := join.Stats(); s.SideOutput != 1 {
			return fmt.Errorf("q8-join filed %d side outputs", s.SideOutput)
		}
		return nil
	})
	letters := streamtest.Messages(t, js, deadletter.StreamName(c.Pipeline))
	if len(letters) != 1 {
		t.Fatalf("%d letters, want the late auction's", len(letters))
	}
	l, err := deadletter.Parse(letters[0])
	if err != nil || !l.SideOutput || !strings.Contains(l.Reason, "already fired") || !strings.Contains(string(l.Payload), `"a-9002"`) {
		t.Fatalf("the late auction's letter: %+v, %v", l, err)
	}
	// The next window fires with nothing of it: the late auction opened
	// no window of its own.
	watermark(last.Add(q8.Size))
	if n := len(streamtest.Messages(t, js, edge.StreamName(c.Pipeline, "results"))); n != 1 {
		t.Fatalf("%d results, want only the one joined in time", n)
	}
}
