package edge_test

import (
	"context"
	"testing"
	"time"

	"github.com/weirflow/weir/internal/admission"
	"github.com/weirflow/weir/internal/edge"
)

// TestAStoppedReadersLagOutlivesABrokerRestart: a stopped instance's
// consumer of the ingress lingers and keeps counting its lag for
// admission (overload.policy admission); after a broker restart it must
// still count.
func TestAStoppedReadersLagOutlivesABrokerRestart(t *testing.T) {
	ctx := context.Background()
	srv, js, spec, pub := restartable(t, "ingress", 3)
	in := edge.Input{Name: "ingress/0", Stream: spec.StreamName(), Subject: spec.Subject(0)}
	r, err := edge.OpenReader(ctx, js, edge.ReaderConfig{Consumer: edge.ConsumerPrefix("p", "op", "0"), Inputs: []edge.Input{in}, FetchBatch: 10, MaxAckPending: 100})
	if err != nil {
		t.Fatal(err)
	}
	for d := range r.C() {
		_ = d.Ack()
		if d.Seq == 3 {
			break
		}
	}
	time.Sleep(200 * time.Millisecond)
	r.Close() // the instance stops; its consumer lingers (InactiveThreshold)
	pub(50)
	prefixes := []string{edge.ConsumerName("p", "op") + "_"}
	lag, err := admission.Lag(ctx, js, []string{spec.StreamName()}, prefixes)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lag before the restart: %d", lag)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	js = srv.JetStream(t)
	var after int64
	for i := 0; i < 50; i++ {
		if after, err = admission.Lag(ctx, js, []string{spec.StreamName()}, prefixes); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("lag after the restart: %d (err %v)", after, err)
	if after < lag {
		t.Fatalf("a broker restart dropped the stopped pipeline's lag from %d to %d: admission now admits", lag, after)
	}
}
