package dispatcher_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
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
	b, _ := json.Marshal(c)
	resp, err := http.Post(url+"/control", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("control: %s", resp.Status)
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
		if l.Headers().Get("Weir-Source") == "" || l.Headers().Get("Weir-Reason") == "" {
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
