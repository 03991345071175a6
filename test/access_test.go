package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/dispatcher"
	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/provision"
	"github.com/weirflow/weir/services/dedup"
	"github.com/weirflow/weir/services/provider"
)

// deployment is a server admitting only the users weir auth derives from
// contracts (weir auth -contract a,b,…): an account per pipeline, per
// ingress stream and for the monitor, each process its own user with the
// permissions its contract gives it. It logs what it denies.
type deployment struct {
	srv   *natstest.Server
	cs    map[string]*contracts.Contract // by pipeline
	users map[string]natsconn.Auth       // by user name
	log   string
}

// startDeployment derives the users of cs, writes them where a server
// configuration includes them — as users in the server's configuration,
// or when decentralized as an operator and accounts whose users' JWTs the
// processes present (access.WriteAccounts) — and starts the server.
// Nothing is provisioned yet (provision).
func startDeployment(t *testing.T, decentralized bool, cs ...*contracts.Contract) *deployment {
	t.Helper()
	return startLimitedDeployment(t, decentralized, 0, cs...)
}

// startLimitedDeployment is startDeployment with each pipeline's and
// ingress's account allowed maxStore bytes of storage (weir auth
// -account-storage; 0: no limit).
func startLimitedDeployment(t *testing.T, decentralized bool, maxStore int64, cs ...*contracts.Contract) *deployment {
	t.Helper()
	dir := t.TempDir()
	d := &deployment{cs: map[string]*contracts.Contract{}, users: map[string]natsconn.Auth{}, log: filepath.Join(dir, "nats.log")}
	var grants []access.Grant
	ingresses := map[string]bool{}
	for _, c := range cs {
		d.cs[c.Pipeline] = c
		g, err := access.ForContract(c)
		if err != nil {
			t.Fatal(err)
		}
		grants = append(grants, g...)
		if !ingresses[c.Ingress.Stream] {
			ingresses[c.Ingress.Stream] = true
			grants = append(grants, access.IngressAdmin(c.Ingress))
		}
	}
	grants = append(grants, access.Monitor())
	write, include := access.WriteUsers, "auth/auth.conf"
	if decentralized {
		write, include = access.WriteAccounts, "auth/accounts.conf"
	}
	accounts := access.Accounts(cs, grants)
	access.LimitStorage(accounts, maxStore)
	users, err := write(access.Files{Dir: filepath.Join(dir, "auth")}, accounts, grants)
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte("include \""+include+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if d.srv, err = natstest.Start(natstest.Options{Dir: t.TempDir(), ConfigFile: conf, LogFile: d.log}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.srv.Shutdown)
	for _, u := range users {
		d.users[u.Name] = natsconn.Auth{NKey: u.SeedFile, InboxPrefix: u.Inbox}
		if decentralized {
			d.users[u.Name] = natsconn.Auth{Creds: strings.TrimSuffix(u.SeedFile, ".nk") + ".creds", InboxPrefix: u.Inbox}
		}
	}
	return d
}

// provision runs weir provision as a deployment does before any process
// starts: weir provision -ingress as each ingress account's
// administrator, then weir provision -accounts as each pipeline's.
func (d *deployment) provision(t *testing.T) {
	t.Helper()
	byStream := map[string][]*contracts.Contract{}
	for _, c := range d.cs {
		byStream[c.Ingress.Stream] = append(byStream[c.Ingress.Stream], c)
	}
	for _, cs := range byStream {
		provisionAs(t, d.srv.ClientURL(), d.users[access.IngressAdmin(cs[0].Ingress).Name], provision.Options{Ingress: true}, cs...)
	}
	for _, c := range d.cs {
		provisionAs(t, d.srv.ClientURL(), d.users[access.UserName(c.Pipeline, access.RoleAdmin)], provision.Options{Accounts: true}, c)
	}
}

// run is the deployment as one of its pipelines' processes see it.
func (d *deployment) run(pipeline string) *accessRun {
	c := d.cs[pipeline]
	r := &accessRun{srv: d.srv, c: c, users: map[string]natsconn.Auth{}, log: d.log}
	for name, auth := range d.users {
		if role, ok := strings.CutPrefix(name, c.Pipeline+"-"); ok && access.UserName(c.Pipeline, role) == name {
			r.users[role] = auth
		}
	}
	r.users[access.RoleMonitor] = d.users[access.Monitor().Name]
	return r
}

// accessRun is one pipeline of a deployment: its contract, and its
// processes' users by role (a service's name, or an access.Role).
type accessRun struct {
	srv   *natstest.Server
	c     *contracts.Contract
	users map[string]natsconn.Auth // by role
	log   string
}

// startAccessRun deploys c alone, provisioned, as startAccessRunAs does.
func startAccessRun(t *testing.T, c *contracts.Contract) *accessRun {
	return startAccessRunAs(t, c, false)
}

// startAccessRunAs deploys c alone (startDeployment), provisions it, and
// returns it.
func startAccessRunAs(t *testing.T, c *contracts.Contract, decentralized bool) *accessRun {
	t.Helper()
	d := startDeployment(t, decentralized, c)
	d.provision(t)
	return d.run(c.Pipeline)
}

// js connects as role; the monitor asks for the pipeline's account's
// streams under its prefix.
func (r *accessRun) js(t *testing.T, role string) jetstream.JetStream {
	t.Helper()
	nc, err := r.users[role].Connect(r.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if role == access.RoleMonitor {
		js, err = jetstream.NewWithAPIPrefix(nc, jsapi.Prefix(r.c.Pipeline))
	}
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// denials are the permission violations the server logged.
func (r *accessRun) denials(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(r.log)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "Violation") {
			out = append(out, line)
		}
	}
	return out
}

// splitDedup is the dedup pipeline with its two operators in services of
// their own: dedup reads the ingress, publisher the deduped edge.
func splitDedup(t *testing.T) *contracts.Contract {
	t.Helper()
	c, err := contracts.Shipped("nexmark-dedup")
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Operators {
		if c.Operators[i].ID == "publish" {
			c.Operators[i].Service = "publisher"
		}
	}
	return c
}

// TestEachServiceRunsWithItsOwnCredentials runs the dedup pipeline, split
// into two services, against a server that admits only the users weir
// auth derives from its contract: each service with its own, the
// coordinator with its, the corpus published as the producer and read
// back as the administrator, in aligned and then unaligned checkpoints,
// the services restarted between the two on new hosts, restoring the
// checkpoint, and then the publish operator rescaled to two instances
// (its second one started on its service's credentials). Every event
// reaches the sink
// exactly once, checkpoints complete, and the server denied nothing. Then
// the dedup operator, started with the publisher's credentials, stops at
// once saying that NATS denied it — not reading the ingress the publisher
// has no right to.
func TestEachServiceRunsWithItsOwnCredentials(t *testing.T) {
	c := splitDedup(t)
	r := startAccessRun(t, c)
	url := r.srv.ClientURL()
	admin := r.js(t, access.RoleAdmin)
	cfg := genConfig(c, 3000)
	want, future := expected(t, cfg)
	half := cfg
	half.Count = 1000
	publish(t, r.js(t, access.RoleProducer), half)

	runPipeline := func(mode string) func() {
		c.Recovery.Mode = mode
		// State of its own each time: the second run restores the first's
		// checkpoint from the bucket, as on a new host.
		return r.runPipeline(t, dedup.Factories(), t.TempDir())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store, err := checkpoint.Open(ctx, admin, c.Pipeline, 0)
	if err != nil {
		t.Fatal(err)
	}
	// completed waits for a checkpoint after the one given with a manifest
	// of each of instances.
	completed := func(after uint64, instances int) uint64 {
		t.Helper()
		var n uint64
		streamtest.CheckFor(t, 30*time.Second, func() error {
			l, _, err := store.Latest(ctx)
			if err != nil || l.Checkpoint <= after || len(l.Manifests) != instances {
				return fmt.Errorf("no complete checkpoint after %d with every operator's manifest (%v)", after, err)
			}
			n = l.Checkpoint
			return nil
		})
		return n
	}

	stop := runPipeline(contracts.CheckpointAligned)
	first := completed(0, len(c.Operators))
	stop()
	stop = runPipeline(contracts.CheckpointUnaligned)
	// A service's health probe runs with its credentials: it may ping it.
	nc, err := r.users["dedup"].Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	streamtest.CheckFor(t, 10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := natsconn.Ask(ctx, nc, "$SRV.PING.weir-dedup", nil)
		return err
	})
	more := cfg
	more.Start, more.Count = 1000, 1000
	publish(t, r.js(t, access.RoleProducer), more)
	last := completed(first, len(c.Operators))
	// A rescale, as the administrator: the publish operator on two
	// instances, the second on its service's credentials.
	if _, err := checkpoint.Rescale(ctx, admin, c, map[string][]string{"dedup": {"0"}, "publish": {"0", "1"}}, ""); err != nil {
		t.Fatal(err)
	}
	o, err := dedup.Factories()["publish"](c)
	if err != nil {
		t.Fatal(err)
	}
	second, err := stream.New(stream.Config{NATSURL: url, Auth: r.users["publisher"], Contract: c, DataDir: t.TempDir(),
		Operator: "publish", Instance: "1", TickInterval: 20 * time.Millisecond, Logger: testLogger(t)}, o)
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(ctx)
	sdone := make(chan error, 1)
	go func() { sdone <- second.Run(sctx) }()
	rest := cfg
	rest.Start = 2000
	publish(t, r.js(t, access.RoleProducer), rest)
	streamtest.CheckFor(t, 60*time.Second, func() error { return checkSink(ctx, admin, c, want, future) })
	if second.Stats().Out == 0 {
		t.Error("the second publish instance published nothing after the rescale")
	}
	last = completed(last, len(c.Operators)+1)
	scancel()
	if err := <-sdone; err != nil {
		t.Fatalf("the second publish instance: %v", err)
	}
	stop()
	r.checkNothingDenied(t)
	// An act recorded by the administrator names who the server
	// authenticated it as, beside who it says acts.
	if _, err := audit.Append(ctx, admin, c.Pipeline, audit.Record{Actor: "test", Action: audit.ActionCheckpoint, Target: c.Pipeline}); err != nil {
		t.Fatal(err)
	}
	recs, err := audit.List(ctx, admin, c.Pipeline, audit.ActionCheckpoint)
	if err != nil || len(recs) == 0 || !strings.HasPrefix(recs[len(recs)-1].Identity, "nkey U") {
		t.Fatalf("the administrator's act is audited as %+v (%v), want its nkey", recs, err)
	}
	// The monitor reads how many messages the sink holds, and none of them.
	monitor := r.js(t, access.RoleMonitor)
	if info, err := jsapi.Listed(ctx, monitor, deadletter.StreamName(c.Pipeline)); err != nil || info.State.Msgs != uint64(future) {
		t.Fatalf("the monitor reads %+v dead letters (%v), want %d", info, err, future)
	}
	// Denied, the request is never answered.
	if _, err := monitor.Conn().Request(jsapi.Prefix(c.Pipeline)+".STREAM.MSG.GET."+deadletter.StreamName(c.Pipeline), []byte(`{"seq":1}`), 2*time.Second); err == nil {
		t.Fatal("the monitor read a dead letter")
	}
	t.Logf("%d events exactly once at the sink, %d dead letters; checkpoints %d (aligned) and %d (unaligned, then rescaled) complete; nothing denied",
		len(want), future, first, last)

	o, err = dedup.Factories()["dedup"](c)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := stream.New(stream.Config{NATSURL: url, Auth: r.users["publisher"], Contract: c, DataDir: t.TempDir(),
		Operator: "dedup", Instance: "0", TickInterval: 20 * time.Millisecond, Logger: testLogger(t)}, o)
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	err = rt.Run(rctx)
	var denied *natsconn.DeniedError
	if !errors.As(err, &denied) || rctx.Err() != nil {
		t.Fatalf("the dedup operator with the publisher's credentials: %v, want it to stop because NATS denied it", err)
	}
	t.Logf("the dedup operator with the publisher's credentials: %v", err)
}

// runPipeline runs every operator of the run's contract, each with its
// service's credentials and its state under dir, and the coordinator with
// its own, until the returned stop is called.
func (r *accessRun) runPipeline(t *testing.T, factories map[string]stream.Factory, dir string) func() {
	t.Helper()
	return runAs(t, r.srv.ClientURL(), r.c, dir, factories, nil, func(role string) natsconn.Auth { return r.users[role] })
}

// checkNothingDenied fails the test if the server denied anything.
func (r *accessRun) checkNothingDenied(t *testing.T) {
	t.Helper()
	if d := r.denials(t); len(d) > 0 {
		t.Fatalf("the server denied the pipeline's own users %d times, first: %s", len(d), d[0])
	}
}

// TestTheOutboxRunsWithItsOwnCredentials runs an outbox — the dedup
// pipeline recording an intent per event, its coordinator, and the
// dispatcher calling the provider simulator — each process with the
// credentials weir auth derives for it: every event is charged exactly
// once and the server denied nothing.
func TestTheOutboxRunsWithItsOwnCredentials(t *testing.T) {
	c := loadContract(t)
	c.Sink.Effect, c.Sink.MaxPendingEpochs = contracts.EffectOutbox, 2
	if ps := c.Lint(); len(ps) > 0 {
		t.Fatal(ps)
	}
	r := startAccessRun(t, c)
	feed, want := inSlices(t, r.js(t, access.RoleProducer), c, 1000, 1)
	feed(0)
	p := provider.New()
	hs := httptest.NewServer(p)
	defer hs.Close()
	factories := map[string]stream.Factory{"dedup": dedup.Factories()["dedup"], "publish": intentsOperator(c.Pipeline)}
	defer r.runPipeline(t, factories, t.TempDir())()
	cfg, err := dispatcher.ForContract(c, hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = testLogger(t)
	d, err := dispatcher.New(context.Background(), r.js(t, access.RoleDispatcher), cfg)
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, "dispatcher", d.Run)
	streamtest.CheckFor(t, 60*time.Second, func() error { return checkCharged(p, want) })
	r.checkNothingDenied(t)
	t.Logf("%d events charged exactly once; nothing denied", len(want))

	// A dispatcher started with the producer's credentials stops at once,
	// saying NATS denied it, instead of waiting for answers.
	producer := r.users[access.RoleProducer]
	env := map[string]string{"NATS_URL": r.srv.ClientURL(), "NATS_NKEY": producer.NKey, "NATS_INBOX_PREFIX": producer.InboxPrefix,
		"WEIR_CONTRACT": filepath.Join("..", "contracts", "nexmark-winning-bids.yaml"), "WEIR_PROVIDER": hs.URL}
	mctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = dispatcher.Main(mctx, nil, func(k string) string { return env[k] }, io.Discard)
	var denied *natsconn.DeniedError
	if !errors.As(err, &denied) || mctx.Err() != nil {
		t.Fatalf("a dispatcher on the producer's credentials: %v, want it to stop because NATS denied it", err)
	}
	t.Logf("a dispatcher on the producer's credentials: %v", err)
}

// TestEachServiceRunsWithDecentralizedCredentials runs the dedup pipeline,
// split into two services, against a server that trusts an operator and
// account (weir auth -jwt): each process presents its own user JWT, signed
// by the account with the permissions its contract gives it. Every event
// reaches the sink exactly once, a checkpoint completes, the server denied
// nothing; the dedup operator on the publisher's credentials is denied.
func TestEachServiceRunsWithDecentralizedCredentials(t *testing.T) {
	c := splitDedup(t)
	r := startAccessRunAs(t, c, true)
	admin := r.js(t, access.RoleAdmin)
	cfg := genConfig(c, 1000)
	want, future := expected(t, cfg)
	publish(t, r.js(t, access.RoleProducer), cfg)
	stop := r.runPipeline(t, dedup.Factories(), t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	streamtest.CheckFor(t, 60*time.Second, func() error { return checkSink(ctx, admin, c, want, future) })
	store, err := checkpoint.Open(ctx, admin, c.Pipeline, 0)
	if err != nil {
		t.Fatal(err)
	}
	streamtest.CheckFor(t, 30*time.Second, func() error {
		_, _, err := store.Latest(ctx)
		return err
	})
	stop()
	r.checkNothingDenied(t)

	o, err := dedup.Factories()["dedup"](c)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := stream.New(stream.Config{NATSURL: r.srv.ClientURL(), Auth: r.users["publisher"], Contract: c, DataDir: t.TempDir(),
		Operator: "dedup", Instance: "0", TickInterval: 20 * time.Millisecond, Logger: testLogger(t)}, o)
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	var denied *natsconn.DeniedError
	if err := rt.Run(rctx); !errors.As(err, &denied) || rctx.Err() != nil {
		t.Fatalf("the dedup operator with the publisher's credentials: %v, want it to stop because NATS denied it", err)
	}
}
