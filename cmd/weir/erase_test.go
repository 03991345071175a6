package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/erasure"
	"github.com/weirflow/weir/internal/keygroup"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/pkg/view"
	"github.com/weirflow/weir/services/coordinator"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
	q11 "github.com/weirflow/weir/services/nexmark-q11"
)

// TestEraseRemovesAKeyAndNothingBringsItBack runs q11 (bid sessions per
// bidder) into a versioned view with a deletion policy where erasure wins,
// and erases a bidder that has closed sessions in the view and one still
// open in state. `weir erase` reports the state family and timers it
// removed and the view's entries it purged, and lists what still holds the
// bidder: the checkpoint taken before, the retained log, the registry.
// The bidder bids again. Then the pipeline restarts on empty disks from
// that checkpoint — which holds the open session — and the corpus is
// flushed, which would close it: the view holds the bidder's new session
// alone, while the other bidders' sessions close as before; started again
// on its own state, the pipeline keeps that session; and so does a replay
// of the whole ingress, without the rest.
func TestEraseRemovesAKeyAndNothingBringsItBack(t *testing.T) {
	srv := natstest.Run(t)
	url := srv.ClientURL()
	js := srv.JetStream(t)
	ctx := context.Background()
	file, c := erasableQ11(t, false)

	const events = 3000
	// Two events a second: a bidder's sessions are seconds apart.
	gen := nexmarkgen.Config{Stream: c.Ingress.Stream, SubjectPrefix: c.Ingress.SubjectPrefix, Retention: c.Ingress.Retention.D(),
		Producer: "gen", Count: events, Gen: nexmark.Config{Seed: 11, FirstEventTime: time.Now().Add(-time.Hour).Truncate(10 * time.Second),
			EventsPerSecond: 2, OutOfOrder: 500 * time.Millisecond, Partitions: c.Ingress.Partitions, KeyGroups: c.State.KeyGroups,
			Events: events, Hard: nexmark.HardCases{IdlePartition: -1}}}
	key, last := sessionBidder(t, gen.Gen)
	t.Logf("erasing bidder %s", key)
	if _, err := nexmarkgen.EnsureStream(ctx, js, gen); err != nil {
		t.Fatal(err)
	}
	if _, err := nexmarkgen.Publish(ctx, js, gen, time.Now, nil); err != nil {
		t.Fatal(err)
	}

	// The pipeline reads the corpus; a checkpoint is taken, and no more.
	p := streamtest.Run(t, url, c, t.TempDir(), q11.Factories())
	co, err := coordinator.New(coordinator.Config{NATSURL: url, Contract: c, Holder: "co", Interval: 300 * time.Millisecond, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	coCtx, stopCo := context.WithCancel(ctx)
	coDone := make(chan error, 1)
	go func() { coDone <- co.Run(coCtx) }()
	results, _ := c.Edge("results")
	v, err := view.Ensure(ctx, js, c.Pipeline, "results", results.Retention.D(), 1)
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.Open(ctx, js, c.Pipeline, 1)
	if err != nil {
		t.Fatal(err)
	}
	streamtest.CheckFor(t, 90*time.Second, func() error {
		if n := p.ByID["q11-key"].Stats().In; n < events {
			return fmt.Errorf("q11-key read %d of %d", n, events)
		}
		if n := len(viewKeysOf(t, v, key)); n == 0 {
			return fmt.Errorf("the view holds no session of bidder %s yet", key)
		}
		l, _, err := store.Latest(ctx)
		if err != nil || l.Checkpoint < 3 {
			return fmt.Errorf("checkpoint %d: %v", l.Checkpoint, err)
		}
		return nil
	})
	stopCo()
	<-coDone

	out, err := weir(t, "erase", "-nats", url, "-contract", file, "-key", key, "-json", "-as", "tester")
	if err != nil {
		t.Fatalf("weir erase: %v\n%s", err, out)
	}
	var rep eraseReport
	if err := json.Unmarshal([]byte(out[:strings.IndexByte(out, '\n')]), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	t.Logf("weir erase: %s", out)
	if len(rep.Erased) != 1 || rep.Erased[0].Operator != "q11-sessions" || !slices.Equal(rep.Erased[0].Families, []string{"q11-sessions"}) ||
		rep.Erased[0].Timers == 0 || rep.Erased[0].ViewKeys == 0 || len(rep.Missing) > 0 {
		t.Errorf("erased %+v, missing %v: want q11-sessions' open session, its timers and its view entries", rep.Erased, rep.Missing)
	}
	kinds := map[string]int{}
	for _, h := range rep.Held {
		kinds[h.Kind]++
		if h.Kind == "log" && h.Until.IsZero() {
			t.Errorf("%s is held without an age-out time: %s", h.What, h.How)
		}
	}
	if kinds["checkpoint"] == 0 || kinds["log"] < 2 || kinds["registry"] != 1 {
		t.Errorf("still held: %+v; want the checkpoints before the erasure, the ingress and edges, the registry", rep.Held)
	}
	if ks := viewKeysOf(t, v, key); len(ks) > 0 {
		t.Errorf("the view still holds %v", ks)
	}
	if out, err := weir(t, "audit", "-nats", url, "-pipeline", c.Pipeline, "-action", "erase"); err != nil || !strings.Contains(out, erasure.Digest([]byte(key))) || strings.Contains(out, " "+key+" ") {
		t.Errorf("the audit trail should name the erasure by the key's digest alone: %v\n%s", err, out)
	}

	// The bidder bids again after the erasure: a new session, which is
	// the bidder's again, to keep.
	bidder, _ := strconv.ParseInt(key, 10, 64)
	for i := range 3 {
		ts := last.Add(time.Duration(5+i) * time.Second).UnixMilli()
		publishEvent(t, js, c, 0, nexmark.Event{ID: fmt.Sprintf("after-%d", i), Kind: nexmark.KindBid, Key: "7", TS: ts,
			Bid: &nexmark.Bid{Auction: 7, Bidder: bidder, Price: 100, DateTime: ts}})
	}

	// New hosts restore the checkpoint taken before the erasure, which
	// holds the bidder's open session; they read again what came after
	// it, the bidder's new bids included; then a flush closes every
	// session.
	p.Stop()
	dir := t.TempDir()
	p = streamtest.Run(t, url, c, dir, q11.Factories())
	before := len(viewKeysOf(t, v, ""))
	flush := last.Add(time.Minute)
	for part := range c.Ingress.Partitions {
		publishEvent(t, js, c, part, nexmark.Event{ID: fmt.Sprintf("flush-%d", part), Kind: nexmark.KindPerson, Key: "99999", TS: flush.UnixMilli(),
			Person: &nexmark.Person{ID: 99999, Name: "flush", DateTime: flush.UnixMilli()}})
	}
	streamtest.CheckFor(t, 90*time.Second, func() error {
		if wm := p.ByID["q11-sessions"].Stats().Watermark; wm.Before(last.Add(time.Minute / 2)) {
			return fmt.Errorf("q11-sessions' watermark is at %s", wm)
		}
		return nil
	})
	time.Sleep(time.Second) // the last panes' store
	newSession := func(v *view.View, what string) {
		t.Helper()
		ks := viewKeysOf(t, v, key)
		if len(ks) != 1 {
			t.Fatalf("%s, the view holds %v of the bidder; want its session after the erasure alone", what, ks)
		}
		e, err := v.Get(ctx, ks[0])
		if err != nil || e.Pane.Window.Start.Before(last) {
			t.Fatalf("%s, the bidder's window is %+v (%v); want the session of its bids after the erasure", what, e.Pane, err)
		}
	}
	newSession(v, "after a restore from a checkpoint taken before the erasure")
	if after := len(viewKeysOf(t, v, "")); after <= before {
		t.Errorf("the flush closed no session: %d view entries before, %d after", before, after)
	}
	// Started again on its own state, which has the erasure applied,
	// the pipeline leaves the bidder's new session alone.
	p.Stop()
	p = streamtest.Run(t, url, c, dir, q11.Factories())
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if !p.ByID["q11-sessions"].Stats().Ready {
			return errors.New("q11-sessions is not running yet")
		}
		return nil
	})
	time.Sleep(time.Second)
	newSession(v, "after a start on state that had the erasure applied")
	p.Stop()

	// A replay of the whole ingress drops the bidder's records written
	// before the erasure, and keeps its session after it.
	st, err := js.Stream(ctx, c.Ingress.Stream)
	if err != nil {
		t.Fatal(err)
	}
	out, err = weir(t, "replay", "-nats", url, "-contract", file, "-from", "1", "-to", strconv.FormatUint(st.CachedInfo().State.LastSeq, 10), "-generation", "r1", "-as", "tester")
	if err != nil {
		t.Fatalf("weir replay: %v\n%s", err, out)
	}
	rv, err := view.Open(ctx, js, c.Pipeline+"-r1", "results")
	if err != nil {
		t.Fatal(err)
	}
	newSession(rv, "in a replay of the whole ingress")
	if n := len(viewKeysOf(t, rv, "")); n < before {
		t.Errorf("the replay's view holds %d sessions, fewer than the %d the live run had", n, before)
	}
}

// publishEvent publishes a Nexmark event to ingress partition part.
func publishEvent(t *testing.T, js jetstream.JetStream, c *contracts.Contract, part int, ev nexmark.Event) {
	t.Helper()
	data, err := ev.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), c.Ingress.Subject(part), data); err != nil {
		t.Fatal(err)
	}
}

// sessionBidder picks, in the corpus gen makes, a bidder with a session
// the corpus closes and one still open at its end: the bidder with the
// most bids among those bidding in its last 5 seconds, less than the gap
// and the out-of-orderness bound. It returns the
// bidder and the corpus's latest event time.
func sessionBidder(t *testing.T, gen nexmark.Config) (string, time.Time) {
	t.Helper()
	g, err := nexmark.NewGenerator(gen)
	if err != nil {
		t.Fatal(err)
	}
	times := map[int64][]time.Time{}
	var last time.Time
	for {
		m, ok := g.Next()
		if !ok {
			break
		}
		if m.Event.Time().After(last) {
			last = m.Event.Time()
		}
		if b := m.Event.Bid; b != nil {
			times[b.Bidder] = append(times[b.Bidder], m.Event.Time())
		}
	}
	best, most := int64(-1), 0
	for bidder, ts := range times {
		slices.SortFunc(ts, time.Time.Compare)
		closed := false
		for i := 1; i < len(ts); i++ {
			closed = closed || ts[i].Sub(ts[i-1]) > q11.Shape().Gap+2*time.Second
		}
		if closed && ts[len(ts)-1].After(last.Add(-5*time.Second)) && len(ts) > most {
			best, most = bidder, len(ts)
		}
	}
	if best < 0 {
		t.Fatal("no bidder of the corpus has a closed session and an open one")
	}
	return strconv.FormatInt(best, 10), last
}

// viewKeysOf lists the view's keys of key's windows; all of them for "".
func viewKeysOf(t *testing.T, v *view.View, key string) []string {
	t.Helper()
	es, err := v.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		if key == "" || strings.HasPrefix(e.Key, key+".") || strings.HasSuffix(key, "=1E") && strings.HasPrefix(e.Key, key) {
			out = append(out, e.Key)
		}
	}
	return out
}

// TestEraseATenant runs q11 with tenant-scoped keys into a view over the
// corpus published once per tenant, every session still open, and erases
// one tenant: every key of it goes from state — its sessions and their
// timers — and, once the corpus is flushed, the view holds the other
// tenant's sessions alone.
func TestEraseATenant(t *testing.T) {
	tq := runTenantQ11(t)
	out, err := weir(t, "erase", "-nats", tq.url, "-contract", tq.file, "-tenant", "globex", "-json")
	if err != nil {
		t.Fatalf("weir erase -tenant: %v\n%s", err, out)
	}
	var rep eraseReport
	if err := json.Unmarshal([]byte(out[:strings.IndexByte(out, '\n')]), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(rep.Erased) != 1 || rep.Erased[0].Keys < 10 || rep.Erased[0].Timers == 0 || !rep.Tenant || !rep.Found {
		t.Fatalf("erased %+v: want many of globex's bidders' sessions and their timers", rep.Erased)
	}
	t.Logf("erased %d keys of globex, %d timers", rep.Erased[0].Keys, rep.Erased[0].Timers)
	v := tq.flush(t)
	acme, globex := len(viewKeysOf(t, v, "acme=1E")), len(viewKeysOf(t, v, "globex=1E"))
	if acme == 0 || globex > 0 {
		t.Errorf("the view holds %d sessions of acme and %d of globex; want acme's alone", acme, globex)
	}
}

// TestEraseATenantsKey: under tenant-scoped keys, `weir erase -key K`
// alone is refused, saying to name the tenant — state holds each
// tenant's K as a key of its own, and erasing K itself would erase
// nothing — while `-tenant acme -key K` erases acme's K, from state and,
// once the corpus is flushed, from the view, the registry and the audit
// trail naming the qualified key's digest; globex's K and acme's other
// keys stay. A bidder nobody has is reported as nothing found.
func TestEraseATenantsKey(t *testing.T) {
	tq := runTenantQ11(t)
	key := tq.bidder
	out, err := weir(t, "erase", "-nats", tq.url, "-contract", tq.file, "-key", key, "-json")
	if err == nil || !errors.Is(err, erasure.ErrTenantNeeded) || !strings.Contains(err.Error(), "-tenant") {
		t.Errorf("weir erase -key alone on tenant-scoped keys: %v\n%s; want it refused, naming -tenant", err, out)
	}
	out, err = weir(t, "erase", "-nats", tq.url, "-contract", tq.file, "-tenant", "acme", "-key", key, "-json", "-as", "tester")
	if err != nil {
		t.Fatalf("weir erase -tenant -key: %v\n%s", err, out)
	}
	var rep eraseReport
	if err := json.Unmarshal([]byte(out[:strings.IndexByte(out, '\n')]), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	qualified := keygroup.Scoped("acme", []byte(key))
	if len(rep.Erased) != 1 || rep.Erased[0].Keys != 1 || rep.Erased[0].Timers == 0 || rep.Tenant || !rep.Found || rep.Digest != erasure.Digest(qualified) {
		t.Fatalf("erased %+v, digest %s: want acme's bidder %s, its session and timers, under the qualified key's digest", rep.Erased, rep.Digest, key)
	}
	if out, err := weir(t, "audit", "-nats", tq.url, "-pipeline", tq.c.Pipeline, "-action", "erase"); err != nil || !strings.Contains(out, erasure.Digest(qualified)) {
		t.Errorf("the audit trail should name the erasure by the qualified key's digest: %v\n%s", err, out)
	}
	out, err = weir(t, "erase", "-nats", tq.url, "-contract", tq.file, "-tenant", "acme", "-key", "no-such-bidder")
	if err != nil || !strings.Contains(out, "nothing found") {
		t.Errorf("erasing a key nobody has: %v\n%s; want the erasure registered and the report saying nothing was found", err, out)
	}
	v := tq.flush(t)
	mine, theirs, others := viewKeysOf(t, v, "acme=1E"+key), viewKeysOf(t, v, "globex=1E"+key), len(viewKeysOf(t, v, "acme=1E"))
	if len(mine) > 0 || len(theirs) == 0 || others == 0 {
		t.Errorf("the view holds %v of acme's bidder %s, %v of globex's, %d of acme's in all; want globex's alone of that bidder, and acme's others", mine, key, theirs, others)
	}
}

// tenantQ11 is q11 with tenant-scoped keys running over one corpus
// published once for tenant acme and once for globex, every session
// still open.
type tenantQ11 struct {
	url, file string
	c         *contracts.Contract
	js        jetstream.JetStream
	p         *streamtest.Pipeline
	last      time.Time
	// bidder is the corpus's busiest bidder.
	bidder string
}

// runTenantQ11 publishes the corpus and waits for the pipeline to have
// read it all.
func runTenantQ11(t *testing.T) *tenantQ11 {
	t.Helper()
	srv := natstest.Run(t)
	tq := &tenantQ11{url: srv.ClientURL(), js: srv.JetStream(t)}
	ctx := context.Background()
	tq.file, tq.c = erasableQ11(t, true)
	c := tq.c
	gen := nexmark.Config{Seed: 5, FirstEventTime: time.Now().Add(-time.Hour).Truncate(10 * time.Second), EventsPerSecond: 50,
		Partitions: c.Ingress.Partitions, KeyGroups: c.State.KeyGroups, Events: 1000, Hard: nexmark.HardCases{IdlePartition: -1}}
	if _, err := nexmarkgen.EnsureStream(ctx, tq.js, nexmarkgen.Config{Stream: c.Ingress.Stream, SubjectPrefix: c.Ingress.SubjectPrefix, Retention: c.Ingress.Retention.D(), Gen: gen}); err != nil {
		t.Fatal(err)
	}
	g, err := nexmark.NewGenerator(gen)
	if err != nil {
		t.Fatal(err)
	}
	bids, busiest := map[int64]int{}, int64(-1)
	published := 0
	for m, ok := g.Next(); ok; m, ok = g.Next() {
		if m.Event.Time().After(tq.last) {
			tq.last = m.Event.Time()
		}
		if b := m.Event.Bid; b != nil {
			if bids[b.Bidder]++; busiest < 0 || bids[b.Bidder] > bids[busiest] {
				busiest = b.Bidder
			}
		}
		for _, tenant := range []string{"acme", "globex"} {
			payload := append([]byte(`{"tenant":"`+tenant+`",`), m.Payload[1:]...)
			if _, err := tq.js.Publish(ctx, c.Ingress.Subject(m.Partition), payload); err != nil {
				t.Fatal(err)
			}
			published++
		}
	}
	tq.bidder = strconv.FormatInt(busiest, 10)
	tq.p = streamtest.Run(t, tq.url, c, t.TempDir(), q11.Factories())
	streamtest.CheckFor(t, 60*time.Second, func() error {
		if n := tq.p.ByID["q11-key"].Stats().In; n < int64(published) {
			return fmt.Errorf("q11-key read %d of %d", n, published)
		}
		return nil
	})
	time.Sleep(time.Second) // the sessions read the last bids
	return tq
}

// flush publishes, for both tenants, an event a minute past the corpus on
// every partition, which closes every session, and returns the view once
// the sessions' watermark has passed them.
func (tq *tenantQ11) flush(t *testing.T) *view.View {
	t.Helper()
	ctx, c := context.Background(), tq.c
	flush := tq.last.Add(time.Minute)
	for part := range c.Ingress.Partitions {
		for _, tenant := range []string{"acme", "globex"} {
			data, err := (nexmark.Event{ID: fmt.Sprintf("flush-%d", part), Kind: nexmark.KindPerson, Key: "99999", TS: flush.UnixMilli(),
				Person: &nexmark.Person{ID: 99999, Name: "flush", DateTime: flush.UnixMilli()}}).Encode()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tq.js.Publish(ctx, c.Ingress.Subject(part), append([]byte(`{"tenant":"`+tenant+`",`), data[1:]...)); err != nil {
				t.Fatal(err)
			}
		}
	}
	v, err := view.Open(ctx, tq.js, c.Pipeline, "results")
	if err != nil {
		t.Fatal(err)
	}
	streamtest.CheckFor(t, 60*time.Second, func() error {
		if wm := tq.p.ByID["q11-sessions"].Stats().Watermark; wm.Before(tq.last.Add(time.Minute / 2)) {
			return fmt.Errorf("q11-sessions' watermark is at %s", wm)
		}
		return nil
	})
	time.Sleep(time.Second) // the last panes' store
	return v
}

// erasableQ11 writes q11's contract with its results in a view and a
// deletion policy where erasure wins — with tenants, keys tenant-scoped —
// and returns the file and the contract, linted.
func erasableQ11(t *testing.T, tenants bool) (string, *contracts.Contract) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "contracts", "nexmark-q11.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(src), "effect: at-least-once", "effect: versioned-upsert", 1)
	if tenants {
		text = strings.Replace(text, "  event_time:", "  tenant: {from: json, field: tenant}\n  event_time:", 1)
		text = strings.Replace(text, "\nstate:\n", "\nstate:\n  tenant_scoped: true\n", 1)
	}
	text += "\ndeletion:\n  within: 48h\n  replay: erasure-wins\n"
	file := filepath.Join(t.TempDir(), "q11-erasable.yaml")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := contracts.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if ps := c.Lint(); len(ps) > 0 || c.State.TenantScoped != tenants {
		t.Fatalf("tenant-scoped %v: %v", c.State.TenantScoped, ps)
	}
	return file, c
}

// TestAnErasureMarksAMirrorOnceItCaughtUp: where the pipeline reads a
// mirror of the ingress (an account of its own), weir erase takes the
// ingress's mark from the mirror once it holds all the ingress held — so
// a record stored just before the erasure is not taken for one after it.
func TestAnErasureMarksAMirrorOnceItCaughtUp(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORIGIN", Subjects: []string{"in.*"}}); err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		if _, err := js.Publish(ctx, fmt.Sprintf("in.%d", i%4), []byte("e")); err != nil {
			t.Fatal(err)
		}
	}
	mirror, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "MIRROR", Mirror: &jetstream.StreamSource{Name: "ORIGIN"}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := mirrorCaughtUp(ctx, mirror)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != 500 {
		t.Fatalf("the mark is %d, want the ingress's last sequence 500", info.State.LastSeq)
	}
	// A record the ingress stored the moment before is in the mark: the
	// mirror's "no lag" from before it does not count.
	for i := 501; i <= 505; i++ {
		if _, err := js.Publish(ctx, "in.0", []byte("e")); err != nil {
			t.Fatal(err)
		}
		info, err := mirrorCaughtUp(ctx, mirror)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.LastSeq != uint64(i) {
			t.Fatalf("the mark is %d just after the ingress stored %d", info.State.LastSeq, i)
		}
	}
	// A mirror that hears nothing is not taken as caught up.
	stalled, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "STALLED", Mirror: &jetstream.StreamSource{Name: "NOWHERE"}})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
	defer scancel()
	if _, err := mirrorCaughtUp(sctx, stalled); err == nil {
		t.Fatal("a mirror of a stream that does not exist was taken as caught up")
	}
}
