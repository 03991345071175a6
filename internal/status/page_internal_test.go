package status

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/natstest"
)

// TestAGatheringOutlivesTheRequestThatStartedIt: a health check that gives
// up before a slow first gathering ends (the compose stack under load) must
// not end it, or no gathering ever completes and the page answers 503 for
// good; and a page that has a status answers within its patience while
// the broker is stalled, saying how old what it shows is.
func TestAGatheringOutlivesTheRequestThatStartedIt(t *testing.T) {
	srv := natstest.Run(t)
	front := srv.Front(t)
	nc, err := nats.Connect(front.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := contracts.Shipped("nexmark-dedup")
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(nc, js, c)

	// A requester that gives up at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h.status(ctx); err == nil {
		t.Fatal("a request that gave up was answered")
	}
	deadline := time.Now().Add(gatherTimeout + 5*time.Second)
	for {
		h.mu.Lock()
		good, running := h.mu.good != nil, h.mu.gathering != nil
		failed := h.mu.failed
		h.mu.Unlock()
		if good {
			break
		}
		if !running && failed != nil {
			t.Fatalf("the gathering failed: %v", failed)
		}
		if time.Now().After(deadline) {
			t.Fatal("the gathering the request started never completed")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The broker stalls: no error, no answer.
	time.Sleep(reuse)
	front.Stall()
	t.Cleanup(front.Resume)
	start := time.Now()
	b, err := h.status(context.Background())
	if err != nil {
		t.Fatalf("with a status gathered before, the page failed: %v", err)
	}
	if took := time.Since(start); took > patience+time.Second {
		t.Fatalf("the page answered after %s, beyond its patience %s", took, patience)
	}
	var s Status
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Problems) == 0 || !strings.Contains(s.Problems[len(s.Problems)-1], "ago") {
		t.Fatalf("a stale status does not say it is stale: %q", s.Problems)
	}
}
