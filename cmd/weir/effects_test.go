package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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

// TestEffectsListAndRetry: the provider refuses an intent, which the
// dispatcher files as a dead letter; `weir effects list` shows the done
// outcomes and the dead letter with its reason, and `weir effects retry`
// hands it back, after which it is performed once.
func TestEffectsListAndRetry(t *testing.T) {
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
