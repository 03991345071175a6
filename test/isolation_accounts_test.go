package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/internal/edge"
)

// TestAPipelinesAdministratorCannotReachAnother: q5's administrator — the
// most a compromised process of q5 could hold, allowed to change every
// stream of its pipeline — gives its streams configurations that act with
// no user's permissions: an edge republishing what it stores into the
// dedup pipeline's latest checkpoint, and streams sourcing dedup's
// checkpoint bucket (as a stream of its account, and through dedup's API
// prefix as an external one). Each pipeline has an account of its own, so
// none reaches across: dedup's latest checkpoint is untouched, the copies
// hold nothing of dedup's, and dedup's mirror of the ingress goes on
// receiving. (On e09ed26, one account for every pipeline, the republish
// rewrote dedup's latest checkpoint and the source read every entry of
// its bucket.)
func TestAPipelinesAdministratorCannotReachAnother(t *testing.T) {
	r := startIsolationRun(t, "nexmark-q5", "nexmark-dedup")
	untouched := genuineLatest(t, r)
	js := r.js(t, q5Admin)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dedupCheckpoints := "KV_" + checkpoint.BucketName("nexmark")
	// The streams q5's administrator may change, each made to reach
	// across: an edge republishing what it stores into dedup's latest
	// checkpoint, the dead letters sourcing dedup's checkpoint bucket as a
	// stream of q5's account, another edge sourcing it through dedup's API
	// prefix.
	c := r.cs["nexmark-q5"]
	var edges []string
	for _, e := range c.Edges {
		if s := edge.StreamName(c.Pipeline, e.Name); s != q5Bids {
			edges = append(edges, s)
		}
	}
	changes := []struct {
		stream string
		change func(*jetstream.StreamConfig)
	}{
		{q5Bids, func(cfg *jetstream.StreamConfig) {
			cfg.RePublish = &jetstream.RePublish{Source: q5BidSubject, Destination: dedupLatest}
		}},
		{deadletter.StreamName(c.Pipeline), func(cfg *jetstream.StreamConfig) {
			cfg.Sources = []*jetstream.StreamSource{{Name: dedupCheckpoints}}
		}},
		{edges[0], func(cfg *jetstream.StreamConfig) {
			cfg.Sources = []*jetstream.StreamSource{{Name: dedupCheckpoints, External: &jetstream.ExternalStream{APIPrefix: "$JS.nexmark.API"}}}
		}},
	}
	var copies []string
	for i, ch := range changes {
		st, err := js.Stream(ctx, ch.stream)
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		ch.change(&cfg)
		if err := attempt(func(ctx context.Context) error { _, err := js.UpdateStream(ctx, cfg); return err }); err != nil {
			t.Fatalf("q5's administrator may change its own %s, and did not: %v", ch.stream, err)
		}
		if i > 0 {
			copies = append(copies, ch.stream)
		}
	}
	if _, err := js.Publish(ctx, q5BidSubject, []byte("forged")); err != nil {
		t.Fatal(err)
	}
	// The dedup pipeline's checkpoint bucket holds entries to copy, and
	// its ingress events to mirror.
	dedup := r.js(t, dedupAdmin)
	kv, err := dedup.KeyValue(ctx, checkpoint.BucketName("nexmark"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "manifest.dedup.0", []byte("state")); err != nil {
		t.Fatal(err)
	}
	producer := r.js(t, "nexmark-producer")
	if _, err := producer.Stream(ctx, "NEXMARK"); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := producer.Publish(ctx, fmt.Sprintf("nexmark.events.%d", i%4), []byte(fmt.Sprintf(`{"id":"e-%d"}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	// dedup's own mirror receives them all; give the copies as long.
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := dedup.Stream(ctx, "NEXMARK")
		if err != nil {
			t.Fatal(err)
		}
		if n := st.CachedInfo().State.Msgs; n >= 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dedup's mirror of the ingress holds %d of 20 events", st.CachedInfo().State.Msgs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	untouched()
	for _, name := range copies {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		for subject := range st.CachedInfo().State.Subjects {
			t.Errorf("q5's administrator's %s holds %s, of the dedup pipeline", name, subject)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter("$KV.>"))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(info.State.Subjects); n > 0 {
			t.Errorf("q5's administrator's %s holds %d keys of the dedup pipeline's checkpoint bucket", name, n)
		}
	}
}
