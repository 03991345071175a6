package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/dispatcher"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/erasure"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/outbox"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/pkg/view"
	auctions "github.com/weirflow/weir/services/nexmark-auctions"
	q11 "github.com/weirflow/weir/services/nexmark-q11"
	"github.com/weirflow/weir/services/provider"
)

// TestAnErasureRunsWithItsOwnCredentials runs q11 into a view with a
// deletion policy, each process with the credentials weir auth derives:
// the services watch the erasure registry, the administrator registers an
// erasure of a bidder and hears the session operator's report, the
// bidder's windows leave the view, and the server denies nothing.
func TestAnErasureRunsWithItsOwnCredentials(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "contracts", "nexmark-q11.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "q11-erasable.yaml")
	text := strings.Replace(string(src), "effect: at-least-once", "effect: versioned-upsert", 1) + "\ndeletion:\n  within: 48h\n  replay: erasure-wins\n"
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := contracts.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	r := startAccessRun(t, c)
	admin := r.js(t, access.RoleAdmin)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	publish(t, r.js(t, access.RoleProducer), corpusConfig(c))
	corpusScript(t, r.js(t, access.RoleProducer), c, corpusConfig(c), queries["q11"].input)
	defer r.runPipeline(t, q11.Factories(), t.TempDir())()

	var v *view.View
	var bidder string
	streamtest.CheckFor(t, 90*time.Second, func() error {
		if v == nil {
			if v, err = view.Open(ctx, admin, c.Pipeline, "results"); err != nil {
				return err
			}
		}
		es, err := v.List(ctx)
		if err != nil || len(es) == 0 {
			return fmt.Errorf("the view holds %d windows (%v)", len(es), err)
		}
		bidder, _, _ = strings.Cut(es[0].Key, ".")
		return nil
	})

	reports := erasureReports(t, admin, c.Pipeline)
	reg, err := erasure.Open(ctx, admin, c.Pipeline, c.Deletion.Within.D())
	if err != nil {
		t.Fatal(err)
	}
	st, err := admin.Stream(ctx, c.Ingress.Stream)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := reg.Put(ctx, erasure.Request{Key: []byte(bidder), At: time.Now(), Actor: "tester",
		Marks: map[string]uint64{c.Ingress.Stream: st.CachedInfo().State.LastSeq}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case rep := <-reports:
		if rep.Rev != rev || rep.Operator != "q11-sessions" || rep.ViewKeys == 0 {
			t.Errorf("report %+v, want q11-sessions' of revision %d with the bidder's windows purged", rep, rev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no instance reported the erasure")
	}
	es, err := v.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if strings.HasPrefix(e.Key, bidder+".") {
			t.Errorf("the view still holds %s", e.Key)
		}
	}
	r.checkNothingDenied(t)
}

// TestAnOutboxErasureRunsWithItsOwnCredentials runs the auction flow
// (sink.effect outbox) with a deletion policy, each process — the auction
// service, its coordinator, the dispatcher — with the credentials weir
// auth derives, until the provider has refused the first charge: a dead
// letter. The administrator registers an erasure of its auction, hears the
// auction service's report, and erases what the dispatcher keeps of it as
// weir erase does: the charge leaves the outbox and the dead-letter
// stream, its outcome is stripped, and the server denies nothing.
func TestAnOutboxErasureRunsWithItsOwnCredentials(t *testing.T) {
	src, err := os.ReadFile(auctionContractPath(t))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "winning-bids-erasable.yaml")
	if err := os.WriteFile(file, append(src, "\ndeletion:\n  within: 48h\n  replay: erasure-wins\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := contracts.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if ps := c.Lint(); len(ps) > 0 {
		t.Fatal(ps)
	}
	r := startAccessRun(t, c)
	admin, producer := r.js(t, access.RoleAdmin), r.js(t, access.RoleProducer)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g, err := nexmark.NewGenerator(nexmark.Config{Seed: 3, FirstEventTime: time.Now().Add(-time.Hour).Truncate(10 * time.Second), EventsPerSecond: 400,
		Partitions: c.Ingress.Partitions, KeyGroups: c.State.KeyGroups, Events: 1500, Hard: nexmark.HardCases{IdlePartition: -1}})
	if err != nil {
		t.Fatal(err)
	}
	var last time.Time
	for m, ok := g.Next(); ok; m, ok = g.Next() {
		if m.Event.Time().After(last) {
			last = m.Event.Time()
		}
		if _, err := producer.Publish(ctx, c.Ingress.Subject(m.Partition), m.Payload); err != nil {
			t.Fatal(err)
		}
	}
	flush := last.Add(time.Minute) // closes every auction
	for part := range c.Ingress.Partitions {
		data, err := (nexmark.Event{ID: fmt.Sprintf("flush-%d", part), Kind: nexmark.KindPerson, Key: "99999", TS: flush.UnixMilli(),
			Person: &nexmark.Person{ID: 99999, Name: "flush", DateTime: flush.UnixMilli()}}).Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := producer.Publish(ctx, c.Ingress.Subject(part), data); err != nil {
			t.Fatal(err)
		}
	}
	p := provider.New()
	if err := p.Set(provider.Control{Refuse: 1}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p)
	defer hs.Close()
	defer r.runPipeline(t, auctions.Factories(), t.TempDir())()
	cfg, err := dispatcher.ForContract(c, hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = testLogger(t)
	d, err := dispatcher.New(ctx, r.js(t, access.RoleDispatcher), cfg)
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, "dispatcher", d.Run)

	// The charge refused, and its auction.
	var intent outbox.Intent
	var seq uint64
	var auction string
	streamtest.CheckFor(t, 90*time.Second, func() error {
		st, err := admin.Stream(ctx, cfg.Stream)
		if err != nil {
			return err
		}
		for s := st.CachedInfo().State.FirstSeq; s <= st.CachedInfo().State.LastSeq && st.CachedInfo().State.Msgs > 0; s++ {
			m, err := st.GetMsg(ctx, s)
			if err != nil || edge.IsCommitMarker(m.Header) {
				continue
			}
			in, err := outbox.Decode(m.Data)
			if err != nil {
				return err
			}
			if o, err := d.Outcome(ctx, in.Key); err != nil || o.Done {
				continue // not settled yet, or performed
			}
			var ch auctions.Charge
			if err := json.Unmarshal(in.Payload, &ch); err != nil {
				return err
			}
			intent, seq, auction = in, s, strconv.FormatInt(ch.Auction, 10)
			return nil
		}
		return errors.New("no charge on the outbox refused yet")
	})

	reports := erasureReports(t, admin, c.Pipeline)
	reg, err := erasure.Open(ctx, admin, c.Pipeline, c.Deletion.Within.D())
	if err != nil {
		t.Fatal(err)
	}
	in, err := admin.Stream(ctx, c.Ingress.Stream)
	if err != nil {
		t.Fatal(err)
	}
	req := erasure.Request{Key: []byte(auction), At: time.Now(), Actor: "tester", Marks: map[string]uint64{c.Ingress.Stream: in.CachedInfo().State.LastSeq}}
	if req.Rev, err = reg.Put(ctx, req); err != nil {
		t.Fatal(err)
	}
	select {
	case rep := <-reports:
		if rep.Rev != req.Rev || rep.Operator != auctions.Operator {
			t.Errorf("report %+v, want %s's of revision %d", rep, auctions.Operator, req.Rev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no instance reported the erasure")
	}
	e, err := dispatcher.Erase(ctx, admin, cfg, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Intents) != 1 || e.Intents[0].Key != intent.Key || len(e.DeadLetters) != 1 || e.Outcomes != 1 {
		t.Errorf("erased %+v, want the charge %s of auction %s and its dead letter", e, intent.Key, auction)
	}
	st, err := admin.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetMsg(ctx, seq); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("the charge is still on the outbox at %d: %v", seq, err)
	}
	if o, err := d.Outcome(ctx, intent.Key); err != nil || !o.Erased || o.Done {
		t.Errorf("the charge's outcome: %+v %v, want it stripped, and failed", o, err)
	}
	if n := len(streamtest.Messages(t, admin, cfg.DeadLetters)); n != 0 {
		t.Errorf("%d dead letters left, want none", n)
	}
	r.checkNothingDenied(t)
}

// erasureReports subscribes, as admin, to the erasure reports of
// pipeline's instances until the test ends.
func erasureReports(t *testing.T, admin jetstream.JetStream, pipeline string) <-chan erasure.Report {
	t.Helper()
	reports := make(chan erasure.Report, 8)
	sub, err := admin.Conn().Subscribe(erasure.ReportsSubject(pipeline), func(m *nats.Msg) {
		if rep, err := erasure.ParseReport(pipeline, m.Subject, m.Data); err == nil {
			reports <- rep
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return reports
}
