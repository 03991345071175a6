package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/dispatcher"
	"github.com/weirflow/weir/outbox"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/provider"
)

// outboxContract writes the dedup pipeline's contract with sink.effect
// outbox to a file, and returns it with its dispatcher's configuration.
func outboxContract(t *testing.T) (string, *contracts.Contract, dispatcher.Config) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "contracts", "nexmark-dedup.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "outbox.yaml")
	yaml := strings.Replace(string(src), "  effect: at-least-once\n", "  effect: outbox\n  max_pending_epochs: 2\n", 1)
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := contracts.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := dispatcher.ForContract(c, "")
	if err != nil {
		t.Fatal(err)
	}
	return file, c, cfg
}

// TestEffectsListAndRetry: the provider refuses an intent, which the
// dispatcher files as a dead letter; `weir effects list` shows the done
// outcomes and the dead letter with its reason, and `weir effects retry`
// hands it back, after which it is performed once.
func TestEffectsListAndRetry(t *testing.T) {
	file, c, cfg := outboxContract(t)
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	ctx := context.Background()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: cfg.Stream, Subjects: []string{cfg.Subjects}}); err != nil {
		t.Fatal(err)
	}
	p := provider.New()
	hs := httptest.NewServer(p)
	defer hs.Close()
	resp, err := http.Post(hs.URL+"/control", "application/json", strings.NewReader(`{"refuse":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var keys []string
	for i := range 3 {
		at := record.Coordinate{Stream: "NEXMARK", Subject: "nexmark.events.0", Seq: uint64(i + 1)}
		in := outbox.Intent{Key: outbox.Key(c.Pipeline, "publish", at, 0), Kind: "charges", Payload: json.RawMessage(`{"n":1}`), Source: at.String()}
		r, err := in.Record(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, cfg.RetrySubject, r.Value); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, in.Key)
	}
	cfg.Provider, cfg.Backoff = hs.URL, 10*time.Millisecond
	d, err := dispatcher.New(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(dctx) }()
	defer func() {
		cancel()
		<-done
	}()
	outcomes := func() (ok, failed int) {
		for _, k := range keys {
			if o, err := d.Outcome(ctx, k); err == nil && o.Done {
				ok++
			} else if err == nil {
				failed++
			}
		}
		return ok, failed
	}
	streamtest.CheckFor(t, 20*time.Second, func() error {
		if ok, failed := outcomes(); ok != 2 || failed != 1 {
			return fmt.Errorf("%d done, %d failed", ok, failed)
		}
		return nil
	})
	url := srv.ClientURL()
	out, err := weir(t, "effects", "list", "-nats", url, "-contract", file)
	if err != nil || strings.Count(out, `"done":true`) != 2 || !strings.Contains(out, `"dead_letter"`) || !strings.Contains(out, "refused") {
		t.Fatalf("effects list: %v\n%s", err, out)
	}
	var refused string
	for _, k := range keys {
		if o, err := d.Outcome(ctx, k); err == nil && !o.Done {
			refused = k
		}
	}
	if out, err := weir(t, "effects", "retry", "-nats", url, "-contract", file, keys[0]+"x"); err == nil {
		t.Fatalf("retry of an intent that is no dead letter: %s", out)
	}
	if out, err := weir(t, "effects", "retry", "-nats", url, "-contract", file, refused); err != nil || !strings.Contains(out, "handed back") {
		t.Fatalf("effects retry: %v\n%s", err, out)
	}
	streamtest.CheckFor(t, 20*time.Second, func() error {
		if ok, _ := outcomes(); ok != 3 || len(p.Effects()) != 3 {
			return fmt.Errorf("%d done, %d performed", ok, len(p.Effects()))
		}
		return nil
	})
}

// TestEffectsReconcile runs the dispatcher against a provider that ignores
// idempotency keys. Told to lose an answer, it performs the retry of that
// intent again — twice, in two rounds; told to refuse one, that intent is
// dead-lettered and never performed; one intent is committed after the
// dispatcher stopped, the outbox ending with a commit marker; and someone
// else asked the provider for an effect with a key of no intent. `weir effects reconcile` names exactly those,
// from the provider's URL and from a file, fails for them, and passes a
// record that holds each intent once.
func TestEffectsReconcile(t *testing.T) {
	file, c, cfg := outboxContract(t)
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	ctx := context.Background()
	// The outbox holds commit markers too, deeper than the intents.
	markers := strings.TrimSuffix(cfg.Subjects, "*") + "commit"
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: cfg.Stream, Subjects: []string{cfg.Subjects, markers + ".>"}}); err != nil {
		t.Fatal(err)
	}
	p := provider.New()
	hs := httptest.NewServer(p)
	defer hs.Close()
	var keys []string
	publish := func(n int) {
		for range n {
			at := record.Coordinate{Stream: "NEXMARK", Subject: "nexmark.events.0", Seq: uint64(len(keys) + 1)}
			in := outbox.Intent{Key: outbox.Key(c.Pipeline, "publish", at, 0), Kind: "charges",
				Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, len(keys))), Source: at.String()}
			r, err := in.Record(time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := js.Publish(ctx, cfg.RetrySubject, r.Value); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, in.Key)
		}
	}

	// One at a time, so the provider's misbehaviour hits known intents: the
	// first is refused, the second performed with its answer lost and
	// performed again when the dispatcher retries.
	if err := p.Set(provider.Control{Refuse: 1, FailAfter: 1, IgnoreKeys: true}); err != nil {
		t.Fatal(err)
	}
	publish(6)
	cfg.Provider, cfg.Backoff, cfg.Concurrency = hs.URL, 10*time.Millisecond, 1
	d, err := dispatcher.New(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(dctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	defer stop()
	settled := func(from int) error {
		for _, k := range keys[from:] {
			if _, err := d.Outcome(ctx, k); err != nil {
				return fmt.Errorf("intent %s: %w", k, err)
			}
		}
		return nil
	}
	streamtest.CheckFor(t, 20*time.Second, func() error { return settled(0) })
	if err := p.Set(provider.Control{FailAfter: 1, IgnoreKeys: true}); err != nil {
		t.Fatal(err)
	}
	publish(2)
	streamtest.CheckFor(t, 20*time.Second, func() error { return settled(6) })
	stop()
	publish(1)
	if _, err := js.Publish(ctx, markers+".publish.0", []byte("{}")); err != nil { // the last message is a marker
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/refunds", strings.NewReader(`{"n":-1}`))
	req.Header.Set("Idempotency-Key", "manual-refund-7")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	twice, never := []string{keys[1], keys[6]}, []string{keys[0], keys[8]}
	counts := map[string]int{}
	for _, e := range p.Effects() {
		counts[e.Key]++
	}
	if counts[keys[1]] != 2 || counts[keys[6]] != 2 || counts[keys[0]] != 0 || len(p.Effects()) != 10 {
		t.Fatalf("the provider did not misbehave as the test needs: %v", counts)
	}

	url := srv.ClientURL()
	out, err := weir(t, "effects", "reconcile", "-nats", url, "-contract", file, "-provider-records", hs.URL+"/effects")
	if err == nil || !strings.Contains(err.Error(), "4 discrepancies") {
		t.Fatalf("reconcile with discrepancies: %v, want an error counting 4\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if lines[0] != "9 intents: 5 once, 2 twice, 2 never, 1 unknown (10 provider records)" || len(lines) != 6 {
		t.Fatalf("reconcile:\n%s", out)
	}
	for _, want := range []string{
		"twice    " + keys[1] + " performed 2 times", "twice    " + keys[6] + " performed 2 times",
		"never    " + keys[0] + " never performed", "dispatcher: failed: 422 effect refused",
		"never    " + keys[8] + " never performed", "dispatcher: pending",
		`unknown  "manual-refund-7" performed once`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("reconcile does not say %q:\n%s", want, out)
		}
	}

	// The same records from a file, as JSON.
	resp, err := http.Get(hs.URL + "/effects")
	if err != nil {
		t.Fatal(err)
	}
	records := filepath.Join(t.TempDir(), "records.json")
	f, err := os.Create(records)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	f.Close()
	out, err = weir(t, "effects", "reconcile", "-nats", url, "-contract", file, "-provider-records", records, "-json")
	if err == nil {
		t.Fatalf("reconcile -json with discrepancies ended well:\n%s", out)
	}
	var rep reconcileReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("reconcile -json: %v\n%s", err, out)
	}
	keysOf := func(rs []reconciled) []string {
		var ks []string
		for _, r := range rs {
			ks = append(ks, r.Key)
		}
		return ks
	}
	if rep.Intents != 9 || rep.Once != 5 || rep.Records != 10 || !slices.Equal(keysOf(rep.Twice), twice) || !slices.Equal(keysOf(rep.Never), never) ||
		len(rep.Unknown) != 1 || rep.Unknown[0] != (unknownKey{Key: "manual-refund-7", Performed: 1}) {
		t.Fatalf("reconcile -json: %+v", rep)
	}
	if rep.Twice[0].Performed != 2 || rep.Twice[0].Outcome != "done" || rep.Never[0].Outcome != "failed" || rep.Never[1].Outcome != "pending" {
		t.Fatalf("reconcile -json: %+v", rep)
	}

	// A record of each intent once reconciles.
	var once []map[string]string
	for _, k := range keys {
		once = append(once, map[string]string{"key": k})
	}
	b, _ := json.Marshal(once)
	if err := os.WriteFile(records, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = weir(t, "effects", "reconcile", "-nats", url, "-contract", file, "-provider-records", records)
	if err != nil || strings.TrimSpace(out) != "9 intents: 9 once, 0 twice, 0 never, 0 unknown (9 provider records)" {
		t.Fatalf("reconcile of each intent once: %v\n%s", err, out)
	}
	if err := os.WriteFile(records, []byte(`[{"seq":1}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := weir(t, "effects", "reconcile", "-nats", url, "-contract", file, "-provider-records", records); err == nil || !strings.Contains(err.Error(), `record 0 has no "key"`) {
		t.Fatalf("reconcile of records without keys: %v\n%s", err, out)
	}
}
