package test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/provision"
	q5 "github.com/weirflow/weir/services/nexmark-q5"
)

// isolationRun is a deployment of several pipelines at once (weir auth
// -contract nexmark-q5,nexmark-dedup), its users by name.
type isolationRun = deployment

// startIsolationRun deploys the shipped contracts named and provisions
// every pipeline as its administrator.
func startIsolationRun(t *testing.T, names ...string) *isolationRun {
	t.Helper()
	r := startUnprovisioned(t, names...)
	r.provision(t)
	return r
}

// startUnprovisioned is startIsolationRun before weir provision.
func startUnprovisioned(t *testing.T, names ...string) *isolationRun {
	t.Helper()
	var cs []*contracts.Contract
	for _, name := range names {
		c, err := contracts.Shipped(name)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	return startDeployment(t, false, cs...)
}

// provisionAs runs weir provision, with o, for cs with the credentials of
// auth — their administrator's.
func provisionAs(t *testing.T, url string, auth natsconn.Auth, o provision.Options, cs ...*contracts.Contract) {
	t.Helper()
	nc, err := auth.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := provision.PlanFor(cs, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := provision.Run(ctx, js, plan, func(jsapi.Outcome) {}); err != nil {
		t.Fatalf("weir provision of %s: %v", cs[0].Pipeline, err)
	}
}

// js connects as user.
func (r *isolationRun) js(t *testing.T, user string) jetstream.JetStream {
	t.Helper()
	nc, err := r.users[user].Connect(r.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// The users of the attacks: q5's service, whose credentials a
// compromised q5 process holds, and the dedup pipeline ("nexmark") it
// attacks.
var (
	q5Service  = access.UserName("nexmark-q5", "nexmark-q5")
	q5Admin    = access.UserName("nexmark-q5", access.RoleAdmin)
	dedupAdmin = access.UserName("nexmark", access.RoleAdmin)
	// dedupLatest is the subject of the dedup pipeline's latest
	// checkpoint, in its checkpoint bucket.
	dedupLatest  = "$KV." + checkpoint.BucketName("nexmark") + ".latest"
	dedupBucket  = "KV_" + checkpoint.BucketName("nexmark")
	q5Bids       = edge.StreamName("nexmark-q5", "bids")
	q5BidSubject = "weir.nexmark-q5.bids.0"
)

// genuineLatest stores a value as the dedup pipeline's latest checkpoint,
// as its administrator, and returns a check that it is still there.
func genuineLatest(t *testing.T, r *isolationRun) func() {
	t.Helper()
	ctx := context.Background()
	kv, err := r.js(t, dedupAdmin).KeyValue(ctx, checkpoint.BucketName("nexmark"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "latest", []byte("genuine")); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		e, err := kv.Get(ctx, "latest")
		if err != nil || string(e.Value()) != "genuine" {
			var v []byte
			if err == nil {
				v = e.Value()
			}
			t.Fatalf("the dedup pipeline's latest checkpoint is %q (%v), want the one its coordinator wrote", v, err)
		}
	}
}

// attempt runs a JetStream API call an attacker makes: a denied request is
// never answered, so it gets a few seconds.
func attempt(f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return f(ctx)
}

// TestAServiceCannotRepublishIntoAnotherPipeline: q5's service, on the
// credentials weir auth wrote for it, updates its own edge — and its own
// pipeline's checkpoint bucket — to republish what it writes there into
// the dedup pipeline's latest checkpoint, and writes there. The server refuses the update — no runtime process
// may change a stream — and the dedup pipeline's latest checkpoint is
// untouched. (On 96bb7fe the update went through and q5's record became
// dedup's latest checkpoint.)
func TestAServiceCannotRepublishIntoAnotherPipeline(t *testing.T) {
	r := startIsolationRun(t, "nexmark-q5", "nexmark-dedup")
	untouched := genuineLatest(t, r)
	js := r.js(t, q5Service)
	ctx := context.Background()
	// Its edge, and its own pipeline's checkpoint bucket, with a subject
	// of each it may write.
	q5Checkpoints := checkpoint.BucketName("nexmark-q5")
	for _, target := range []struct{ stream, subject string }{
		{q5Bids, q5BidSubject},
		{"KV_" + q5Checkpoints, "$KV." + q5Checkpoints + ".fence.q5-key.0"}, // a key it may write
	} {
		st, err := js.Stream(ctx, target.stream)
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		cfg.RePublish = &jetstream.RePublish{Source: target.subject, Destination: dedupLatest}
		err = attempt(func(ctx context.Context) error { _, err := js.UpdateStream(ctx, cfg); return err })
		if err == nil {
			t.Errorf("q5's service updated %s to republish into the dedup pipeline's checkpoints", target.stream)
		}
		t.Logf("the update of %s: %v", target.stream, err)
		if _, err := js.Publish(ctx, target.subject, []byte("forged")); err != nil {
			t.Fatal(err)
		}
	}
	untouched()
}

// TestAServiceCannotSourceAnotherPipeline: q5's service updates its own
// edge to source the dedup pipeline's checkpoint bucket, which would copy
// every entry of it where q5 reads. The server refuses; the edge sources
// nothing. (On 96bb7fe the update went through.)
func TestAServiceCannotSourceAnotherPipeline(t *testing.T) {
	r := startIsolationRun(t, "nexmark-q5", "nexmark-dedup")
	genuineLatest(t, r)
	js := r.js(t, q5Service)
	ctx := context.Background()
	st, err := js.Stream(ctx, q5Bids)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.Sources = []*jetstream.StreamSource{{Name: dedupBucket}}
	err = attempt(func(ctx context.Context) error { _, err := js.UpdateStream(ctx, cfg); return err })
	if err == nil {
		t.Error("q5's service updated its edge to source the dedup pipeline's checkpoints")
	}
	t.Logf("the update: %v", err)
	info, err := r.js(t, q5Admin).Stream(ctx, q5Bids)
	if err != nil {
		t.Fatal(err)
	}
	if src := info.CachedInfo().Config.Sources; len(src) > 0 {
		t.Fatalf("q5's edge sources %s", src[0].Name)
	}
	// Nor does it hold any of the bucket's entries.
	if m, err := st.GetLastMsgForSubject(ctx, dedupLatest); err == nil {
		t.Fatalf("q5's edge holds the dedup pipeline's latest checkpoint %q", m.Data)
	}
}

// TestAServiceCannotCreateAStreamSourcingAnotherPipeline: q5's service
// creates a stream sourcing the dedup pipeline's checkpoint bucket — one
// of its pipeline's own names (its audit trail) and a new one. The server
// refuses both: no runtime process creates a stream, and weir provision
// made its pipeline's before any process started. (On 96bb7fe the service
// could create its pipeline's audit stream, and did, sourcing dedup's
// checkpoints.)
func TestAServiceCannotCreateAStreamSourcingAnotherPipeline(t *testing.T) {
	r := startIsolationRun(t, "nexmark-q5", "nexmark-dedup")
	genuineLatest(t, r)
	js := r.js(t, q5Service)
	for _, name := range []string{audit.StreamName("nexmark-q5"), "WEIR_NEXMARK_Q5_COPY"} {
		err := attempt(func(ctx context.Context) error {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Sources: []*jetstream.StreamSource{{Name: dedupBucket}}})
			return err
		})
		if err == nil {
			t.Errorf("q5's service created stream %s sourcing the dedup pipeline's checkpoints", name)
		}
		t.Logf("creating %s: %v", name, err)
	}
	st, err := r.js(t, q5Admin).Stream(context.Background(), audit.StreamName("nexmark-q5"))
	if err != nil {
		t.Fatal(err)
	}
	if src := st.CachedInfo().Config.Sources; len(src) > 0 {
		t.Fatalf("q5's audit stream sources %s", src[0].Name)
	}
}

// TestAServiceRefusesAStreamChangedByHand: with q5's bids edge keeping
// an hour rather than the contract's day — changed by hand — q5's count
// operator, on its service's credentials, refuses to start, naming the
// stream, the field, what it is and what the contract wants, and weir
// provision; it does not change the stream. After weir provision brings it
// back, the operator starts.
func TestAServiceRefusesAStreamChangedByHand(t *testing.T) {
	r := startIsolationRun(t, "nexmark-q5")
	c := r.cs["nexmark-q5"]
	admin := r.js(t, q5Admin)
	ctx := context.Background()
	st, err := admin.Stream(ctx, q5Bids)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxAge, cfg.Duplicates = time.Hour, time.Minute
	if _, err := admin.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	start := func(ctx context.Context) error { return r.runQ5Count(ctx, t) }
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = start(rctx)
	var differs *jsapi.DiffersError
	if !errors.As(err, &differs) || rctx.Err() != nil {
		t.Fatalf("q5-count on an edge changed by hand: %v, want a refusal naming what differs", err)
	}
	for _, want := range []string{q5Bids, "max_age is 1h0m0s, the contract wants 24h0m0s", "weir provision"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	t.Logf("q5-count refused: %v", err)
	if st, err := admin.Stream(ctx, q5Bids); err != nil || st.CachedInfo().Config.MaxAge != time.Hour {
		t.Fatalf("the operator changed the stream (%v)", err)
	}

	provisionAs(t, r.srv.ClientURL(), r.users[q5Admin], provision.Options{Accounts: true}, c)
	sctx, stop := context.WithTimeout(ctx, 3*time.Second)
	defer stop()
	if err := start(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("q5-count after weir provision: %v", err)
	}
}

// runQ5Count runs q5's count operator on its service's credentials until
// ctx ends or it stops.
func (r *isolationRun) runQ5Count(ctx context.Context, t *testing.T) error {
	t.Helper()
	c := r.cs["nexmark-q5"]
	o, err := q5.Factories()["q5-count"](c)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := stream.New(stream.Config{NATSURL: r.srv.ClientURL(), Auth: r.users[q5Service], Contract: c, DataDir: t.TempDir(),
		Operator: "q5-count", Instance: "0", TickInterval: 20 * time.Millisecond, Logger: testLogger(t)}, o)
	if err != nil {
		t.Fatal(err)
	}
	return rt.Run(ctx)
}

// TestAServiceSaysWhatIsMissing: before weir provision, q5's count
// operator, on its service's credentials, cannot create the streams it
// uses; it stops at once, saying what is missing and that weir provision
// makes it, rather than wait for an answer the server never gives.
func TestAServiceSaysWhatIsMissing(t *testing.T) {
	r := startUnprovisioned(t, "nexmark-q5")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := r.runQ5Count(ctx, t)
	var denied *natsconn.DeniedError
	if !errors.Is(err, jsapi.ErrMissing) || !errors.As(err, &denied) || ctx.Err() != nil {
		t.Fatalf("q5-count before weir provision: %v, want it to say what is missing", err)
	}
	for _, want := range []string{"does not exist", "weir provision", "Permissions Violation"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	t.Logf("q5-count before weir provision: %v", err)
}
