package test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/dispatcher"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/outbox"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/pkg/view"
	"github.com/weirflow/weir/pkg/window"
	auctions "github.com/weirflow/weir/services/nexmark-auctions"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
	q7 "github.com/weirflow/weir/services/nexmark-q7"
	"github.com/weirflow/weir/services/provider"
)

// auctionContractPath is the shipped auction flow's contract.
func auctionContractPath(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "contracts", "nexmark-winning-bids.yaml")
}

// TestAuctionChild runs the auction flow's service as a child process of
// TestAuctionChargesSurviveKills; on its own it skips.
func TestAuctionChild(t *testing.T) {
	if os.Getenv("WEIR_TEST_CHILD") != "auctions" {
		t.Skip("runs only as a child process of TestAuctionChargesSurviveKills")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := auctions.Run(ctx, nil, os.Getenv, os.Stderr); err != nil {
		t.Fatal(err)
	}
}

// TestDispatcherProcessChild runs the dispatcher as a child process of
// TestAuctionChargesSurviveKills; on its own it skips.
func TestDispatcherProcessChild(t *testing.T) {
	if os.Getenv("WEIR_TEST_CHILD") != "dispatcher" {
		t.Skip("runs only as a child process of TestAuctionChargesSurviveKills")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := dispatcher.Main(ctx, []string{"-timeout", "2s"}, os.Getenv, os.Stderr); err != nil {
		t.Fatal(err)
	}
}

// TestQ7Child runs the q7 service as a child process of
// TestAuctionChargesSurviveKills; on its own it skips.
func TestQ7Child(t *testing.T) {
	if os.Getenv("WEIR_TEST_CHILD") != "q7" {
		t.Skip("runs only as a child process of TestAuctionChargesSurviveKills")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := q7.Run(ctx, nil, os.Getenv, os.Stderr); err != nil {
		t.Fatal(err)
	}
}

// q7View writes the shipped q7 contract with its results as a versioned
// view (sink.effect versioned-upsert) to a file under dir.
func q7View(t *testing.T, dir string) (string, *contracts.Contract) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "contracts", "nexmark-q7.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile(`effect: at-least-once.*`).ReplaceAllString(string(data), "effect: versioned-upsert")
	path := filepath.Join(dir, "nexmark-q7-view.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := contracts.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Sink.Effect != contracts.EffectVersionedUpsert {
		t.Fatalf("%s declares %s", path, c.Sink.Effect)
	}
	return path, c
}

// winners is the auction flow's answer computed from the corpus alone, as
// a failure-free run gives it: per auction, the bid that wins it (the
// highest at or above the reserve placed no later than the expiry; at the
// same price the earlier, then the lower bidder).
func winners(t testing.TB, cfg nexmarkgen.Config) map[int64]auctions.Charge {
	t.Helper()
	g, err := nexmark.NewGenerator(cfg.Gen)
	if err != nil {
		t.Fatal(err)
	}
	won := map[int64]auctions.Charge{}
	type candidate struct {
		nexmark.Bid
		id string
	}
	bids := map[int64][]candidate{}
	var found []*nexmark.Auction
	for {
		m, ok := g.Next()
		if !ok {
			break
		}
		switch {
		case m.Duplicate:
		case m.Event.Auction != nil:
			found = append(found, m.Event.Auction)
		case m.Event.Bid != nil:
			bids[m.Event.Bid.Auction] = append(bids[m.Event.Bid.Auction], candidate{*m.Event.Bid, m.Event.ID})
		}
	}
	for _, a := range found {
		var best *candidate
		for _, b := range bids[a.ID] {
			switch {
			case b.DateTime > a.Expires:
			case best == nil, b.Price > best.Price,
				b.Price == best.Price && (b.DateTime < best.DateTime || b.DateTime == best.DateTime && b.Bidder < best.Bidder):
				best = &b
			}
		}
		if best != nil && best.Price >= a.Reserve {
			won[a.ID] = auctions.Charge{Auction: a.ID, Seller: a.Seller, Bidder: best.Bidder, Amount: best.Price, Bid: best.id}
		}
	}
	return won
}

// auctionRounds is how many kills TestAuctionChargesSurviveKills makes:
// WEIR_CHAOS_ROUNDS, or 8 — enough for CI; docs/RELIABILITY-LOG.md records
// longer runs.
func auctionRounds() int { return chaosRounds() }

// TestAuctionChargesSurviveKills runs the auction flow as it is deployed —
// the auction-close service, its checkpoint coordinator and the
// dispatcher as real processes, the provider simulator over HTTP — and
// beside it q7 with its results as a versioned view (its service and
// coordinator, real processes too) while the corpus streams in, and for
// many rounds kills one of these processes at random with SIGKILL and
// starts it again, the auction service sometimes on a new host (its local
// state gone). The provider fails now and then and answers slowly, so
// kills land mid-call too. A flush event per partition ends the corpus,
// closing every auction and window. In the end every auction a
// failure-free run charges (computed from the corpus alone) is charged
// exactly once, to its winner; no auction is charged that should not be;
// the committed outbox holds each intent exactly once; and the view holds,
// per window, the reference evaluator's newest pane. The seed is logged;
// WEIR_CHAOS_SEED replays a schedule.
func TestAuctionChargesSurviveKills(t *testing.T) {
	if testing.Short() {
		t.Skip("kills real processes")
	}
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c, err := contracts.Load(auctionContractPath(t))
	if err != nil {
		t.Fatal(err)
	}
	rounds := auctionRounds()
	cfg := genConfig(c, uint64(rounds)*1000)
	cfg.Gen.Hard = nexmark.HardCases{DuplicateEvery: 7, IdlePartition: -1}
	cfg.Gen.EventsPerSecond = 400 // auctions open 4-8 s of event time
	cfg.Rate = 1500
	want := winners(t, cfg)

	seed := time.Now().UnixNano()
	if s, err := strconv.ParseInt(os.Getenv("WEIR_CHAOS_SEED"), 10, 64); err == nil {
		seed = s
	}
	rng := rand.New(rand.NewSource(seed))
	t.Logf("seed %d, %d rounds, %d events, %d auctions with a winner", seed, rounds, cfg.Gen.Events, len(want))

	p := provider.New()
	hs := httptest.NewServer(p)
	defer hs.Close()
	control(t, hs.URL, provider.Control{Fail: 10, FailAfter: 10, Delay: "20ms"})

	dir := t.TempDir()
	q7Path, c7 := q7View(t, dir)
	env := func(child string, extra ...string) []string {
		return append(append(os.Environ(), "WEIR_TEST_CHILD="+child, "NATS_URL="+srv.ClientURL(),
			"WEIR_CONTRACT="+auctionContractPath(t), "WEIR_DATA_DIR="+dir, "WEIR_INSTANCE=0"), extra...)
	}
	procs := map[string][]string{
		"auctions":       {"-test.run=^TestAuctionChild$"},
		"coordinator":    {"-test.run=^TestCoordinatorChild$"},
		"dispatcher":     {"-test.run=^TestDispatcherProcessChild$"},
		"q7":             {"-test.run=^TestQ7Child$"},
		"q7-coordinator": {"-test.run=^TestCoordinatorChild$"},
	}
	envs := map[string][]string{
		"auctions":       env("auctions", "WEIR_DATA_DIR="+filepath.Join(dir, "auctions")),
		"coordinator":    env("coordinator", "WEIR_CHECKPOINT_INTERVAL=200ms", "WEIR_CHECKPOINT_TIMEOUT=3s", "WEIR_COORDINATOR_LEASE=1s"),
		"dispatcher":     env("dispatcher", "WEIR_PROVIDER="+hs.URL),
		"q7":             env("q7", "WEIR_CONTRACT="+q7Path, "WEIR_DATA_DIR="+filepath.Join(dir, "q7")),
		"q7-coordinator": env("coordinator", "WEIR_CONTRACT="+q7Path, "WEIR_CHECKPOINT_INTERVAL=200ms", "WEIR_CHECKPOINT_TIMEOUT=3s", "WEIR_COORDINATOR_LEASE=1s"),
	}
	running := map[string]*exec.Cmd{}
	start := func(name string) {
		cmd := exec.Command(os.Args[0], procs[name]...)
		cmd.Env = envs[name]
		if testing.Verbose() {
			cmd.Stderr = os.Stderr
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		running[name] = cmd
	}
	kill := func(name string) {
		cmd := running[name]
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	for n := range procs {
		start(n)
	}
	defer func() {
		for _, cmd := range running {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	}()

	pubDone := make(chan error, 1)
	go func() {
		_, err := publishErr(t.Context(), js, cfg)
		pubDone <- err
	}()
	// A victim is killed and started again; "auctions-new-host" is the
	// auction service started without its local state, as on a new host:
	// it restores from the latest checkpoint in the Object Store.
	names := []string{"auctions", "coordinator", "dispatcher", "auctions-new-host", "q7", "q7-coordinator"}
	kills := map[string]int{}
	first := rng.Perm(len(names)) // every kind of kill happens at least once
	for round := 0; round < rounds; round++ {
		time.Sleep(time.Duration(100+rng.Intn(700)) * time.Millisecond) // the kill point, not a wait for an outcome
		victim := names[rng.Intn(len(names))]
		if round < len(first) {
			victim = names[first[round]]
		}
		kills[victim]++
		if victim == "auctions-new-host" {
			kill("auctions")
			if err := os.RemoveAll(filepath.Join(dir, "auctions")); err != nil {
				t.Fatal(err)
			}
			start("auctions")
			continue
		}
		kill(victim)
		start(victim)
	}
	if err := <-pubDone; err != nil {
		t.Fatal(err)
	}
	// The flush: every partition's watermark moves past every auction's
	// expiry and every window of the corpus.
	q := queries["q7"]
	script := corpusScript(t, js, c7, cfg, q.input)
	spec, err := window.FromContract(q.shape, c7.Emission)
	if err != nil {
		t.Fatal(err)
	}
	panes, _, err := window.Evaluate(spec, q.agg, func(r record.Record) []byte { return r.Key }, script)
	if err != nil {
		t.Fatal(err)
	}
	newest := newestPanes(t, panes)

	var charged map[int64][]provider.Effect
	streamtest.CheckFor(t, 2*time.Minute, func() error {
		charged = map[int64][]provider.Effect{}
		for _, e := range p.Effects() {
			var ch auctions.Charge
			if err := json.Unmarshal(e.Payload, &ch); err != nil {
				return err
			}
			charged[ch.Auction] = append(charged[ch.Auction], e)
		}
		missing := 0
		for id := range want {
			if len(charged[id]) == 0 {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d auctions with a winner not charged yet (%d charges)", missing, len(want), len(p.Effects()))
		}
		return nil
	})
	effects := p.Effects() // before the outbox is read: each is of an intent stored by then
	for id, es := range charged {
		var got auctions.Charge
		_ = json.Unmarshal(es[0].Payload, &got)
		switch w, ok := want[id]; {
		case len(es) > 1:
			t.Errorf("auction %d charged %d times under keys %v", id, len(es), keysOf(es))
		case !ok:
			t.Errorf("auction %d charged %+v, but a failure-free run charges nothing for it", id, got)
		case got != w:
			t.Errorf("auction %d charged %+v, want %+v", id, got, w)
		}
	}
	// The committed outbox: each intent once, and every charge one of them.
	intents := map[string]int{}
	for _, m := range streamtest.Messages(t, js, edge.StreamName(c.Pipeline, "charges")) {
		if edge.IsCommitMarker(m.Headers()) {
			continue
		}
		in, err := outbox.Decode(m.Data())
		if err != nil {
			t.Fatalf("outbox message on %s: %v", m.Subject(), err)
		}
		intents[in.Key]++
	}
	for k, n := range intents {
		if n != 1 {
			t.Errorf("intent %s stored %d times in the outbox", k, n)
		}
	}
	for _, e := range effects {
		if intents[e.Key] != 1 {
			t.Errorf("charge under key %s is no intent of the outbox", e.Key)
		}
	}
	// The view: per window, the reference's newest pane.
	ctx := context.Background()
	streamtest.CheckFor(t, time.Minute, func() error {
		v, err := view.Open(ctx, js, c7.Pipeline, c7.Operators[len(c7.Operators)-1].Output)
		if err != nil {
			return err
		}
		return sameView(ctx, v, newest)
	}, func() string {
		// Bids the q7 pipeline filed as late (the watermark passed them)
		// tell a window that fired early from one that lost records.
		side, dead := 0, 0
		first := ""
		for _, l := range streamtest.Letters(t, js, c7.Pipeline) {
			if l.SideOutput {
				side++
				if first == "" {
					first = l.Operator + ": " + l.Reason
				}
			} else {
				dead++
			}
		}
		return fmt.Sprintf("q7 filed %d records on its side output (first: %q) and %d dead letters", side, first, dead)
	})
	t.Logf("%d rounds: kills %v; all %d auctions with a winner charged once each, %d intents, %d provider requests; the q7 view equals the reference in all %d windows",
		rounds, kills, len(charged), len(intents), p.Requests(), len(newest))
}

func keysOf(es []provider.Effect) string {
	var ks []string
	for _, e := range es {
		ks = append(ks, e.Key)
	}
	return strings.Join(ks, ",")
}

// control tells the provider simulator at url how to misbehave.
func control(t testing.TB, url string, c provider.Control) {
	t.Helper()
	if err := provider.Tell(url, c); err != nil {
		t.Fatal(err)
	}
}
