package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/dispatcher"
	"github.com/weirflow/weir/outbox"
	"github.com/weirflow/weir/pkg/edge"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/nexmark"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	auctions "github.com/weirflow/weir/services/nexmark-auctions"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
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

// winners is the auction flow's answer computed from the corpus alone, as
// a failure-free run gives it: per auction, the bid that wins it (the
// highest at or above the reserve placed no later than the expiry; at the
// same price the earlier, then the lower bidder), and its expiry.
func winners(t testing.TB, cfg nexmarkgen.Config) (won map[int64]auctions.Charge, expires map[int64]int64, end int64) {
	t.Helper()
	g, err := nexmark.NewGenerator(cfg.Gen)
	if err != nil {
		t.Fatal(err)
	}
	won, expires = map[int64]auctions.Charge{}, map[int64]int64{}
	type candidate struct {
		nexmark.Bid
		id string
	}
	bids := map[int64][]candidate{}
	var found []*nexmark.Auction
	lastByPartition := map[int]int64{}
	for {
		m, ok := g.Next()
		if !ok {
			break
		}
		lastByPartition[m.Partition] = max(lastByPartition[m.Partition], m.Event.TS)
		switch {
		case m.Duplicate:
		case m.Event.Auction != nil:
			found = append(found, m.Event.Auction)
		case m.Event.Bid != nil:
			bids[m.Event.Bid.Auction] = append(bids[m.Event.Bid.Auction], candidate{*m.Event.Bid, m.Event.ID})
		}
	}
	end = int64(1) << 62
	for _, ts := range lastByPartition {
		end = min(end, ts)
	}
	for _, a := range found {
		expires[a.ID] = a.Expires
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
	return won, expires, end
}

// auctionRounds is how many kills TestAuctionChargesSurviveKills makes:
// WEIR_CHAOS_ROUNDS, or 8 — enough for CI; docs/RELIABILITY.md records
// longer runs.
func auctionRounds() int { return chaosRounds() }

// TestAuctionChargesSurviveKills runs the auction flow as it is deployed —
// the auction-close service, its checkpoint coordinator and the
// dispatcher as real processes, the provider simulator over HTTP — while
// the corpus streams in, and for many rounds kills one of the three at
// random with SIGKILL and starts it again, the auction service sometimes
// on a new host (its local state gone). The provider fails now and then
// and answers slowly, so kills land mid-call too. In the end every auction
// a failure-free run charges (computed from the corpus alone) is charged
// exactly once, to its winner, under one idempotency key; no auction is
// charged that should not be; and the committed outbox holds each intent
// exactly once. The seed is logged; WEIR_CHAOS_SEED replays a schedule.
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
	want, expires, end := winners(t, cfg)

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
	env := func(child string, extra ...string) []string {
		return append(append(os.Environ(), "WEIR_TEST_CHILD="+child, "NATS_URL="+srv.ClientURL(),
			"WEIR_CONTRACT="+auctionContractPath(t), "WEIR_DATA_DIR="+dir, "WEIR_INSTANCE=0"), extra...)
	}
	procs := map[string][]string{
		"auctions":    {"-test.run=^TestAuctionChild$"},
		"coordinator": {"-test.run=^TestCoordinatorChild$"},
		"dispatcher":  {"-test.run=^TestDispatcherProcessChild$"},
	}
	envs := map[string][]string{
		"auctions":    env("auctions", "WEIR_DATA_DIR="+filepath.Join(dir, "auctions")),
		"coordinator": env("coordinator", "WEIR_CHECKPOINT_INTERVAL=200ms", "WEIR_CHECKPOINT_TIMEOUT=3s", "WEIR_COORDINATOR_LEASE=1s"),
		"dispatcher":  env("dispatcher", "WEIR_PROVIDER="+hs.URL),
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
	for _, n := range []string{"auctions", "coordinator", "dispatcher"} {
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
	names := []string{"auctions", "coordinator", "dispatcher", "auctions-new-host"}
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

	// Every auction that expired well before the last event of the
	// slowest partition (the watermark trails it by out_of_orderness)
	// must be charged; one expiring later may be, if the watermark moved
	// past it.
	due := map[int64]bool{}
	for id := range want {
		if expires[id] < end-3000 {
			due[id] = true
		}
	}
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
		for id := range due {
			if len(charged[id]) == 0 {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d due auctions not charged yet (%d charges)", missing, len(due), len(p.Effects()))
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
	t.Logf("%d rounds: kills %v; %d auctions charged once each (%d due), %d intents, %d provider requests",
		rounds, kills, len(charged), len(due), len(intents), p.Requests())
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
	body, _ := json.Marshal(c)
	resp, err := http.Post(url+"/control", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("POST /control: %s", resp.Status)
	}
}
