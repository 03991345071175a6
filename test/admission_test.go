package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/admission"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/pkg/ingress"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/dedup"
	"github.com/weirflow/weir/services/ingest"
)

// TestAdmissionRefusesProducersBeyondTheLag runs the dedup pipeline with
// overload.policy admission (max_lag 300) behind the ingest gateway. While
// the pipeline keeps up, the gateway stores what producers send; with the
// pipeline stopped, the backlog passes the bound and the gateway refuses
// at once — 429, Retry-After, the lag and the bound named, nothing stored;
// once the pipeline runs again and works the backlog off, producers are
// admitted again, and every event admitted comes out of dedup once.
func TestAdmissionRefusesProducersBeyondTheLag(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a pipeline")
	}
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c := loadContract(t)
	c.Overload.Policy, c.Overload.MaxLag = contracts.PolicyAdmission, 300
	if ps := c.Lint(); len(ps) > 0 {
		t.Fatal(ps)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := ingress.Create(ctx, js, c.Ingress, 1); err != nil {
		t.Fatal(err)
	}
	g, err := ingest.New(js, ingest.Config{Contract: c, Now: time.Now, Open: true})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.RunAdmission(ctx) }()
	hs := httptest.NewServer(g)
	defer hs.Close()

	next := 0
	post := func(n int) (int, ingest.Response, http.Header) {
		t.Helper()
		resp, err := http.Post(hs.URL+"/v1/events", "application/x-ndjson", strings.NewReader(admissionBids(next, n)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var r ingest.Response
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("%d %s: %v", resp.StatusCode, raw, err)
		}
		if resp.StatusCode == http.StatusOK {
			next += n
		}
		return resp.StatusCode, r, resp.Header
	}
	want := map[string]bool{}
	admitted := func() {
		for i := range next {
			want[fmt.Sprintf("adm-%d", i)] = true
		}
	}

	dir := t.TempDir()
	p := streamtest.Run(t, srv.ClientURL(), c, dir, dedup.Factories())
	if code, r, _ := post(100); code != http.StatusOK {
		t.Fatalf("a pipeline keeping up: %d %+v", code, r)
	}
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if s := p.ByID["dedup"].Stats(); s.In < 100 {
			return fmt.Errorf("dedup has read %d of 100", s.In)
		}
		return nil
	})
	p.Stop()

	// Nobody reads: the backlog grows past max_lag, and the gate, which
	// measures every half second, closes.
	if code, r, _ := post(400); code != http.StatusOK {
		t.Fatalf("the first request over the bound is stored before the gate measures it: %d %+v", code, r)
	}
	stored := len(streamtest.Messages(t, js, c.Ingress.Stream))
	var refusal ingest.Response
	var hdr http.Header
	streamtest.CheckFor(t, 10*time.Second, func() error {
		code, r, h := post(1)
		if code != http.StatusTooManyRequests {
			return fmt.Errorf("admitted with the pipeline 400 behind: %d %+v", code, r)
		}
		refusal, hdr = r, h
		return nil
	})
	stored = len(streamtest.Messages(t, js, c.Ingress.Stream)) - stored // admitted while the gate had not measured
	if refusal.Accepted != 0 || !strings.Contains(refusal.Error, "max_lag 300") || !strings.Contains(refusal.Error, "records behind") || hdr.Get("Retry-After") == "" {
		t.Fatalf("refusal %+v, Retry-After %q: want nothing accepted, the lag and the bound named, and when to retry", refusal, hdr.Get("Retry-After"))
	}
	before := len(streamtest.Messages(t, js, c.Ingress.Stream))
	if code, _, _ := post(50); code != http.StatusTooManyRequests || len(streamtest.Messages(t, js, c.Ingress.Stream)) != before {
		t.Fatalf("a refused request stored events (%d)", code)
	}

	// The pipeline works the backlog off, and the gate opens again.
	streamtest.Run(t, srv.ClientURL(), c, dir, dedup.Factories())
	streamtest.CheckFor(t, 60*time.Second, func() error {
		if code, r, _ := post(10); code != http.StatusOK {
			return fmt.Errorf("still refused: %d %s", code, r.Error)
		}
		return nil
	})
	admitted()
	streamtest.CheckFor(t, 60*time.Second, func() error { return sinkExactlyOnce(t, js, c, want) })

	// A consumer an earlier instance left behind, far behind on its
	// partition, does not close the gate: each partition counts its
	// current reader.
	st, err := js.Stream(ctx, c.Ingress.Stream)
	if err != nil {
		t.Fatal(err)
	}
	stale := edge.ConsumerName(c.Pipeline+"_dedup_gone", "ingress/0")
	if _, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: stale, FilterSubject: c.Ingress.Subject(0), AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	lag, err := admission.Lag(ctx, js, c.Ingress.StreamNames(), []string{edge.ConsumerName(c.Pipeline, "dedup") + "_"})
	if err != nil || lag > 50 {
		t.Fatalf("lag %d (%v) with a stale consumer %s behind on partition 0: it counted", lag, err, stale)
	}
	t.Logf("refused %d requests (%q); %d admitted while the gate had not yet measured; all %d admitted events out of dedup once",
		g.Stats().Refused, refusal.Error, stored, len(want))
}

// TestAdmissionReadsThePipelinesAccount: where each pipeline has an
// account of its own, the ingest gateway, a producer in the ingress's
// account, reads the lag of the pipeline's readers through what the
// pipeline's account exports to it (weir auth writes WEIR_LAG_API in the
// producer's .env): with the dedup pipeline stopped behind a backlog past
// max_lag, the gateway, on its own credentials, refuses; the server
// denied nothing.
func TestAdmissionReadsThePipelinesAccount(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a pipeline")
	}
	c := loadContract(t)
	c.Overload.Policy, c.Overload.MaxLag = contracts.PolicyAdmission, 300
	if ps := c.Lint(); len(ps) > 0 {
		t.Fatal(ps)
	}
	r := startAccessRun(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g, err := ingest.New(r.js(t, access.RoleProducer), ingest.Config{Contract: c, Now: time.Now, Open: true, LagAPI: jsapi.Prefix(c.Pipeline)})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.RunAdmission(ctx) }()
	hs := httptest.NewServer(g)
	defer hs.Close()
	next := 0
	post := func(n int) int {
		t.Helper()
		resp, err := http.Post(hs.URL+"/v1/events", "application/x-ndjson", strings.NewReader(admissionBids(next, n)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			next += n
		}
		return resp.StatusCode
	}
	stop := r.runPipeline(t, dedup.Factories(), t.TempDir())
	if code := post(100); code != http.StatusOK {
		t.Fatalf("a pipeline keeping up: %d", code)
	}
	admin := r.js(t, access.RoleAdmin)
	streamtest.CheckFor(t, 30*time.Second, func() error {
		st, err := admin.Stream(ctx, edge.StreamName(c.Pipeline, "deduped"))
		if err != nil {
			return err
		}
		if n := st.CachedInfo().State.Msgs; n < 100 {
			return fmt.Errorf("the deduped edge holds %d of 100", n)
		}
		return nil
	})
	stop()
	if code := post(400); code != http.StatusOK {
		t.Fatalf("the first request over the bound is stored before the gate measures it: %d", code)
	}
	streamtest.CheckFor(t, 10*time.Second, func() error {
		if code := post(1); code != http.StatusTooManyRequests {
			return fmt.Errorf("admitted with the pipeline 400 behind: %d", code)
		}
		return nil
	})
	r.checkNothingDenied(t)
}

// admissionBids is n bids, adm-<from> on, a minute old, as the gateway
// takes them (NDJSON).
func admissionBids(from, n int) string {
	var b strings.Builder
	for i := from; i < from+n; i++ {
		ts := time.Now().Add(-time.Minute).UnixMilli()
		fmt.Fprintf(&b, `{"id":"adm-%d","kind":"bid","key":"%d","ts":%d,"bid":{"auction":%d,"bidder":1,"price":5,"date_time":%d}}`+"\n", i, 1000+i%50, ts, 1000+i%50, ts)
	}
	return b.String()
}
