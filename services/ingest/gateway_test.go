package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/keygroup"
	"github.com/weirflow/weir/pkg/ingress"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/ingest"
)

type fixture struct {
	t   *testing.T
	js  jetstream.JetStream
	c   *contracts.Contract
	srv *httptest.Server
	g   *ingest.Gateway
}

func newFixture(t *testing.T, cfg ingest.Config) *fixture {
	t.Helper()
	return newFixtureOver(t, cfg, 0)
}

// newFixtureOver is newFixture with the ingress over streams streams
// (ingress.streams; 0 leaves it out).
func newFixtureOver(t *testing.T, cfg ingest.Config, streams int) *fixture {
	t.Helper()
	js := natstest.Run(t).JetStream(t)
	shipped, err := contracts.Shipped("nexmark-dedup")
	if err != nil {
		t.Fatal(err)
	}
	c := *shipped
	c.Ingress.Streams = streams
	if _, err := ingress.Create(t.Context(), js, c.Ingress, 1); err != nil {
		t.Fatal(err)
	}
	cfg.Contract, cfg.Now = &c, time.Now
	cfg.Open = cfg.Tokens == nil && !cfg.Certificates
	g, err := ingest.New(js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return &fixture{t: t, js: js, c: &c, srv: srv, g: g}
}

func (f *fixture) post(body string, header ...string) (int, ingest.Response) {
	f.t.Helper()
	req, _ := http.NewRequest("POST", f.srv.URL+"/v1/events", strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var r ingest.Response
	if err := json.Unmarshal(raw, &r); err != nil {
		f.t.Fatalf("response %d %q: %v", res.StatusCode, raw, err)
	}
	return res.StatusCode, r
}

// stored is the ingress's messages, stream by stream.
func (f *fixture) stored() []jetstream.Msg {
	var out []jetstream.Msg
	for _, s := range f.c.Ingress.StreamNames() {
		out = append(out, streamtest.Messages(f.t, f.js, s)...)
	}
	return out
}

func event(i int) string {
	return fmt.Sprintf(`{"id":"e-%d","key":"k-%d","ts":%d,"type":"bid"}`, i, i%97, time.Now().Add(-time.Hour).UnixMilli()+int64(i))
}

func events(from, n int) string {
	var b strings.Builder
	for i := from; i < from+n; i++ {
		b.WriteString(event(i))
		b.WriteByte('\n')
	}
	return b.String()
}

// TestGatewayStoresEachEventOnce: every line becomes one message on the
// partition of its key, in order within a partition, and a retried
// request — or one overlapping it — stores nothing twice.
func TestGatewayStoresEachEventOnce(t *testing.T) {
	checkStoresEachEventOnce(t, newFixture(t, ingest.Config{}))
}

// TestGatewayStoresEachEventOnceOverStreams is
// TestGatewayStoresEachEventOnce with the ingress over two streams: each
// event is in the stream of its partition.
func TestGatewayStoresEachEventOnceOverStreams(t *testing.T) {
	checkStoresEachEventOnce(t, newFixtureOver(t, ingest.Config{}, 2))
}

func checkStoresEachEventOnce(t *testing.T, f *fixture) {
	status, r := f.post(events(0, 2500))
	if status != http.StatusOK || r.Accepted != 2500 || len(r.Rejected) != 0 {
		t.Fatalf("%d %+v", status, r)
	}
	if status, r = f.post(events(2000, 1000)); status != http.StatusOK || r.Accepted != 1000 {
		t.Fatalf("overlapping retry: %d %+v", status, r)
	}
	msgs := f.stored()
	if len(msgs) != 3000 {
		t.Fatalf("%d messages stored, want 3000", len(msgs))
	}
	layout := keygroup.Layout{Groups: f.c.State.KeyGroups, Partitions: f.c.Ingress.Partitions}
	last := map[string]int{}
	for _, m := range msgs {
		var e struct {
			ID, Key string
		}
		if err := json.Unmarshal(m.Data(), &e); err != nil {
			t.Fatal(err)
		}
		p := layout.Partition([]byte(e.Key))
		if want := f.c.Ingress.Subject(p); m.Subject() != want {
			t.Fatalf("%s on %s, want %s", e.ID, m.Subject(), want)
		}
		if meta, err := m.Metadata(); err != nil || meta.Stream != f.c.Ingress.StreamOf(p) {
			t.Fatalf("%s of partition %d in stream %v (%v), want %s", e.ID, p, meta, err, f.c.Ingress.StreamOf(p))
		}
		if got := m.Headers().Get(jetstream.MsgIDHeader); got != e.ID {
			t.Fatalf("%s stored with message ID %q", e.ID, got)
		}
		var n int
		fmt.Sscanf(e.ID, "e-%d", &n)
		if prev, ok := last[m.Subject()]; ok && n <= prev {
			t.Fatalf("%s: e-%d after e-%d", m.Subject(), n, prev)
		}
		last[m.Subject()] = n
	}
	if st := f.g.Stats(); st.Requests != 2 || st.Accepted != 3500 || st.Rejected != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestGatewayRejectsBadLinesAndStoresTheRest: a bad line is named — line
// number, field, reason — and the good lines around it are stored.
func TestGatewayRejectsBadLinesAndStoresTheRest(t *testing.T) {
	f := newFixture(t, ingest.Config{})
	huge := `{"id":"big","key":"k","ts":1,"pad":"` + strings.Repeat("x", f.c.Ingress.MaxMessageBytes) + `"}`
	body := strings.Join([]string{
		event(1),              // 1
		`{"id":"x","key":"k"`, // 2: not JSON
		`{"key":"k","ts":5}`,  // 3: no id
		`{"id":"late","key":"k","ts":"yesterday"}`, // 4: ts not a number
		huge,                                   // 5: too long
		"",                                     // 6: blank, skipped
		event(2) + "\r",                        // 7: CRLF
		`{"id":"a","id":"b","key":"k","ts":5}`, // 8: duplicate key
		event(3) + "\n" + event(3),             // 9, 10: the same event twice
	}, "\n")
	status, r := f.post(body)
	if status != http.StatusUnprocessableEntity || r.Accepted != 4 {
		t.Fatalf("%d %+v", status, r)
	}
	want := map[int]string{2: "payload", 3: "id", 4: "event_time", 5: "payload", 8: "id"}
	if len(r.Rejected) != len(want) {
		t.Fatalf("rejected %+v, want lines %v", r.Rejected, want)
	}
	for _, rej := range r.Rejected {
		if want[rej.Line] != rej.Field || rej.Error == "" {
			t.Errorf("line %d rejected as %s (%s), want %s", rej.Line, rej.Field, rej.Error, want[rej.Line])
		}
	}
	var ids []string
	for _, m := range f.stored() {
		ids = append(ids, m.Headers().Get(jetstream.MsgIDHeader))
	}
	if strings.Join(ids, ",") != "e-1,e-2,e-3" {
		t.Fatalf("stored %v, want e-1, e-2 and e-3 once each", ids)
	}
	if st := f.g.Stats(); st.Rejected != 5 {
		t.Errorf("stats %+v: 5 rejected lines not counted", st)
	}
}

// TestGatewayCopiesIdentityHeaders: the contract reads the producer from
// the Weir-Producer header; the request's header is every line's.
func TestGatewayCopiesIdentityHeaders(t *testing.T) {
	f := newFixture(t, ingest.Config{})
	tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	if status, r := f.post(events(0, 3), "Weir-Producer", "shop-1", "traceparent", tp); status != http.StatusOK || r.Accepted != 3 {
		t.Fatalf("%d %+v", status, r)
	}
	for _, m := range f.stored() {
		if m.Headers().Get("Weir-Producer") != "shop-1" || m.Headers().Get("traceparent") != tp {
			t.Fatalf("headers %v", m.Headers())
		}
	}
}

// TestGatewayBoundsTheBody: a body over the limit stops where the limit
// is; what came before is stored and reported.
func TestGatewayBoundsTheBody(t *testing.T) {
	f := newFixture(t, ingest.Config{MaxBody: 1000})
	body := events(0, 40)
	status, r := f.post(body)
	if status != http.StatusRequestEntityTooLarge || r.Error == "" || r.Accepted == 0 || r.Accepted >= 40 {
		t.Fatalf("%d %+v", status, r)
	}
	if n := len(f.stored()); n != r.Accepted {
		t.Fatalf("%d stored, %d reported", n, r.Accepted)
	}
}

// TestGatewayRefusesHeaderIDs: an event ID from a header would be one ID
// for a whole request.
func TestGatewayRefusesHeaderIDs(t *testing.T) {
	c, _ := contracts.Shipped("nexmark-dedup")
	c.Identity.ID = contracts.Field{From: "header", Header: "Event-Id"}
	_, err := ingest.New(nil, ingest.Config{Contract: c})
	if err == nil || !strings.Contains(err.Error(), "identity.id comes from header Event-Id") {
		t.Fatalf("err = %v", err)
	}
}

// TestRun: the command refuses to start without its ingress, creates it
// when asked, serves, and stops cleanly.
func TestRun(t *testing.T) {
	srv := natstest.Run(t)
	contract := "../../contracts/nexmark-dedup.yaml"
	c, _ := contracts.Shipped("nexmark-dedup")
	env := func(k string) string {
		return map[string]string{"NATS_URL": srv.ClientURL(), "WEIR_CONTRACT": contract, "WEIR_INGEST_ADDR": "127.0.0.1:0", "WEIR_GATEWAY_OPEN": "true"}[k]
	}
	var out bytes.Buffer
	if err := ingest.Run(t.Context(), nil, env, &out, nil); err == nil || !strings.Contains(err.Error(), "-create-ingress") {
		t.Fatalf("started without an ingress: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- ingest.Run(ctx, []string{"-create-ingress"}, env, io.Discard, func(a string) { addr <- a })
	}()
	var url string
	select {
	case a := <-addr:
		url = "http://" + a + "/v1/events"
	case err := <-done:
		t.Fatal(err)
	}
	res, err := http.Post(url, "application/x-ndjson", strings.NewReader(events(0, 10)))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := len(streamtest.Messages(t, srv.JetStream(t), c.Ingress.Stream)); n != 10 {
		t.Fatalf("%d stored, want 10", n)
	}
}

// BenchmarkGateway posts requests of 1,000 events into a SyncAlways
// ingress: go test ./services/ingest -bench Gateway -benchtime 50000x
func BenchmarkGateway(b *testing.B) {
	js := natstest.Run(b).JetStream(b)
	c, _ := contracts.Shipped("nexmark-dedup")
	if _, err := ingress.Create(context.Background(), js, c.Ingress, 1); err != nil {
		b.Fatal(err)
	}
	g, err := ingest.New(js, ingest.Config{Contract: c, Now: time.Now, Open: true})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(g)
	defer srv.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i += 1000 {
		res, err := http.Post(srv.URL+"/v1/events", "application/x-ndjson", strings.NewReader(events(i, min(1000, b.N-i))))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			b.Fatalf("status %d", res.StatusCode)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// TestRunRefusesUnsafeServerSettings: a timeout that lets a client hold a
// connection for ever, or TLS half given, stops the command before it
// listens.
func TestRunRefusesUnsafeServerSettings(t *testing.T) {
	for _, env := range []map[string]string{
		{"WEIR_INGEST_READ_TIMEOUT": "0s"},
		{"WEIR_INGEST_IDLE_TIMEOUT": "-1s"},
		{"WEIR_INGEST_READ_TIMEOUT": "2m", "WEIR_INGEST_WRITE_TIMEOUT": "1m"},
		{"WEIR_INGEST_TLS_CERT": "server.pem"},
		{"WEIR_INGEST_TLS_CLIENT_CA": "ca.pem"},
	} {
		env["WEIR_CONTRACT"], env["WEIR_GATEWAY_OPEN"] = "../../contracts/nexmark-dedup.yaml", "true"
		err := ingest.Run(t.Context(), nil, func(k string) string { return env[k] }, io.Discard, func(string) { t.Errorf("%v: serving", env) })
		if !errors.Is(err, ingest.ErrServerConfig) {
			t.Errorf("%v: err = %v, want ErrServerConfig", env, err)
		}
	}
}

// TestGatewayStoresAnEventIDOnceOverStreams: an event posted again is
// stored once, over one stream or several. Over one stream that holds even
// when the retry names another key (its partition's subject differs, the
// stream's message IDs do not); over several, message IDs are each
// stream's, so a retry must keep its key (contracts/README.md,
// ingress.streams).
func TestGatewayStoresAnEventIDOnceOverStreams(t *testing.T) {
	for _, streams := range []int{1, 2} {
		t.Run(fmt.Sprintf("streams=%d", streams), func(t *testing.T) {
			f := newFixtureOver(t, ingest.Config{}, streams)
			layout := keygroup.Layout{Groups: f.c.State.KeyGroups, Partitions: f.c.Ingress.Partitions}
			// Two keys whose partitions are in different streams.
			var keys []string
			for i := 0; len(keys) < 2 && i < 1000; i++ {
				k := fmt.Sprintf("k-%d", i)
				p := layout.Partition([]byte(k))
				if len(keys) == 0 || p%2 != layout.Partition([]byte(keys[0]))%2 {
					keys = append(keys, k)
				}
			}
			posts := []string{keys[0], keys[0]}
			if streams == 1 {
				posts = append(posts, keys[1])
			}
			ts := time.Now().Add(-time.Hour).UnixMilli()
			for _, k := range posts {
				status, r := f.post(fmt.Sprintf(`{"id":"e-1","key":%q,"ts":%d,"type":"bid"}`, k, ts) + "\n")
				if status != http.StatusOK || r.Accepted != 1 {
					t.Fatalf("%d %+v", status, r)
				}
			}
			var where []string
			for _, m := range f.stored() {
				where = append(where, m.Subject())
			}
			if len(where) != 1 {
				t.Errorf("event e-1, posted with keys %v, is stored %d times: %v", posts, len(where), where)
			}
		})
	}
}
