package test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/keygroup"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/pkg/window"
	"github.com/weirflow/weir/services/dedup"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
)

// TestTenantsStayApartAcrossARescale runs q11 — sessions per bidder —
// with tenant-scoped keys over the test corpus published twice, once per
// tenant: the same bidders, the same bids. Half way the session operator
// is rescaled from one instance to two, restoring from a checkpoint. Each
// tenant's panes equal the reference evaluator's over the corpus alone,
// under keys of that tenant: had the tenants' equal bidders shared a
// session, every count would be doubled.
func TestTenantsStayApartAcrossARescale(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	ctx := context.Background()
	c := tenantScoped(t, "nexmark-q11")
	tenants := []string{"acme", "globex"}
	gen := corpusConfig(c)
	want, flush := referencePanes(t, c, queries["q11"], gen)
	if _, err := nexmarkgen.EnsureStream(ctx, js, gen); err != nil {
		t.Fatal(err)
	}
	msgs := corpusMessages(t, gen.Gen)
	half := len(msgs) / 2

	store, err := checkpoint.Open(ctx, js, c.Pipeline, 1)
	if err != nil {
		t.Fatal(err)
	}
	rescale := func(sessions ...string) {
		t.Helper()
		if _, err := checkpoint.Rescale(ctx, js, c, map[string][]string{"q11-key": {"k0"}, "q11-sessions": sessions}, ""); err != nil {
			t.Fatal(err)
		}
	}
	rescale("s0")
	is := newInstances(t, srv.ClientURL(), c)
	key := is.start("q11-key", "k0")
	is.start("q11-sessions", "s0")
	runCoordinator(t, srv.ClientURL(), c, "co")
	publishTenanted(t, js, c, msgs[:half], tenants)
	var after uint64
	streamtest.CheckFor(t, 90*time.Second, func() error {
		if n := key.Stats().In; n < int64(len(tenants)*half) {
			return fmt.Errorf("q11-key read %d of %d", n, len(tenants)*half)
		}
		l, _, err := store.Latest(ctx)
		if err != nil {
			return err
		}
		if after == 0 {
			after = l.Checkpoint
		}
		if l.Checkpoint <= after {
			return fmt.Errorf("latest checkpoint %d, waiting for one after %d", l.Checkpoint, after)
		}
		return nil
	})
	rescale("s0", "s1")
	s1 := is.start("q11-sessions", "s1")
	publishTenanted(t, js, c, msgs[half:], tenants)
	publishFlush(t, js, c, flush, tenants)

	var got []window.Pane
	streamtest.CheckFor(t, 90*time.Second, func() error {
		got = resultPanes(t, js, c)
		if len(got) < len(tenants)*len(want) {
			return fmt.Errorf("%d of %d panes out", len(got), len(tenants)*len(want))
		}
		return nil
	})
	if n := s1.Stats().In; n == 0 {
		t.Error("the second session instance handled no bid: the rescale did not happen")
	}
	byTenant := map[string][]window.Pane{}
	for _, p := range got {
		tenant, ok := keygroup.TenantOf([]byte(p.Key))
		if !ok {
			t.Fatalf("pane %s has a key of no tenant", p.ID())
		}
		p.Key = strings.TrimPrefix(p.Key, tenant+"\x1e")
		byTenant[tenant] = append(byTenant[tenant], p)
	}
	for _, tenant := range tenants {
		t.Run(tenant, func(t *testing.T) { samePanes(t, byTenant[tenant], want) })
	}
	if len(byTenant) != len(tenants) {
		t.Errorf("panes of tenants %v, want %v", len(byTenant), tenants)
	}
}

// corpusMessages are the corpus's messages, in publish order.
func corpusMessages(t *testing.T, gen nexmark.Config) []nexmark.Message {
	t.Helper()
	g, err := nexmark.NewGenerator(gen)
	if err != nil {
		t.Fatal(err)
	}
	var out []nexmark.Message
	for {
		m, ok := g.Next()
		if !ok {
			return out
		}
		out = append(out, m)
	}
}

// publishTenanted publishes each message once per tenant, to its
// partition, and waits for the broker to store them all.
func publishTenanted(t *testing.T, js jetstream.JetStream, c *contracts.Contract, msgs []nexmark.Message, tenants []string) {
	t.Helper()
	for _, m := range msgs {
		for _, payload := range tenanted(m.Payload, tenants) {
			if _, err := js.PublishAsync(c.Ingress.Subject(m.Partition), payload); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		t.Fatal("publishing the corpus took over a minute")
	}
}

// TestTenantsSharingEventIDsAreNotDuplicates runs the dedup pipeline —
// state keyed by event ID — with tenant-scoped keys over events that two
// tenants publish with the same IDs: every one of both tenants' events
// comes out, none taken for the other tenant's duplicate.
func TestTenantsSharingEventIDsAreNotDuplicates(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	ctx := context.Background()
	c := tenantScoped(t, "nexmark-dedup")
	gen := genConfig(c, 200)
	gen.Gen.Hard = nexmark.HardCases{IdlePartition: -1}
	if _, err := nexmarkgen.EnsureStream(ctx, js, gen); err != nil {
		t.Fatal(err)
	}
	msgs := corpusMessages(t, gen.Gen)
	// Each tenant also sends one event whose time does not parse, under
	// the same ID: a dead letter each, carrying its tenant.
	bad := nexmark.Message{Partition: 0, Payload: []byte(`{"id":"bad-time","key":"k","ts":"yesterday"}`)}
	publishTenanted(t, js, c, append(msgs, bad), []string{"acme", "globex"})
	streamtest.Run(t, srv.ClientURL(), c, t.TempDir(), dedup.Factories())
	streamtest.CheckFor(t, 30*time.Second, func() error {
		n, err := countStream(ctx, js, edge.StreamName(c.Pipeline, "events"))
		if err != nil || n != uint64(2*len(msgs)) {
			return fmt.Errorf("%d events out of dedup, want %d of each tenant (%v)", n, len(msgs), err)
		}
		if n, err := countStream(ctx, js, deadletter.StreamName(c.Pipeline)); err != nil || n != 2 {
			return fmt.Errorf("%d dead letters, want one of each tenant (%v)", n, err)
		}
		return nil
	})
	tenants := map[string]bool{}
	for _, l := range streamtest.Letters(t, js, c.Pipeline) {
		if l.Field != "event_time" || !strings.Contains(string(l.Payload), `"bad-time"`) {
			t.Errorf("dead letter %+v: want the event bad-time's, for its event_time", l)
		}
		tenants[l.Tenant] = true
	}
	if !tenants["acme"] || !tenants["globex"] {
		t.Errorf("dead letters of tenants %v, want acme's and globex's", tenants)
	}
}

// tenantScoped is a shipped contract with each record's tenant in its
// JSON field "tenant" and every key scoped by it.
func tenantScoped(t *testing.T, name string) *contracts.Contract {
	t.Helper()
	c, err := contracts.Shipped(name)
	if err != nil {
		t.Fatal(err)
	}
	c.Identity.Tenant = contracts.Field{From: contracts.FromJSON, Field: "tenant"}
	c.State.TenantScoped = true
	if ps := c.Lint(); len(ps) > 0 {
		t.Fatalf("%v", ps)
	}
	return c
}
