package edge_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/pkg/natstest"
)

// TestARestartedBrokerForgetsTheReadersConsumers: readers keep their
// edges' consumers in memory, so a broker that restarts no longer holds
// them.
// The reader says so as soon as its connection is back, naming the
// consumer, rather than when its pull has heard no heartbeat for two
// periods; the runtime then reopens the input at its committed position.
func TestARestartedBrokerForgetsTheReadersConsumers(t *testing.T) {
	ctx := context.Background()
	srv, js, spec, _ := restartable(t, "e", 10)
	in := edge.Input{Name: "e/0", Stream: spec.StreamName(), Subject: spec.Subject(0), Frames: true}
	r, err := edge.OpenReader(ctx, js, edge.ReaderConfig{Consumer: "c", Inputs: []edge.Input{in}, FetchBatch: 10, MaxAckPending: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for d := range r.C() {
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		if d.Seq == 10 {
			break
		}
	}
	name := edge.ConsumerName("c", "e/0")
	if ci, err := js.Consumer(ctx, spec.StreamName(), name); err != nil {
		t.Fatal(err)
	} else if !ci.CachedInfo().Config.MemoryStorage {
		t.Fatal("the reader's consumer is kept on disk")
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// (An ingress's consumers stay on disk: TestAStoppedReadersLagOutlivesABrokerRestart.)
	select {
	case err := <-r.Err():
		if !strings.Contains(err.Error(), "no longer holds consumer "+name) {
			t.Fatalf("the reader failed with %v, want the consumer named as gone", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the reader did not fail though the broker forgot its consumer")
	}
}

// restartable starts a broker that keeps its store on disk, with a
// one-partition edge named name holding n messages, and returns the
// broker (shut down when the test ends), a JetStream on it and a publisher
// of more messages.
func restartable(t *testing.T, name string, n int) (*natstest.Server, jetstream.JetStream, edge.Spec, func(n int)) {
	t.Helper()
	ctx := context.Background()
	srv, err := natstest.Start(natstest.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown() })
	js := srv.JetStream(t)
	spec := edge.Spec{Pipeline: "p", Edge: name, Partitions: 1, Retention: time.Hour}
	if _, err := edge.Ensure(ctx, js, spec); err != nil {
		t.Fatal(err)
	}
	pub := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if _, err := js.Publish(ctx, spec.Subject(0), []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	pub(n)
	return srv, js, spec, pub
}
