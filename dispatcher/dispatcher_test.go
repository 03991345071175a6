package dispatcher_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/dispatcher"
	"github.com/weirflow/weir/outbox"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/provider"
)

const (
	outboxStream = "WEIR_T_INTENTS"
	subjects     = "weir.t.intents.*"
)

func config(url string) dispatcher.Config {
	return dispatcher.Config{Stream: outboxStream, Subjects: subjects, Consumer: "dispatcher",
		Outcomes: "WEIR_T_EFFECTS", DeadLetters: "WEIR_T_EFFECTS_DLQ", DeadLetterSubject: "weir.t.effects.dlq",
		Provider: url, Timeout: 300 * time.Millisecond, Concurrency: 4, MaxAttempts: 50,
		Backoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
}

// intents publishes n intents to the outbox stream, and returns their keys.
func intents(t *testing.T, js jetstream.JetStream, n int) []string {
	t.Helper()
	ctx := context.Background()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: outboxStream, Subjects: []string{subjects}}); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := range n {
		at := record.Coordinate{Stream: "AUCTIONS", Subject: "auctions.0", Seq: uint64(i + 1)}
		in := outbox.Intent{Key: outbox.Key("t", "close", at, 0), Kind: "charges",
			Payload: json.RawMessage(fmt.Sprintf(`{"auction":%d,"amount":%d}`, i, 100+i)), Source: at.String()}
		r, err := in.Record(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, fmt.Sprintf("weir.t.intents.%d", i%4), r.Value); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, in.Key)
	}
	return keys
}

func control(t *testing.T, url string, c provider.Control) {
	t.Helper()
	if err := provider.Tell(url, c); err != nil {
		t.Fatal(err)
	}
}

func run(t *testing.T, js jetstream.JetStream, cfg dispatcher.Config) *dispatcher.Dispatcher {
	t.Helper()
	d, err := dispatcher.New(context.Background(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dispatcher: %v", err)
		}
	})
	return d
}

// performedOnce checks that the provider performed each key exactly once.
func performedOnce(p *provider.Provider, keys []string) error {
	seen := map[string]int{}
	for _, e := range p.Effects() {
		seen[e.Key]++
	}
	for _, k := range keys {
		if seen[k] != 1 {
			return fmt.Errorf("intent %s performed %d times (%d effects for %d intents)", k, seen[k], len(p.Effects()), len(keys))
		}
	}
	if len(seen) != len(keys) {
		return fmt.Errorf("%d keys performed, %d intents", len(seen), len(keys))
	}
	return nil
}

// TestDispatcherPerformsEachIntentOnce runs intents against the provider
// simulator while it fails, loses answers, answers too late for the
// client, refuses one and is sent a malformed intent: every good intent is
// performed exactly once and recorded done; the refused and the malformed
// ones are dead letters with their coordinates and answers.
func TestDispatcherPerformsEachIntentOnce(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	p := provider.New()
	hs := httptest.NewServer(p)
	defer hs.Close()
	keys := intents(t, js, 30)
	// A malformed intent, and one the provider refuses.
	if _, err := js.Publish(context.Background(), "weir.t.intents.0", []byte(`{"key":"not a uuid"}`)); err != nil {
		t.Fatal(err)
	}
	control(t, hs.URL, provider.Control{Refuse: 1, Fail: 3, FailAfter: 2})
	cfg := config(hs.URL)
	cfg.Logger = slog.New(slog.DiscardHandler)
	d := run(t, js, cfg)
	ctx := context.Background()
	var refused string
	streamtest.CheckFor(t, 30*time.Second, func() error {
		done := 0
		for _, k := range keys {
			o, err := d.Outcome(ctx, k)
			if err != nil {
				continue
			}
			if o.Done {
				done++
			} else {
				refused = k
			}
		}
		if done != len(keys)-1 || refused == "" {
			return fmt.Errorf("%d of %d intents done, refused %q", done, len(keys)-1, refused)
		}
		return nil
	})
	good := make([]string, 0, len(keys))
	for _, k := range keys {
		if k != refused {
			good = append(good, k)
		}
	}
	if err := performedOnce(p, good); err != nil {
		t.Fatal(err)
	}
	letters := streamtest.Messages(t, js, "WEIR_T_EFFECTS_DLQ")
	if len(letters) != 2 {
		t.Fatalf("%d dead letters, want the refused intent and the malformed one", len(letters))
	}
	for _, l := range letters {
		if l.Headers().Get(dispatcher.HeaderSource) == "" || l.Headers().Get(dispatcher.HeaderReason) == "" {
			t.Errorf("dead letter without its coordinate or reason: %v", l.Headers())
		}
	}
	if p.Requests() <= len(good) {
		t.Errorf("%d requests for %d intents: the failures and lost answers were not retried", p.Requests(), len(good))
	}

	// Too slow for the client: each call times out after the provider
	// performed it; once it answers in time, the replays settle them.
	more := intents(t, js, 40)[30:]
	control(t, hs.URL, provider.Control{Delay: "500ms"})
	time.Sleep(time.Second)
	control(t, hs.URL, provider.Control{})
	streamtest.CheckFor(t, 30*time.Second, func() error {
		for _, k := range more {
			if o, err := d.Outcome(ctx, k); err != nil || !o.Done {
				return fmt.Errorf("intent %s: %+v %v", k, o, err)
			}
		}
		return nil
	})
	if err := performedOnce(p, append(good, more...)); err != nil {
		t.Fatal(err)
	}
}

// TestKeysIgnoredMarksRepeatedCalls runs intents against a provider that
// ignores idempotency keys (the contract's sink.provider_keys: ignored)
// while it loses answers: a call whose answer is lost is made again and
// performed again, and exactly the intents called more than once are marked
// MaybeRepeated — the ones a user must reconcile.
func TestKeysIgnoredMarksRepeatedCalls(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	p := provider.New()
	hs := httptest.NewServer(p)
	defer hs.Close()
	keys := intents(t, js, 20)
	control(t, hs.URL, provider.Control{IgnoreKeys: true, FailAfter: 3})
	cfg := config(hs.URL)
	cfg.Concurrency, cfg.KeysIgnored = 1, true
	cfg.Logger = slog.New(slog.DiscardHandler)
	d := run(t, js, cfg)
	ctx := context.Background()
	outcomes := map[string]dispatcher.Outcome{}
	streamtest.CheckFor(t, 30*time.Second, func() error {
		for _, k := range keys {
			o, err := d.Outcome(ctx, k)
			if err != nil || !o.Done {
				return fmt.Errorf("intent %s: %+v %v", k, o, err)
			}
			outcomes[k] = o
		}
		return nil
	})
	performed := map[string]int{}
	for _, e := range p.Effects() {
		performed[e.Key]++
	}
	extra := 0
	for _, k := range keys {
		o := outcomes[k]
		extra += performed[k] - 1
		if o.MaybeRepeated != (o.Attempts > 1) || (performed[k] > 1 && !o.MaybeRepeated) {
			t.Errorf("intent %s: performed %d times in %d attempts, marked maybe_repeated %v", k, performed[k], o.Attempts, o.MaybeRepeated)
		}
	}
	if extra != 3 {
		t.Fatalf("%d repeated performances, want the 3 whose answers were lost", extra)
	}
}

// TestDispatcherChild runs a dispatcher as a child process that exits like
// kill -9 after its first call and before recording the outcome, when
// WEIR_TEST_CRASH is set.
func TestDispatcherChild(t *testing.T) {
	if os.Getenv("WEIR_TEST_CHILD") != "dispatcher" {
		t.Skip("runs only as the child process of TestDispatcherDiesAfterTheCall")
	}
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config(os.Getenv("WEIR_PROVIDER"))
	if os.Getenv("WEIR_TEST_CRASH") != "" {
		cfg.AfterCall = func(string) { os.Exit(137) }
	}
	d, err := dispatcher.New(context.Background(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := d.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestDispatcherDiesAfterTheCall kills the dispatcher — a real process —
// after the provider performed an intent and before the outcome was
// recorded, three times. The next delivery calls again with the same
// idempotency key, the provider answers with the effect it performed, and
// every intent is performed exactly once.
func TestDispatcherDiesAfterTheCall(t *testing.T) {
	if testing.Short() {
		t.Skip("kills real processes")
	}
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	p := provider.New()
	hs := httptest.NewServer(p)
	defer hs.Close()
	keys := intents(t, js, 20)
	child := func(crash bool) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDispatcherChild$")
		cmd.Env = append(os.Environ(), "WEIR_TEST_CHILD=dispatcher", "NATS_URL="+srv.ClientURL(), "WEIR_PROVIDER="+hs.URL)
		if crash {
			cmd.Env = append(cmd.Env, "WEIR_TEST_CRASH=1")
		}
		return cmd
	}
	for i := range 3 {
		err := child(true).Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 137 {
			t.Fatalf("run %d: %v, want the crash after the call", i, err)
		}
	}
	last := child(false)
	if err := last.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = last.Process.Signal(syscall.SIGTERM)
		_ = last.Wait()
	}()
	d, err := dispatcher.New(context.Background(), js, config(hs.URL))
	if err != nil {
		t.Fatal(err)
	}
	streamtest.CheckFor(t, 30*time.Second, func() error {
		for _, k := range keys {
			if o, err := d.Outcome(context.Background(), k); err != nil || !o.Done {
				return fmt.Errorf("intent %s: %+v %v", k, o, err)
			}
		}
		return performedOnce(p, keys)
	})
	if p.Requests() <= len(keys) {
		t.Fatalf("%d requests for %d intents: no call was repeated after a crash", p.Requests(), len(keys))
	}
	t.Logf("3 kills after the call: %d requests, %d effects, each intent once", p.Requests(), len(p.Effects()))
}

// TestProviderChild serves the provider simulator as a child process, when
// WEIR_TEST_CHILD=provider: on WEIR_TEST_LISTEN, with its record in the
// journal WEIR_TEST_JOURNAL, behaving as the control WEIR_TEST_CONTROL
// says from its first request. It prints the address it listens on.
func TestProviderChild(t *testing.T) {
	if os.Getenv("WEIR_TEST_CHILD") != "provider" {
		t.Skip("runs only as a child process of TestProviderKilledMidCall")
	}
	p, err := provider.Open(os.Getenv("WEIR_TEST_JOURNAL"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var c provider.Control
	if err := json.Unmarshal([]byte(os.Getenv("WEIR_TEST_CONTROL")), &c); err != nil {
		t.Fatal(err)
	}
	if err := p.Set(c); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", os.Getenv("WEIR_TEST_LISTEN"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("provider listening on %s\n", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	hs := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		hs.Close()
	}()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}
}

// startProvider runs TestProviderChild on listen and waits until it
// listens; it returns the process and the address. The process is killed
// when the test ends, if it is still running.
func startProvider(t *testing.T, listen, journal string, c provider.Control) (*exec.Cmd, string) {
	t.Helper()
	ctl, _ := json.Marshal(c)
	cmd := exec.Command(os.Args[0], "-test.run=^TestProviderChild$")
	cmd.Env = append(os.Environ(), "WEIR_TEST_CHILD=provider", "WEIR_TEST_LISTEN="+listen,
		"WEIR_TEST_JOURNAL="+journal, "WEIR_TEST_CONTROL="+string(ctl))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	var said []string
	for sc := bufio.NewScanner(out); sc.Scan(); {
		if addr, ok := strings.CutPrefix(sc.Text(), "provider listening on "); ok {
			return cmd, addr
		}
		said = append(said, sc.Text())
	}
	_ = cmd.Wait()
	t.Fatalf("the provider ended before it listened:\n%s", strings.Join(said, "\n"))
	return nil, ""
}

// effectsOf is the provider's record, as GET /effects lists it.
func effectsOf(t *testing.T, url string) []provider.Effect {
	t.Helper()
	resp, err := http.Get(url + "/effects")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var es []provider.Effect
	if err := json.NewDecoder(resp.Body).Decode(&es); err != nil {
		t.Fatal(err)
	}
	return es
}

// killProviderMidCall dispatches n intents to a provider — a real process
// with a journal — that takes 5 s to answer, kills it with SIGKILL once it
// has performed the first calls and before it answered any, and restarts
// it on the same address and journal, prompt and honouring keys or not as
// ignoreKeys says. It returns the restarted provider's record once every
// intent is recorded done, the keys the killed provider had performed
// (its journal after the kill), and each intent's outcome.
func killProviderMidCall(t *testing.T, n int, ignoreKeys bool) ([]provider.Effect, map[string]bool, map[string]dispatcher.Outcome) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	keys := intents(t, js, n)
	journal := filepath.Join(t.TempDir(), "provider.journal")
	first, addr := startProvider(t, "127.0.0.1:0", journal, provider.Control{Delay: "5s"})
	url := "http://" + addr
	cfg := config(url)
	// A call waits for the slow answer rather than timing out, and the
	// calls refused while the provider is down never run out of attempts.
	cfg.Timeout, cfg.MaxAttempts, cfg.Logger = 10*time.Second, 1000, slog.New(slog.DiscardHandler)
	d := run(t, js, cfg)
	ctx := context.Background()
	streamtest.CheckFor(t, 10*time.Second, func() error {
		if es := effectsOf(t, url); len(es) < cfg.Concurrency {
			return fmt.Errorf("%d effects performed, want the first %d calls in flight", len(es), cfg.Concurrency)
		}
		return nil
	})
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()

	// What the killed provider performed is what its journal holds: the
	// calls it had performed and not answered (it was delaying each by
	// 5 s); the other intents were still waiting for a slot.
	j, err := provider.Open(journal)
	if err != nil {
		t.Fatal(err)
	}
	performed := map[string]bool{}
	for _, e := range j.Effects() {
		performed[e.Key] = true
	}
	j.Close()
	if len(performed) != cfg.Concurrency {
		t.Fatalf("the killed provider journaled %d effects, want the %d calls in flight", len(performed), cfg.Concurrency)
	}
	for k := range performed {
		if o, err := d.Outcome(ctx, k); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("intent %s, performed by the killed provider, had an answer before the kill: %+v %v", k, o, err)
		}
	}

	startProvider(t, addr, journal, provider.Control{IgnoreKeys: ignoreKeys})
	outcomes := map[string]dispatcher.Outcome{}
	streamtest.CheckFor(t, 30*time.Second, func() error {
		for _, k := range keys {
			o, err := d.Outcome(ctx, k)
			if err != nil || !o.Done {
				return fmt.Errorf("intent %s: %+v %v", k, o, err)
			}
			outcomes[k] = o
		}
		return nil
	})
	return effectsOf(t, url), performed, outcomes
}

// TestProviderKilledMidCall kills the provider — a real process keeping a
// journal — while the dispatcher's calls are in flight: some performed and
// journaled but unanswered, the others not yet performed. Restarted on the
// same journal, it replays the keys it had performed (200, as the outcomes
// record) and performs the others, so its record holds every intent
// exactly once. The same kill against a provider that ignores keys
// performs each of the interrupted calls twice: the journal alone is not
// enough, the idempotency key is what makes the retry safe.
func TestProviderKilledMidCall(t *testing.T) {
	if testing.Short() {
		t.Skip("kills real processes")
	}
	const n = 12
	effects, performed, outcomes := killProviderMidCall(t, n, false)
	counts := map[string]int{}
	for _, e := range effects {
		counts[e.Key]++
	}
	if len(effects) != n || len(counts) != n {
		t.Fatalf("%d effects of %d keys for %d intents: %+v", len(effects), len(counts), n, effects)
	}
	for k, o := range outcomes {
		want := http.StatusCreated
		if performed[k] {
			want = http.StatusOK // replayed from the journal
		}
		if counts[k] != 1 || o.Status != want {
			t.Errorf("intent %s: performed %d times, answered %d, want once and %d", k, counts[k], o.Status, want)
		}
	}

	t.Run("keys ignored", func(t *testing.T) {
		effects, performed, outcomes := killProviderMidCall(t, n, true)
		counts := map[string]int{}
		for _, e := range effects {
			counts[e.Key]++
		}
		for k := range outcomes {
			want := 1
			if performed[k] {
				want = 2
			}
			if counts[k] != want {
				t.Errorf("intent %s performed %d times by a provider ignoring keys, want %d", k, counts[k], want)
			}
		}
		if len(effects) != n+len(performed) {
			t.Errorf("%d effects for %d intents, %d of them interrupted", len(effects), n, len(performed))
		}
	})
}
