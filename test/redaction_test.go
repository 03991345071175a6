package test

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/internal/redact"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/pkg/telemetry"
	"github.com/weirflow/weir/services/dedup"
)

// TestSensitiveFieldsNeverLeave runs the dedup pipeline over a corpus whose
// events carry a card number and an email, which the contract declares
// sensitive (card omitted, email hashed), and keys it hashes. Every event
// is traced. Among them are events from the future and malformed ones
// (dead letters, with and without a JSON payload), and events the first
// operator refuses with an error that quotes their card and key. A scrape
// of every log line, every span the runtime exported (the OTLP bytes as
// sent), the metrics endpoint and every dead letter finds no card number,
// email or key of the corpus; each dead letter still names its source
// coordinate.
func TestSensitiveFieldsNeverLeave(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	base, err := os.ReadFile(filepath.Join("..", "contracts", "nexmark-dedup.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := contracts.Parse("nexmark-dedup-sensitive.yaml", append(base, []byte(`
security:
  sensitive:
    - {field: card, redact: omit}
    - {field: email, redact: hash}
  keys: hash
`)...))
	if err != nil {
		t.Fatal(err)
	}
	if ps := c.Lint(); len(ps) > 0 {
		t.Fatal(ps)
	}

	// What leaves: logs, spans (as the exporter posts them), metrics.
	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var spans syncBuffer
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, _ := io.ReadAll(body)
		spans.Write(b)
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	tel, err := telemetry.Start(context.Background(), telemetry.Config{ServiceName: "dedup", TracesEndpoint: collector.URL + "/v1/traces", TraceSampleRatio: 1})
	if err != nil {
		t.Fatal(err)
	}

	// The corpus: 400 events; every 50th from the future, every 40th
	// malformed, every 30th refused by the operator.
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: c.Ingress.Stream, Subjects: []string{c.Ingress.SubjectPrefix + ".*"},
		MaxAge: c.Ingress.Retention.D(), Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	var secrets []string
	now := time.Now().Add(-time.Hour).UnixMilli()
	const events = 400
	for i := 0; i < events; i++ {
		card, email, key := fmt.Sprintf("4111-2222-3333-%04d", i), fmt.Sprintf("person%d@example.com", i), fmt.Sprintf("customer-%03d", i%37)
		secrets = append(secrets, card, email, key)
		ts := now + int64(i)
		if i%50 == 49 {
			ts = time.Now().Add(48 * time.Hour).UnixMilli()
		}
		payload := fmt.Sprintf(`{"id":"e-%d","key":%q,"ts":%d,"type":"bid","card":%q,"email":%q}`, i, key, ts, card, email)
		if i%40 == 39 {
			payload = payload[:len(payload)-2] // cut short: not JSON
		}
		m := nats.NewMsg(c.Ingress.Subject(i % c.Ingress.Partitions))
		m.Data = []byte(payload)
		tid := make([]byte, 16)
		copy(tid, fmt.Sprintf("trace-%010d", i))
		m.Header.Set(telemetry.HeaderTraceparent, "00-"+hex.EncodeToString(tid)+"-"+hex.EncodeToString(tid[:8])+"-01")
		if _, err := js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}

	// The first operator refuses every 30th event, saying why in words
	// that quote its card and key; the rest go on to dedup's own.
	refuse := func(c *contracts.Contract) (operator.Operator, error) {
		next, err := dedup.Factories()["dedup"](c)
		if err != nil {
			return nil, err
		}
		return operator.Func(func(env operator.Env, r record.Record) error {
			var n int
			if _, err := fmt.Sscanf(r.ID, "e-%d", &n); err == nil && n%30 == 29 {
				return operator.Poison("card", fmt.Errorf("card 4111-2222-3333-%04d of %s was declined", n, r.Key))
			}
			return next.Process(env, r)
		}), nil
	}
	factories := map[string]stream.Factory{"dedup": refuse, "publish": dedup.Factories()["publish"]}
	p := streamtest.Run(t, srv.ClientURL(), c, t.TempDir(), factories, func(cfg *stream.Config) {
		cfg.Logger, cfg.Telemetry, cfg.RedactionKey = logger, tel, redactionKey
	})

	// Wait for every event to be handled: passed on, or filed.
	var refused, future, malformed int
	for i := 0; i < events; i++ {
		switch {
		case i%40 == 39:
			malformed++
		case i%50 == 49:
			future++
		case i%30 == 29:
			refused++
		}
	}
	letters := refused + future + malformed
	ctx := context.Background()
	streamtest.CheckFor(t, 60*time.Second, func() error {
		n, err := countStream(ctx, js, deadletter.StreamName(c.Pipeline))
		if err != nil || n != uint64(letters) {
			return fmt.Errorf("%d dead letters, want %d (%v)", n, letters, err)
		}
		got, total, err := sinkCounts(ctx, js, c)
		if err != nil {
			return err
		}
		if want := events - letters; total != want || len(got) != want {
			return fmt.Errorf("sink holds %d events, want %d", total, want)
		}
		return nil
	})
	p.Stop()
	if err := tel.Shutdown(ctx); err != nil { // flushes the spans
		t.Fatal(err)
	}

	// The scrape.
	var dlq strings.Builder
	withheld := 0
	for _, m := range streamtest.Messages(t, js, deadletter.StreamName(c.Pipeline)) {
		l, err := deadletter.Parse(m)
		if err != nil {
			t.Fatal(err)
		}
		if l.At.Stream != c.Ingress.Stream || l.At.Seq == 0 {
			t.Errorf("a dead letter without its source coordinate: %+v", l.At)
		}
		if string(l.Payload) == redact.Withheld {
			withheld++
		}
		fmt.Fprintf(&dlq, "%v %s\n", m.Headers(), m.Data())
	}
	if withheld != malformed {
		t.Errorf("%d dead letters withheld their payload, want the %d malformed ones", withheld, malformed)
	}
	metrics := httptest.NewRecorder()
	tel.Handler().ServeHTTP(metrics, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	scraped := map[string]string{"logs": logs.String(), "spans": spans.String(), "metrics": metrics.Body.String(), "dead letters": dlq.String()}
	if !strings.Contains(scraped["spans"], "process dedup") || !strings.Contains(scraped["logs"], "dead letter") || !strings.Contains(scraped["dead letters"], redact.HashPrefix) {
		t.Fatalf("the scrape saw no span, no dead-letter log line or no hashed email: it cannot tell redacted from absent")
	}
	for where, text := range scraped {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				i := strings.Index(text, s)
				t.Errorf("%s carry %q: …%s…", where, s, text[max(0, i-80):min(len(text), i+len(s)+40)])
				break
			}
		}
	}
	t.Logf("%d dead letters (%d refused, %d from the future, %d malformed and withheld), %d bytes of logs, %d of spans, %d of metrics: no card, email or key",
		letters, refused, future, malformed, len(scraped["logs"]), len(scraped["spans"]), len(scraped["metrics"]))
}

// redactionKey is the deployment's redaction key in these tests, as
// `weir auth` writes one.
var redactionKey = []byte("the tests' redaction key, 32 B.")

// TestSensitiveFieldsInArraysAndAnyCase runs the dedup pipeline, its
// contract declaring card.number omitted and email hashed, over events
// from the future — every one a dead letter carrying its payload — whose
// sensitive fields are spelt as a producer may spell them and as an
// operator decoding with encoding/json would still read them: Card,
// NUMBER, EMAIL, and card as an array of cards. No card number or e-mail
// leaves in a dead letter, and no e-mail's bare SHA-256 either (a
// dictionary of e-mails would find it): the e-mails are hashed under the
// redaction key, alike for an e-mail seen twice. The same contract
// without a redaction key does not start.
func TestSensitiveFieldsInArraysAndAnyCase(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	ctx := context.Background()
	base, err := os.ReadFile(filepath.Join("..", "contracts", "nexmark-dedup.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := contracts.Parse("nexmark-dedup-sensitive.yaml", append(base, []byte(`
security:
  sensitive:
    - {field: card.number, redact: omit}
    - {field: email, redact: hash}
`)...))
	if err != nil {
		t.Fatal(err)
	}
	if ps := c.Lint(); len(ps) > 0 {
		t.Fatal(ps)
	}
	op, err := dedup.Factories()["dedup"](c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.New(stream.Config{NATSURL: srv.ClientURL(), Contract: c, DataDir: t.TempDir(), Operator: "dedup", Instance: "0"}, op); !errors.Is(err, redact.ErrNoKey) {
		t.Errorf("a contract hashing e-mails started without a redaction key: %v", err)
	}

	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: c.Ingress.Stream, Subjects: []string{c.Ingress.SubjectPrefix + ".*"},
		MaxAge: c.Ingress.Retention.D(), Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(48 * time.Hour).UnixMilli()
	shapes := []string{
		`"Card":{"Number":%q},"EMAIL":%q`,
		`"card":[{"number":%q,"brand":"visa"}],"Email":%q`,
		`"CARD":[[{"NUMBER":%q}]],"email":%q`,
	}
	var secrets []string
	const events = 30
	for i := range events {
		card, email := fmt.Sprintf("4111-2222-3333-%04d", i), fmt.Sprintf("person%d@example.com", i%10)
		secrets = append(secrets, card, email)
		bare := sha256.Sum256([]byte(email))
		secrets = append(secrets, hex.EncodeToString(bare[:8]))
		payload := fmt.Sprintf(`{"id":"e-%d","key":"k%d","ts":%d,"type":"bid",`+shapes[i%len(shapes)]+`}`, i, i, future, card, email)
		if _, err := js.Publish(ctx, c.Ingress.Subject(i%c.Ingress.Partitions), []byte(payload)); err != nil {
			t.Fatal(err)
		}
	}
	p := streamtest.Run(t, srv.ClientURL(), c, t.TempDir(), dedup.Factories(), func(cfg *stream.Config) { cfg.RedactionKey = redactionKey })
	streamtest.CheckFor(t, 60*time.Second, func() error {
		n, err := countStream(ctx, js, deadletter.StreamName(c.Pipeline))
		if err != nil || n != events {
			return fmt.Errorf("%d dead letters, want %d (%v)", n, events, err)
		}
		return nil
	})
	p.Stop()
	hashes := map[string]map[string]bool{} // e-mail → the hashes it went out as
	for _, m := range streamtest.Messages(t, js, deadletter.StreamName(c.Pipeline)) {
		l, err := deadletter.Parse(m)
		if err != nil {
			t.Fatal(err)
		}
		text := fmt.Sprintf("%v %s", m.Headers(), m.Data())
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("a dead letter carries %q: %s", s, l.Payload)
			}
		}
		var doc map[string]any
		if err := json.Unmarshal(l.Payload, &doc); err != nil {
			t.Fatalf("a dead letter's payload: %v: %s", err, l.Payload)
		}
		var n int
		if _, err := fmt.Sscanf(fmt.Sprint(doc["id"]), "e-%d", &n); err != nil {
			t.Fatalf("a dead letter of no event of the corpus (%q, %v): %s", l.ID, err, l.Payload)
		}
		for k, v := range doc {
			if strings.EqualFold(k, "email") {
				h, _ := v.(string)
				if !strings.HasPrefix(h, redact.HashPrefix) {
					t.Errorf("the e-mail of %v went out as %q", doc["id"], h)
				}
				email := fmt.Sprintf("person%d@example.com", n%10)
				if hashes[email] == nil {
					hashes[email] = map[string]bool{}
				}
				hashes[email][h] = true
			}
		}
	}
	for email, hs := range hashes {
		if len(hs) != 1 {
			t.Errorf("%s went out as %d different hashes", email, len(hs))
		}
	}
	if len(hashes) != 10 {
		t.Errorf("%d e-mails went out hashed, want 10", len(hashes))
	}
}
