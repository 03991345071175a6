package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/dispatcher"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/erasure"
	"github.com/weirflow/weir/internal/keygroup"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/outbox"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	auctions "github.com/weirflow/weir/services/nexmark-auctions"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
	"github.com/weirflow/weir/services/provider"
)

// TestEraseReachesTheOutbox runs the auction flow (sink.effect outbox)
// with tenant-scoped keys and a deletion policy, its coordinator and its
// dispatcher against a provider that performs every call anew, over one
// corpus published for tenant acme and again for globex, until an auction
// has been charged for both. `weir erase -tenant acme -key <auction>`
// erases acme's auction from the operator's state, deletes its charge
// from the outbox and strips the dispatcher's outcome of it — kept, so
// the charge stays settled — and says so; the report lists no pending
// intent and no outbox log left holding the key. globex's charge of the
// same auction is untouched. The erased intent stored on the outbox again,
// as a writer restored from an older snapshot would, is acknowledged
// without a call: the winner is charged once.
func TestEraseReachesTheOutbox(t *testing.T) {
	a := startAuctions(t, true)
	js, cfg, d, p := a.js, a.cfg, a.d, a.p
	url, file, ctx := a.url, a.file, context.Background()

	// An auction charged for both tenants, and each tenant's intent of it.
	var auction string
	var mine, theirs charge
	streamtest.CheckFor(t, 90*time.Second, func() error {
		charges := outboxCharges(t, js, cfg.Stream)
		for _, ch := range charges {
			key := strconv.FormatInt(ch.charge.Auction, 10)
			a, g := charges.of("acme", key), charges.of("globex", key)
			if a == nil || g == nil {
				continue
			}
			for _, x := range []*charge{a, g} {
				if o, err := d.Outcome(ctx, x.intent.Key); err != nil || !o.Done {
					return fmt.Errorf("auction %s: intent %s not performed yet: %+v %v", key, x.intent.Key, o, err)
				}
			}
			auction, mine, theirs = key, *a, *g
			return nil
		}
		return fmt.Errorf("no auction charged for both tenants yet (%d charges on the outbox)", len(charges))
	})
	t.Logf("erasing acme's auction %s: intent %s at %d; globex's %s at %d", auction, mine.intent.Key, mine.seq, theirs.intent.Key, theirs.seq)

	out, err := weir(t, "erase", "-nats", url, "-contract", file, "-tenant", "acme", "-key", auction, "-json", "-as", "tester")
	if err != nil {
		t.Fatalf("weir erase: %v\n%s", err, out)
	}
	t.Logf("weir erase: %s", out)
	var rep eraseReport
	if err := json.Unmarshal([]byte(out[:strings.IndexByte(out, '\n')]), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if rep.Digest != erasure.Digest(keygroup.Scoped("acme", []byte(auction))) || !rep.Found || len(rep.Missing) > 0 ||
		len(rep.Erased) != 1 || !slices.Equal(rep.Erased[0].Families, []string{auctions.Family}) {
		t.Errorf("erased %+v, missing %v, digest %s: want acme's auction erased from the operator's state", rep.Erased, rep.Missing, rep.Digest)
	}
	o := rep.Outbox
	if o == nil || len(o.Intents) != 1 || o.Intents[0].Key != mine.intent.Key || !o.Intents[0].Done || o.Outcomes != 1 ||
		len(o.Pending) > 0 || len(o.DeadLetters) > 0 || o.Unnamed.Intents+o.Unnamed.Outcomes > 0 {
		t.Fatalf("outbox erasure %+v, want acme's charge of auction %s erased and nothing left", o, auction)
	}
	for _, h := range rep.Held {
		if h.Kind == "intent" || h.Kind == "outcome" || strings.HasPrefix(h.What, cfg.Stream+" ") {
			t.Errorf("still held: %+v; want nothing of the outbox", h)
		}
	}

	st, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetMsg(ctx, mine.seq); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("acme's charge is still on the outbox at %d: %v", mine.seq, err)
	}
	if charges := outboxCharges(t, js, cfg.Stream); charges.of("acme", auction) != nil || charges.of("globex", auction) == nil {
		t.Errorf("the outbox holds acme's charge of auction %s %v, globex's %v; want globex's alone",
			auction, charges.of("acme", auction) != nil, charges.of("globex", auction) != nil)
	}
	if got, err := d.Outcome(ctx, mine.intent.Key); err != nil || !got.Erased || !got.Done || got.Source != "" || got.Answer != "" || got.Erasable != nil {
		t.Errorf("acme's outcome: %+v %v; want it kept, done, and stripped", got, err)
	}
	if got, err := d.Outcome(ctx, theirs.intent.Key); err != nil || got.Erased || got.Source == "" || len(got.Erasable) == 0 {
		t.Errorf("globex's outcome: %+v %v; want it whole", got, err)
	}

	// Stored again, as a writer restored from a snapshot taken before the
	// erasure would recompute it: settled by its outcome, not called.
	m := nats.NewMsg(cfg.RetrySubject)
	m.Data = mine.data
	m.Header[edge.HeaderErasable] = mine.names
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	streamtest.CheckFor(t, 30*time.Second, func() error {
		cons, err := js.Consumer(ctx, cfg.Stream, cfg.Consumer)
		if err != nil {
			return err
		}
		info, err := cons.Info(ctx)
		if err != nil || info.AckFloor.Stream < ack.Sequence {
			return fmt.Errorf("the dispatcher acknowledged up to %d, the intent stored again is at %d (%v)", info.AckFloor.Stream, ack.Sequence, err)
		}
		return nil
	})
	calls := 0
	for _, e := range p.Effects() {
		if e.Key == mine.intent.Key {
			calls++
		}
	}
	if calls != 1 {
		t.Errorf("acme's charge of auction %s performed %d times, want once", auction, calls)
	}
}

// TestEraseListsHeldIntentsUntilTheyAreSettled runs the auction flow
// without a coordinator, so that the auction operator holds every charge
// for a checkpoint that never completes, and erases tenant acme: the
// operator reports the charges of acme it holds — an erasure cancels no
// effect — and weir erase lists them as still held. Once checkpoints
// complete, they are stored and performed, each once; erased again, acme
// is found in the outbox and erased from it, globex's charges left.
func TestEraseListsHeldIntentsUntilTheyAreSettled(t *testing.T) {
	a := startAuctions(t, false)
	streamtest.CheckFor(t, 90*time.Second, func() error {
		if wm := a.pipeline.ByID[auctions.Operator].Stats().Watermark; wm.Before(a.flush.Add(-10 * time.Second)) {
			return fmt.Errorf("the auctions' watermark is at %s, the flush at %s", wm, a.flush)
		}
		return nil
	})
	erase := func() eraseReport {
		t.Helper()
		out, err := weir(t, "erase", "-nats", a.url, "-contract", a.file, "-tenant", "acme", "-json", "-timeout", "30s")
		if err != nil {
			t.Fatalf("weir erase: %v\n%s", err, out)
		}
		t.Logf("weir erase: %s", out)
		var rep eraseReport
		if err := json.Unmarshal([]byte(out[:strings.IndexByte(out, '\n')]), &rep); err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		if len(rep.Erased) != 1 || rep.Outbox == nil {
			t.Fatalf("erased %+v, outbox %+v: want the auction operator's report and the outbox's", rep.Erased, rep.Outbox)
		}
		return rep
	}
	rep := erase()
	held := rep.Erased[0].Held
	if held == 0 || len(rep.Outbox.Intents)+len(rep.Outbox.Pending) > 0 || !rep.Found {
		t.Fatalf("held %d, outbox %+v: want acme's charges held by the operator, none stored", held, rep.Outbox)
	}
	listed := false
	for _, h := range rep.Held {
		listed = listed || h.Kind == "intent" && h.What == fmt.Sprintf("%d intents held by %s/0", held, auctions.Operator)
	}
	if !listed {
		t.Errorf("still held %+v: want the %d intents the operator holds", rep.Held, held)
	}

	// Checkpoints complete: the charges are stored, and performed.
	coordinate(t, a.url, a.c, 300*time.Millisecond, 10*time.Second)
	acme, globex := erasure.Request{Tenant: "acme"}, erasure.Request{Tenant: "globex"}
	var mine []string
	streamtest.CheckFor(t, 60*time.Second, func() error {
		mine = mine[:0]
		theirs := 0
		for _, ch := range outboxCharges(t, a.js, a.cfg.Stream) {
			switch {
			case acme.Reaches(ch.names):
				mine = append(mine, ch.intent.Key)
			case globex.Reaches(ch.names):
				theirs++
			}
			if o, err := a.d.Outcome(context.Background(), ch.intent.Key); err != nil || !o.Done {
				return fmt.Errorf("charge %s not performed yet: %v", ch.intent.Key, err)
			}
		}
		if len(mine) != held || theirs != held {
			return fmt.Errorf("%d charges of acme and %d of globex stored, want %d each", len(mine), theirs, held)
		}
		return nil
	})
	rep = erase()
	var erased []string
	for _, i := range rep.Outbox.Intents {
		if i.Done {
			erased = append(erased, i.Key)
		}
	}
	slices.Sort(erased)
	slices.Sort(mine)
	if !slices.Equal(erased, mine) || rep.Outbox.Outcomes != held || len(rep.Outbox.Pending) > 0 || rep.Erased[0].Held > 0 {
		t.Errorf("erased again: %+v, the operator holding %d; want acme's %d charges erased, performed", rep.Outbox, rep.Erased[0].Held, held)
	}
	performed := map[string]int{}
	for _, e := range a.p.Effects() {
		performed[e.Key]++
	}
	for _, k := range mine {
		if performed[k] != 1 {
			t.Errorf("acme's charge %s performed %d times, want once", k, performed[k])
		}
	}
	if n := len(outboxCharges(t, a.js, a.cfg.Stream)); n != held {
		t.Errorf("the outbox holds %d charges, want globex's %d", n, held)
	}
	// Reconciled with the provider's record, acme's charges are intents
	// erased, each performed once, not someone else's effects.
	records, err := json.Marshal(a.p.Effects())
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "effects.json")
	if err := os.WriteFile(file, records, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := weir(t, "effects", "reconcile", "-nats", a.url, "-contract", a.file, "-provider-records", file)
	if want := fmt.Sprintf("%d intents: %d once, 0 twice, 0 never, 0 unknown", 2*held, 2*held); err != nil || !strings.HasPrefix(out, want) ||
		!strings.Contains(out, fmt.Sprintf("(%d of the intents were erased", held)) {
		t.Errorf("weir effects reconcile: %v\n%s\nwant %q and %d erased", err, out, want, held)
	}
}

// auctionRun is the auction flow with tenant-scoped keys and a deletion
// policy, run over one corpus published for tenant acme and again for
// globex, flushed so that every auction closes; the dispatcher runs
// against a provider that performs every call anew.
type auctionRun struct {
	url, file string
	js        jetstream.JetStream
	c         *contracts.Contract
	cfg       dispatcher.Config
	d         *dispatcher.Dispatcher
	p         *provider.Provider
	pipeline  *streamtest.Pipeline
	// flush is the event time of the flush.
	flush time.Time
}

// startAuctions starts the auction flow, with its coordinator when
// checkpoints is set: without one no checkpoint completes, and the
// operator holds every intent.
func startAuctions(t *testing.T, checkpoints bool) *auctionRun {
	t.Helper()
	srv := natstest.Run(t)
	a := &auctionRun{url: srv.ClientURL(), js: srv.JetStream(t)}
	url, js, ctx := a.url, a.js, context.Background()
	file, c := erasableAuctions(t)
	a.file, a.c = file, c
	cfg, err := dispatcher.ForContract(c, "")
	if err != nil {
		t.Fatal(err)
	}
	a.cfg = cfg
	gen := nexmark.Config{Seed: 3, FirstEventTime: time.Now().Add(-time.Hour).Truncate(10 * time.Second), EventsPerSecond: 400,
		Partitions: c.Ingress.Partitions, KeyGroups: c.State.KeyGroups, Events: 1500, Hard: nexmark.HardCases{IdlePartition: -1}}
	if _, err := nexmarkgen.EnsureStream(ctx, js, nexmarkgen.Config{Stream: c.Ingress.Stream, SubjectPrefix: c.Ingress.SubjectPrefix, Retention: c.Ingress.Retention.D(), Gen: gen}); err != nil {
		t.Fatal(err)
	}
	g, err := nexmark.NewGenerator(gen)
	if err != nil {
		t.Fatal(err)
	}
	tenants := []string{"acme", "globex"}
	var last time.Time
	for m, ok := g.Next(); ok; m, ok = g.Next() {
		if m.Event.Time().After(last) {
			last = m.Event.Time()
		}
		for _, tenant := range tenants {
			if _, err := js.Publish(ctx, c.Ingress.Subject(m.Partition), append([]byte(`{"tenant":"`+tenant+`",`), m.Payload[1:]...)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A person a minute past the corpus on every partition closes every
	// auction.
	flush := last.Add(time.Minute)
	a.flush = flush
	for part := range c.Ingress.Partitions {
		data, err := (nexmark.Event{ID: fmt.Sprintf("flush-%d", part), Kind: nexmark.KindPerson, Key: "99999", TS: flush.UnixMilli(),
			Person: &nexmark.Person{ID: 99999, Name: "flush", DateTime: flush.UnixMilli()}}).Encode()
		if err != nil {
			t.Fatal(err)
		}
		for _, tenant := range tenants {
			if _, err := js.Publish(ctx, c.Ingress.Subject(part), append([]byte(`{"tenant":"`+tenant+`",`), data[1:]...)); err != nil {
				t.Fatal(err)
			}
		}
	}

	p := provider.New()
	hs := httptest.NewServer(p)
	t.Cleanup(hs.Close)
	a.p = p
	if err := p.Set(provider.Control{IgnoreKeys: true}); err != nil {
		t.Fatal(err)
	}
	a.pipeline = streamtest.Run(t, url, c, t.TempDir(), auctions.Factories())
	if checkpoints {
		coordinate(t, url, c, 300*time.Millisecond, 10*time.Second)
	}
	dcfg, err := dispatcher.ForContract(c, hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	dcfg.Logger = slog.New(slog.DiscardHandler)
	d, err := dispatcher.New(ctx, js, dcfg)
	if err != nil {
		t.Fatal(err)
	}
	a.d = d
	dctx, stopDispatcher := context.WithCancel(ctx)
	dispatched := make(chan error, 1)
	go func() { dispatched <- d.Run(dctx) }()
	t.Cleanup(func() {
		stopDispatcher()
		if err := <-dispatched; err != nil {
			t.Errorf("dispatcher: %v", err)
		}
	})
	return a
}

// charge is a charge intent on the outbox.
type charge struct {
	seq    uint64
	data   []byte
	names  []string
	intent outbox.Intent
	charge auctions.Charge
}

type charges []charge

// of is the charge of tenant's auction key, found by the erasure names
// it carries; nil when the outbox holds none.
func (cs charges) of(tenant, key string) *charge {
	names := erasure.Names(keygroup.Scoped(tenant, []byte(key)), tenant)
	for i := range cs {
		if slices.Equal(cs[i].names, names) {
			return &cs[i]
		}
	}
	return nil
}

// outboxCharges reads every charge on the outbox, skipping the messages
// deleted.
func outboxCharges(t *testing.T, js jetstream.JetStream, name string) charges {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out charges
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if edge.IsCommitMarker(m.Header) {
			continue
		}
		in, err := outbox.Decode(m.Data)
		if err != nil {
			t.Fatalf("outbox message %d: %v", seq, err)
		}
		ch := charge{seq: seq, data: m.Data, names: m.Header.Values(edge.HeaderErasable), intent: in}
		if err := json.Unmarshal(in.Payload, &ch.charge); err != nil {
			t.Fatal(err)
		}
		out = append(out, ch)
	}
	return out
}

// erasableAuctions writes the auction flow's contract with tenant-scoped
// keys and a deletion policy where erasure wins, and returns the file and
// the contract, linted.
func erasableAuctions(t *testing.T) (string, *contracts.Contract) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "contracts", "nexmark-winning-bids.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(src), "  event_time:", "  tenant: {from: json, field: tenant}\n  event_time:", 1)
	text = strings.Replace(text, "\nstate:\n", "\nstate:\n  tenant_scoped: true\n", 1)
	text += "\ndeletion:\n  within: 48h\n  replay: erasure-wins\n"
	file := filepath.Join(t.TempDir(), "winning-bids-erasable.yaml")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := contracts.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if ps := c.Lint(); len(ps) > 0 || !c.State.TenantScoped || c.Sink.Effect != contracts.EffectOutbox {
		t.Fatalf("tenant-scoped %v, effect %s: %v", c.State.TenantScoped, c.Sink.Effect, ps)
	}
	return file, c
}
