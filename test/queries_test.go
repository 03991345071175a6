package test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/catalog"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/pkg/window"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
	q11 "github.com/weirflow/weir/services/nexmark-q11"
	q5 "github.com/weirflow/weir/services/nexmark-q5"
	q8 "github.com/weirflow/weir/services/nexmark-q8"
)

// query is one Nexmark query under test: its contract, its service and how
// the reference evaluator sees its input (catalog.Reference).
type query struct {
	contract  string
	service   string
	factories map[string]stream.Factory
	shape     window.Spec
	agg       window.Aggregator
	// input maps a generated event to the record the window operator sees,
	// or false when the query ignores the event.
	input func(nexmark.Event) (record.Record, bool)
}

// q5Input is what q5's count stage sees of an event: a bid, keyed by its
// auction.
func q5Input(ev nexmark.Event) (record.Record, bool) {
	if ev.Bid == nil {
		return record.Record{}, false
	}
	return catalog.BidRecord(ev, strconv.FormatInt(ev.Bid.Auction, 10))
}

// queries are the catalog's queries with a reference evaluator.
var queries = func() map[string]query {
	out := map[string]query{}
	for _, q := range catalog.Shipped() {
		if r := q.Reference; r != nil {
			out[q.Name] = query{contract: q.Contract, service: q.Service, factories: q.Factories, shape: r.Shape, agg: r.Agg, input: r.Input}
		}
	}
	return out
}()

// TestQueriesMatchReference runs each query as a service over a generated
// corpus (out of order within the declared bound, duplicates, a hot key)
// and compares every pane it emits with the reference evaluator's.
func TestQueriesMatchReference(t *testing.T) {
	for name, q := range queries {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			checkQuery(t, q)
		})
	}
}

// corpus publishes the generated test corpus and a flush event per
// partition, and returns what the window stage of q sees: its records and
// the watermark the flush carries the pipeline to.
func corpus(t *testing.T, js jetstream.JetStream, c *contracts.Contract, input func(nexmark.Event) (record.Record, bool)) []window.Step {
	t.Helper()
	gen := corpusConfig(c)
	publish(t, js, gen)
	return corpusScript(t, js, c, gen, input)
}

// corpusConfig is the generated test corpus: out of order within the
// declared bound, duplicates, a hot key.
func corpusConfig(c *contracts.Contract) nexmarkgen.Config {
	first := time.Now().Add(-time.Hour).Truncate(10 * time.Second)
	return nexmarkgen.Config{
		Stream: c.Ingress.Stream, Streams: c.Ingress.Streams, SubjectPrefix: c.Ingress.SubjectPrefix, Retention: c.Ingress.Retention.D(),
		Producer: "gen-test",
		Gen: nexmark.Config{
			Seed: 11, FirstEventTime: first, EventsPerSecond: 50,
			Partitions: c.Ingress.Partitions, KeyGroups: c.State.KeyGroups,
			OutOfOrder: time.Second, Events: 2000,
			Hard: nexmark.HardCases{DuplicateEvery: 13, HotKeyRatio: 0.3, IdlePartition: -1},
		},
	}
}

// corpusScript publishes a flush event per partition after the corpus gen
// and returns what the window stage of the query sees: its records and the
// watermark the flush carries the pipeline to.
func corpusScript(t *testing.T, js jetstream.JetStream, c *contracts.Contract, gen nexmarkgen.Config, input func(nexmark.Event) (record.Record, bool)) []window.Step {
	t.Helper()
	script, flush := referenceScript(c, gen, input)
	publishFlush(t, js, c, flush, nil)
	return script
}

// referenceScript is what the window stage of the query sees of the
// corpus gen, ending with the watermark a flush at the returned time
// carries the pipeline to.
func referenceScript(c *contracts.Contract, gen nexmarkgen.Config, input func(nexmark.Event) (record.Record, bool)) ([]window.Step, time.Time) {
	g, _ := nexmark.NewGenerator(gen.Gen)
	var script []window.Step
	last := gen.Gen.FirstEventTime
	for {
		m, ok := g.Next()
		if !ok {
			break
		}
		if r, ok := input(m.Event); ok {
			r := r
			script = append(script, window.Step{Record: &r})
		}
		if m.Event.Time().After(last) {
			last = m.Event.Time()
		}
	}
	// A person event per partition, a minute after the corpus: queries
	// ignore persons, but their event time moves every partition's
	// watermark past every window of the corpus.
	flush := last.Add(time.Minute)
	return append(script, window.Step{Watermark: flush.Add(-c.Progress.OutOfOrderness.D() - time.Millisecond)}), flush
}

// referencePanes are the reference evaluator's panes of query q over the
// corpus gen, flushed, and the time of the flush that closes them.
func referencePanes(t *testing.T, c *contracts.Contract, q query, gen nexmarkgen.Config) ([]record.Record, time.Time) {
	t.Helper()
	script, flush := referenceScript(c, gen, q.input)
	spec, err := window.FromContract(q.shape, c.Emission)
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := window.Evaluate(spec, q.agg, func(r record.Record) []byte { return r.Key }, script)
	if err != nil {
		t.Fatal(err)
	}
	return want, flush
}

// publishFlush publishes a person event at time flush to every ingress
// partition, once per tenant when tenants are given.
func publishFlush(t *testing.T, js jetstream.JetStream, c *contracts.Contract, flush time.Time, tenants []string) {
	t.Helper()
	for p := 0; p < c.Ingress.Partitions; p++ {
		ev := nexmark.Event{ID: fmt.Sprintf("flush-%d", p), Kind: nexmark.KindPerson, Key: "99999", TS: flush.UnixMilli(),
			Person: &nexmark.Person{ID: 99999, Name: "flush", DateTime: flush.UnixMilli()}}
		data, err := ev.Encode()
		if err != nil {
			t.Fatal(err)
		}
		for _, payload := range tenanted(data, tenants) {
			if _, err := js.Publish(context.Background(), c.Ingress.Subject(p), payload); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// tenanted is an event's payload once per tenant, with a field tenant
// added; the payload itself when no tenants are given.
func tenanted(data []byte, tenants []string) [][]byte {
	if len(tenants) == 0 {
		return [][]byte{data}
	}
	var out [][]byte
	for _, tn := range tenants {
		out = append(out, append([]byte(`{"tenant":"`+tn+`",`), data[1:]...))
	}
	return out
}

// runService runs a service's operators until the test ends.
func runService(t *testing.T, url string, c *contracts.Contract, service string, factories map[string]stream.Factory) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- stream.RunService(ctx, stream.Config{
			NATSURL: url, Contract: c, DataDir: t.TempDir(), Operator: stream.AllOperators,
			Instance: "0", TickInterval: 20 * time.Millisecond, Logger: testLogger(t),
		}, service, factories)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("service: %v", err)
		}
	})
}

func checkQuery(t *testing.T, q query) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c, err := contracts.Shipped(q.contract)
	if err != nil {
		t.Fatal(err)
	}
	script := corpus(t, js, c, q.input)
	spec, err := window.FromContract(q.shape, c.Emission)
	if err != nil {
		t.Fatal(err)
	}
	want, side, err := window.Evaluate(spec, q.agg, func(r record.Record) []byte { return r.Key }, script)
	if err != nil {
		t.Fatal(err)
	}
	if len(side) != 0 || len(want) == 0 {
		t.Fatalf("reference: %d panes, %d side outputs; the corpus should have panes and no late data", len(want), len(side))
	}
	runService(t, srv.ClientURL(), c, q.service, q.factories)
	awaitPanes(t, js, c, want)
}

// awaitPanes waits for the query's result edge to hold as many panes as the
// reference evaluator's, then compares them.
func awaitPanes(t *testing.T, js jetstream.JetStream, c *contracts.Contract, want []record.Record) {
	t.Helper()
	var got []window.Pane
	streamtest.CheckFor(t, 90*time.Second, func() error {
		got = resultPanes(t, js, c)
		if len(got) < len(want) {
			return fmt.Errorf("%d of %d panes out", len(got), len(want))
		}
		return nil
	})
	samePanes(t, got, want)
}

// samePanes compares the panes a query emitted with the reference
// evaluator's records of them: equal, none missing, none repeated.
func samePanes(t *testing.T, got []window.Pane, want []record.Record) {
	t.Helper()
	var err error
	wantPanes := make([]window.Pane, len(want))
	for i, r := range want {
		if wantPanes[i], err = window.DecodePane(r.Value); err != nil {
			t.Fatal(err)
		}
	}
	// Panes of one key come out in order; across keys (and result
	// partitions) the interleaving is the runtime's, so compare by ID.
	sortPanes := func(ps []window.Pane) {
		sort.Slice(ps, func(i, j int) bool { return ps[i].ID() < ps[j].ID() })
	}
	checkKeyOrder(t, got)
	sortPanes(got)
	sortPanes(wantPanes)
	if len(got) != len(wantPanes) {
		t.Fatalf("%d panes, reference %d", len(got), len(wantPanes))
	}
	// Whether a window's ON_TIME pane is also its final one depends on
	// whether one watermark advance passed both its end and its garbage
	// collection time; the reference jumps to the final watermark at once,
	// the runtime advances step by step. Everything else must be equal.
	for i := range got {
		g, w := got[i], wantPanes[i]
		gi, wi := g.Info, w.Info
		gi.Final, wi.Final = false, false
		if g.ID() != w.ID() || gi != wi || string(g.Value) != string(w.Value) {
			t.Fatalf("pane %d differs:\n got %+v value %s\nwant %+v value %s", i, g, g.Value, w, w.Value)
		}
	}
	t.Logf("%d panes equal to the reference", len(got))
}

// TestQ5MatchesReference runs hot items over the corpus: each window's
// highest count and its auctions equal what the reference evaluator's
// counting panes say.
func TestQ5MatchesReference(t *testing.T) {
	t.Parallel()
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c, err := contracts.Shipped("nexmark-q5")
	if err != nil {
		t.Fatal(err)
	}
	script := corpus(t, js, c, q5Input)
	want := reference(t, c, script).hot
	runService(t, srv.ClientURL(), c, q5.Service, q5.Factories())
	checkQ5(t, js, c, want)
}

// checkQ5 waits for q5's results and requires each window's once, equal
// to want's.
func checkQ5(t *testing.T, js jetstream.JetStream, c *contracts.Contract, want map[string]q5.Hot) {
	t.Helper()
	got := map[string]q5.Hot{}
	streamtest.CheckFor(t, 90*time.Second, func() error {
		got = map[string]q5.Hot{}
		for _, m := range resultMessages(t, js, c) {
			var h q5.Hot
			if err := json.Unmarshal(m, &h); err != nil {
				t.Fatalf("result %s: %v", m, err)
			}
			if _, dup := got[h.Window.String()]; dup {
				t.Fatalf("window %s emitted twice", h.Window)
			}
			got[h.Window.String()] = h
		}
		if len(got) < len(want) {
			return fmt.Errorf("%d of %d windows out", len(got), len(want))
		}
		return nil
	})
	for w, h := range want {
		g := got[w]
		if g.Count != h.Count || strings.Join(g.Auctions, ",") != strings.Join(h.Auctions, ",") {
			t.Fatalf("window %s: got %+v, reference %+v", w, g, h)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d windows out, reference %d", len(got), len(want))
	}
	t.Logf("%d windows equal to the reference", len(got))
}

// checkKeyOrder asserts that each key's window versions come out in order.
func checkKeyOrder(t *testing.T, ps []window.Pane) {
	t.Helper()
	last := map[string]uint64{}
	for _, p := range ps {
		k := p.Key + "|" + p.Window.String()
		if p.Version <= last[k] {
			t.Fatalf("pane %s after version %d of its window", p.ID(), last[k])
		}
		last[k] = p.Version
	}
}

// resultMessages reads the payloads of the query's json result edge.
func resultMessages(t *testing.T, js jetstream.JetStream, c *contracts.Contract) [][]byte {
	t.Helper()
	var out [][]byte
	for _, m := range streamtest.Messages(t, js, edge.StreamName(c.Pipeline, "results")) {
		out = append(out, m.Data())
	}
	return out
}

// resultPanes reads the query's json result edge.
func resultPanes(t *testing.T, js jetstream.JetStream, c *contracts.Contract) []window.Pane {
	t.Helper()
	var out []window.Pane
	for _, m := range streamtest.Messages(t, js, edge.StreamName(c.Pipeline, "results")) {
		p, err := window.DecodePane(m.Data())
		if err != nil {
			t.Fatalf("result %s is not a pane: %v", m.Data(), err)
		}
		if id := m.Headers().Get(jetstream.MsgIDHeader); id != c.Pipeline+".results."+edge.IDPart(p.ID()) {
			t.Fatalf("result message ID %q, want the pane's deterministic ID %q", id, p.ID())
		}
		out = append(out, p)
	}
	return out
}

// TestQ8MatchesReference runs new users over the corpus: the pairs it
// emits are exactly the person–auction pairs a brute-force join of the
// same events finds, each once.
func TestQ8MatchesReference(t *testing.T) {
	t.Parallel()
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c, err := contracts.Shipped("nexmark-q8")
	if err != nil {
		t.Fatal(err)
	}
	var events []nexmark.Event
	corpus(t, js, c, func(ev nexmark.Event) (record.Record, bool) {
		events = append(events, ev)
		return record.Record{}, false
	})
	want := map[string]bool{}
	for _, p := range events {
		if p.Person == nil {
			continue
		}
		for _, a := range events {
			if a.Auction != nil && a.Auction.Seller == p.Person.ID &&
				p.Time().Truncate(q8.Size).Equal(a.Time().Truncate(q8.Size)) {
				want[fmt.Sprintf("%d/%d", p.Person.ID, a.Auction.ID)] = true
			}
		}
	}
	if len(want) == 0 {
		t.Fatal("the corpus has no new users; the test would prove nothing")
	}
	runService(t, srv.ClientURL(), c, q8.Service, q8.Factories())
	got := map[string]int{}
	streamtest.CheckFor(t, 90*time.Second, func() error {
		got = map[string]int{}
		for _, m := range resultMessages(t, js, c) {
			var u q8.NewUser
			if err := json.Unmarshal(m, &u); err != nil {
				t.Fatalf("result %s: %v", m, err)
			}
			got[fmt.Sprintf("%d/%d", u.Person, u.Auction)]++
		}
		if len(got) < len(want) {
			return fmt.Errorf("%d of %d pairs out", len(got), len(want))
		}
		return nil
	})
	for k, n := range got {
		if !want[k] || n != 1 {
			t.Fatalf("pair %s emitted %d times; reference has it: %v", k, n, want[k])
		}
	}
	t.Logf("%d new-user pairs equal to the reference", len(got))
}

// TestQ11RetractionsSumToTheResult feeds q11 a corpus full of late bids —
// some within the allowed lateness, merging sessions that were already
// emitted, some beyond it. For every bidder, the counts of the inserts it
// sees minus those of the retractions equal the bids that were not sent to
// the side output: a consumer applying the revisions holds exactly the
// current sessions.
func TestQ11RetractionsSumToTheResult(t *testing.T) {
	t.Parallel()
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c, err := contracts.Shipped("nexmark-q11")
	if err != nil {
		t.Fatal(err)
	}
	first := time.Now().Add(-time.Hour).Truncate(10 * time.Second)
	gen := nexmarkgen.Config{
		Stream: c.Ingress.Stream, SubjectPrefix: c.Ingress.SubjectPrefix, Retention: c.Ingress.Retention.D(),
		Producer: "gen-late", Rate: 2000,
		Gen: nexmark.Config{
			Seed: 5, FirstEventTime: first, EventsPerSecond: 4,
			Partitions: c.Ingress.Partitions, KeyGroups: c.State.KeyGroups,
			OutOfOrder: time.Second, Events: 3000,
			Hard: nexmark.HardCases{LateEvery: 5, LateBy: 20 * time.Second, IdlePartition: -1},
		},
	}
	runService(t, srv.ClientURL(), c, q11.Service, q11.Factories())
	publish(t, js, gen)
	g, _ := nexmark.NewGenerator(gen.Gen)
	bids := map[string]int64{}
	var last time.Time
	for {
		m, ok := g.Next()
		if !ok {
			break
		}
		if m.Event.Bid != nil {
			bids[strconv.FormatInt(m.Event.Bid.Bidder, 10)]++
		}
		if m.Event.Time().After(last) {
			last = m.Event.Time()
		}
	}
	flush := last.Add(time.Minute)
	for p := 0; p < c.Ingress.Partitions; p++ {
		ev := nexmark.Event{ID: fmt.Sprintf("flush-%d", p), Kind: nexmark.KindPerson, Key: "99999", TS: flush.UnixMilli(),
			Person: &nexmark.Person{ID: 99999, Name: "flush", DateTime: flush.UnixMilli()}}
		data, _ := ev.Encode()
		if _, err := js.Publish(context.Background(), c.Ingress.Subject(p), data); err != nil {
			t.Fatal(err)
		}
	}
	// Side output: bids too late to count.
	sideOf := func() map[string]int64 {
		out := map[string]int64{}
		for _, l := range sideLetters(t, js, c) {
			// The window operator's input is the bid itself.
			var b nexmark.Bid
			if err := json.Unmarshal(l.Payload, &b); err != nil {
				t.Fatalf("side output %s: %v", l.At, err)
			}
			out[strconv.FormatInt(b.Bidder, 10)]++
		}
		return out
	}
	var net map[string]int64
	var retractions int
	var side map[string]int64
	streamtest.CheckFor(t, 90*time.Second, func() error {
		net, retractions = map[string]int64{}, 0
		for _, p := range resultPanes(t, js, c) {
			var v struct{ Count int64 }
			if err := json.Unmarshal(p.Value, &v); err != nil {
				t.Fatal(err)
			}
			if p.Kind == window.Retract {
				net[p.Key] -= v.Count
				retractions++
			} else {
				net[p.Key] += v.Count
			}
		}
		side = sideOf()
		for k, n := range bids {
			if net[k] != n-side[k] {
				return fmt.Errorf("bidder %s: inserts minus retractions %d, want %d bids - %d side outputs", k, net[k], n, side[k])
			}
		}
		return nil
	})
	var sides int64
	for _, n := range side {
		sides += n
	}
	if retractions == 0 || sides == 0 {
		t.Fatalf("%d retractions, %d side outputs: the corpus should produce both", retractions, sides)
	}
	t.Logf("%d bidders consistent; %d retractions, %d bids side-output", len(bids), retractions, sides)
}
