package edge_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/edge"
)

// TestAConsumerStartsWhereAskedThoughTheServerKeptAStaleOne: nats-server
// 2.15.2, killed between the two files that register a consumer (meta.inf,
// then meta.sum) or in the middle of deleting one, leaves its directory
// with its state (o.dat) and, at start, skips it unregistered. A
// file-backed consumer created later under that name takes the old state
// and starts where the old one had read to, whatever start it is given
// (consumer.go: a store that HasState is read instead of
// selectStartingSeqNo). weir chaos saw a reader asked to start at 962
// start at 977 and refuse to read, as if retention had removed 962-976.
// A reader of an ingress keeps its consumers on disk, as any client's
// file-backed consumer is kept (a reader of an edge keeps them in memory,
// which leaves no directory, but an earlier weir may have left one). Here
// the test makes the stale directory itself, and the kill is the graceful
// stop plus the removal of
// meta.sum, which is what the server finds after such a kill. A reader
// opened then starts where it is asked — past its position, before it,
// or at the stream's start — and says so (Started), and one asked to
// start where the stale state stopped gets its records at once.
func TestAConsumerStartsWhereAskedThoughTheServerKeptAStaleOne(t *testing.T) {
	ctx := context.Background()
	srv, js, spec, _ := restartable(t, "e", 100)
	input := func(after uint64, positioned bool) edge.Input {
		return edge.Input{Name: "e/0", Stream: spec.StreamName(), Subject: spec.Subject(0), After: after, Positioned: positioned}
	}
	cfg := func(in edge.Input) edge.ReaderConfig {
		return edge.ReaderConfig{Consumer: "c", Inputs: []edge.Input{in}, FetchBatch: 10, MaxAckPending: 100}
	}
	name := edge.ConsumerName("c", "e/0")
	dir := filepath.Join(srv.Dir(), "jetstream", "$G", "streams", spec.StreamName(), "obs", name)
	restart := func() {
		t.Helper()
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		js = srv.JetStream(t)
	}
	// stale leaves, under the reader's consumer name, the directory of a
	// file-backed consumer that was delivered from through to and
	// acknowledged through acked (none when 0), unregistered.
	stale := func(from, acked, to uint64) {
		t.Helper()
		if err := js.DeleteConsumer(ctx, spec.StreamName(), name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Fatal(err)
		}
		srv.Shutdown()
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		restart()
		cons, err := js.CreateConsumer(ctx, spec.StreamName(), jetstream.ConsumerConfig{
			Durable: name, FilterSubject: spec.Subject(0), AckPolicy: jetstream.AckAllPolicy,
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from,
		})
		if err != nil {
			t.Fatal(err)
		}
		batch, err := cons.Fetch(int(to-from+1), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		last := uint64(0)
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			last = meta.Sequence.Stream
			if last == acked {
				if err := m.DoubleAck(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		if last != to {
			t.Fatalf("the stale consumer was delivered through %d, want %d", last, to)
		}
		srv.Shutdown()
		if err := os.Remove(filepath.Join(dir, "meta.sum")); err != nil {
			t.Fatalf("the consumer's registration: %v", err)
		}
		restart()
		if _, err := js.Consumer(ctx, spec.StreamName(), name); err == nil {
			t.Fatal("the server registered the consumer whose meta.sum is gone: the test no longer makes a stale one")
		}
	}
	for _, c := range []struct {
		what  string
		in    edge.Input
		first uint64
	}{
		{"before the stale state", input(10, true), 11},
		{"past the stale state", input(80, true), 81},
		{"an input without a position", input(0, false), 1},
	} {
		stale(11, 60, 60)
		r, err := edge.OpenReader(ctx, js, cfg(c.in))
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if got := r.Started()["e/0"]; got != c.first-1 {
			t.Errorf("%s: started after %d, want %d", c.what, got, c.first-1)
		}
		select {
		case d := <-r.C():
			if d.Seq != c.first {
				t.Errorf("%s: first delivery %d, want %d", c.what, d.Seq, c.first)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: nothing delivered", c.what)
		}
		r.Close()
	}
	// A stale state that stopped where the next reader is asked to start,
	// its ten deliveries unacknowledged: taken over, it would hold them —
	// as many as the reader may have pending — until the ack wait.
	held := func(in edge.Input) edge.ReaderConfig {
		c := cfg(in)
		c.MaxAckPending = 10
		return c
	}
	stale(86, 0, 95)
	r, err := edge.OpenReader(ctx, js, held(input(95, true)))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	select {
	case d := <-r.C():
		if d.Seq != 96 {
			t.Errorf("after a stale state with deliveries pending: first delivery %d, want 96", d.Seq)
		}
	case <-time.After(10 * time.Second):
		t.Error("after a stale state with deliveries pending: nothing delivered")
	}
}
