package main

import (
	bytespkg "bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/internal/redact"
	"github.com/weirflow/weir/pkg/natstest"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
)

// TestAuthWritesWhatTheServerReads: `weir auth` writes a user for every
// process of the pipeline — the services, the coordinator, the producer,
// the dispatcher of an outbox and the administrator — that nats-server
// loads with the permissions derived; running it again keeps each
// process's key.
func TestAuthWritesWhatTheServerReads(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "auth")
	runs := 0
	auth := func() string {
		runs++
		var stdout, stderr bytespkg.Buffer
		if err := run(context.Background(), []string{"auth", "-contract", "nexmark-winning-bids,nexmark-dedup", "-out", out, "-tls-hosts", "nats,127.0.0.1", "-checkpoint-key", "k" + strconv.Itoa(runs)},
			func(string) string { return "" }, &stdout, &stderr); err != nil {
			t.Fatalf("weir auth: %v\n%s", err, stderr.String())
		}
		return stdout.String()
	}
	printed := auth()
	redactionKey := filepath.Join(out, "redaction.key")
	firstKey, err := redact.LoadKey(redactionKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"nexmark-winning-bids-nexmark-auctions", "nexmark-winning-bids-coordinator", "nexmark-winning-bids-producer", "nexmark-winning-bids-dispatcher", "nexmark-winning-bids-admin", "nexmark-dedup", "weir-monitor"} {
		if !strings.Contains(printed, user) {
			t.Errorf("no user %s in:\n%s", user, printed)
		}
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte("include \"auth/auth.conf\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	// winning bids: its service, coordinator, producer, dispatcher and
	// administrator; dedup: its service, coordinator, producer and
	// administrator; the ingress's administrator; and the deployment's
	// monitor.
	if len(opts.Nkeys) != 11 {
		t.Fatalf("the server knows %d users, want 11", len(opts.Nkeys))
	}
	// Each in its account: a pipeline's, the ingress's, the monitor's.
	accounts := map[string]string{}
	for _, u := range opts.Nkeys {
		if u.Account != nil {
			accounts[u.Account.Name] += "x"
		}
	}
	for acct, users := range map[string]int{"nexmark-winning-bids": 4, "nexmark": 3, "ingress-nexmark": 3, "monitor": 1} {
		if len(accounts[acct]) != users {
			t.Errorf("account %s has %d users, want %d (%v)", acct, len(accounts[acct]), users, accounts)
		}
	}
	keys := map[string]bool{}
	for _, u := range opts.Nkeys {
		keys[u.Nkey] = true
		if u.Permissions == nil || u.Permissions.Publish == nil || len(u.Permissions.Publish.Allow) == 0 || u.Permissions.Subscribe == nil {
			t.Errorf("user %s has no permissions: %+v", u.Nkey, u.Permissions)
		}
	}
	auth()
	again, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range again.Nkeys {
		if !keys[u.Nkey] {
			t.Errorf("running weir auth again changed a key: %s is new", u.Nkey)
		}
	}
	for _, f := range []string{"tls/ca.pem", "tls/server.pem", "tls/server-key.pem", "tls/client.pem", "tls/client-key.pem", "nexmark-winning-bids-admin.nk", "nexmark-winning-bids-admin.env", "nexmark-winning-bids-dispatcher.env"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	// Two runs, two keys: the second current, the first still there.
	k, err := checkpoint.LoadKeys(filepath.Join(out, "checkpoint.keys"))
	if err != nil {
		t.Fatal(err)
	}
	if k.Current() != "k2" || !k.Has("k1") {
		t.Errorf("after two runs the keys are not k1 and k2, current: %s", k.Current())
	}
	// One redaction key, kept: a new one would hash every value anew.
	if again, err := redact.LoadKey(redactionKey); err != nil || !bytespkg.Equal(again, firstKey) {
		t.Errorf("running weir auth again changed the redaction key (%v)", err)
	}
	if fi, err := os.Stat(redactionKey); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("the redaction key is readable by others: %v", fi.Mode())
	}
	fi, err := os.Stat(filepath.Join(out, "nexmark-winning-bids-nexmark-auctions.nk"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("a seed is readable by others: %v", fi.Mode())
	}
}

// TestACommandDeniedStopsAtOnce: a weir command on credentials that do
// not allow what it does stops with the server's denial, naming it, rather
// than wait for a reply that never comes; on the administrator's it runs.
func TestACommandDeniedStopsAtOnce(t *testing.T) {
	srv, out := authServer(t, "-contract", "nexmark-dedup")
	as := func(role string) []string {
		user := access.UserName("nexmark", role)
		return []string{"-nats", srv.ClientURL(), "-pipeline", "nexmark", "-nkey", filepath.Join(out, user+".nk"), "-inbox-prefix", access.Inbox(user)}
	}
	began := time.Now()
	o, err := weir(t, append([]string{"audit"}, as(access.RoleProducer)...)...)
	var denied *natsconn.DeniedError
	if !errors.As(err, &denied) || !strings.Contains(err.Error(), "Permissions Violation") {
		t.Fatalf("weir audit as the producer: %v\n%s", err, o)
	}
	if took := time.Since(began); took > 4*time.Second {
		t.Errorf("the denied command took %s to stop", took)
	}
	if o, err := weir(t, append([]string{"audit"}, as(access.RoleAdmin)...)...); err != nil || !strings.Contains(o, "nothing audited") {
		t.Fatalf("weir audit as the administrator: %v\n%s", err, o)
	}
}

// TestAReplayRunsWithTheGenerationsGranted: `weir auth -generations r1`
// lets the administrator replay the pipeline into generation r1 — its
// operators run in the command's process, on the administrator's
// credentials — and a generation not granted is denied at once.
func TestAReplayRunsWithTheGenerationsGranted(t *testing.T) {
	srv, out := authServer(t, "-contract", "nexmark-q7", "-generations", "r1")
	c, err := contracts.Shipped("nexmark-q7")
	if err != nil {
		t.Fatal(err)
	}
	admin := provisionAccounts(t, srv, out, "nexmark-q7", c)
	const events = 500
	ctx := context.Background()
	publishAs(t, jsAs(t, srv, authUser(out, access.UserName(c.Pipeline, access.RoleProducer))), authGen(c, events))
	// The pipeline's mirror of the ingress holds them all.
	mirror, err := jsAs(t, srv, admin).Stream(ctx, c.Ingress.Stream)
	if err != nil {
		t.Fatal(err)
	}
	// A mirror reports no lag from what it last heard of its origin: the
	// last events can still be on their way while it says so.
	mctx, mcancel := context.WithTimeout(ctx, time.Minute)
	defer mcancel()
	for {
		info, err := mirrorCaughtUp(mctx, mirror)
		if err != nil {
			t.Fatalf("the pipeline's mirror of the ingress: %+v, %v", info, err)
		}
		if info.State.LastSeq >= events {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	replay := func(generation string) (string, error) {
		return weir(t, "replay", "-nats", srv.ClientURL(), "-pipeline", "nexmark-q7", "-from", "1", "-to", strconv.Itoa(events),
			"-generation", generation, "-timeout", "1m", "-nkey", admin.NKey, "-inbox-prefix", admin.InboxPrefix)
	}
	if o, err := replay("r1"); err != nil || !strings.Contains(o, "replay ended") {
		t.Fatalf("weir replay into the generation granted: %v\n%s", err, o)
	}
	began := time.Now()
	var denied *natsconn.DeniedError
	if o, err := replay("r2"); !errors.As(err, &denied) {
		t.Fatalf("weir replay into a generation not granted: %v\n%s", err, o)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("the denied replay took %s to stop", took)
	}
}

// authServer runs weir auth with args and a server admitting the users it
// wrote (with -jwt, trusting the operator and account it wrote), and
// returns the server and where the users' files are.
func authServer(t *testing.T, args ...string) (*natstest.Server, string) {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "auth")
	if o, err := weir(t, append([]string{"auth", "-out", out}, args...)...); err != nil {
		t.Fatalf("weir auth: %v\n%s", err, o)
	}
	include := "auth/auth.conf"
	if slices.Contains(args, "-jwt") {
		include = "auth/accounts.conf"
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte("include \""+include+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := natstest.Start(natstest.Options{Dir: t.TempDir(), ConfigFile: conf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv, out
}

// TestAuthWritesDecentralizedCredentials: `weir auth -jwt` writes an
// operator and account the server trusts, and per process a .creds file
// with a user JWT; the administrator's lets a command run, the producer's
// is denied what the producer may not do.
func TestAuthWritesDecentralizedCredentials(t *testing.T) {
	srv, out := authServer(t, "-contract", "nexmark-dedup", "-jwt")
	as := func(role string) []string {
		user := access.UserName("nexmark", role)
		return []string{"-nats", srv.ClientURL(), "-pipeline", "nexmark", "-creds", filepath.Join(out, user+".creds"), "-inbox-prefix", access.Inbox(user)}
	}
	if o, err := weir(t, append([]string{"audit"}, as(access.RoleAdmin)...)...); err != nil || !strings.Contains(o, "nothing audited") {
		t.Fatalf("weir audit as the administrator: %v\n%s", err, o)
	}
	var denied *natsconn.DeniedError
	if o, err := weir(t, append([]string{"audit"}, as(access.RoleProducer)...)...); !errors.As(err, &denied) {
		t.Fatalf("weir audit as the producer: %v\n%s", err, o)
	}
}

// TestAuthWritesProducerTokens: -producers writes each producer of the
// ingest gateway a token only its owner reads, and the gateway a tokens
// file that admits exactly those tokens, each to its tenants; a producer
// limited to tenants of a contract that declares none is refused.
func TestAuthWritesProducerTokens(t *testing.T) {
	out := filepath.Join(t.TempDir(), "auth")
	auth := func(contract, producers string) error {
		var stdout, stderr bytespkg.Buffer
		return run(context.Background(), []string{"auth", "-contract", contract, "-out", out, "-producers", producers},
			func(string) string { return "" }, &stdout, &stderr)
	}
	if err := auth("nexmark-dedup", "shop:acme"); err == nil || !strings.Contains(err.Error(), "declares no identity.tenant") {
		t.Fatalf("tenants on a contract without them: %v", err)
	}
	raw, err := os.ReadFile("../../contracts/nexmark-dedup.yaml")
	if err != nil {
		t.Fatal(err)
	}
	line := "  event_time: {from: json, field: ts, format: unix-ms}\n"
	tenanted := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(tenanted, bytespkg.Replace(raw, []byte(line), []byte(line+"  tenant: {from: json, field: tenant}\n"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := auth(tenanted, "shop,acme-shop:acme"); err != nil {
		t.Fatal(err)
	}
	tokens, err := access.ReadTokens(access.TokensFile(out, "nexmark"), "nexmark")
	if err != nil {
		t.Fatal(err)
	}
	for name, tenants := range map[string][]string{"shop": nil, "acme-shop": {"acme"}} {
		file := access.TokenFile(out, "nexmark", name)
		st, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", file, st.Mode().Perm())
		}
		token, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		p, ok := tokens.Producer(strings.TrimSpace(string(token)))
		if !ok || p.Name != name || !slices.Equal(p.Tenants, tenants) {
			t.Errorf("%s's token admits %+v (%v), want %s writing %v", name, p, ok, name, tenants)
		}
	}
}

// TestAuthOverIngressStreams: with the ingress over two streams
// (ingress.streams), weir auth lets the ingress's administrator provision
// both, the producer write both, and the pipeline's mirrors of both fill;
// the service's credentials read each and cannot change or delete it.
func TestAuthOverIngressStreams(t *testing.T) {
	file := overStreams(t, "nexmark-q7", 2)
	c, err := contracts.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Ingress.StreamNames(); !slices.Equal(got, []string{"NEXMARK_0", "NEXMARK_1"}) {
		t.Fatalf("ingress streams %v", got)
	}
	srv, out := authServer(t, "-contract", file)
	admin := provisionAccounts(t, srv, out, file, c)
	const events = 400
	ctx := context.Background()
	publishAs(t, jsAs(t, srv, authUser(out, access.UserName(c.Pipeline, access.RoleProducer))), authGen(c, events))
	svc := jsAs(t, srv, authUser(out, access.UserName(c.Pipeline, "nexmark-q7")))
	ajs := jsAs(t, srv, admin)
	// A mirror reports no lag from what it last heard of its origin: wait
	// until the mirrors hold every event before reading them.
	deadline := time.Now().Add(time.Minute)
	for held := uint64(0); held < events; {
		held = 0
		for _, name := range c.Ingress.StreamNames() {
			if st, err := svc.Stream(ctx, name); err == nil {
				held += st.CachedInfo().State.Msgs
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mirrors hold %d of %d events after a minute", held, events)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var total uint64
	for _, name := range c.Ingress.StreamNames() {
		st, err := svc.Stream(ctx, name)
		if err != nil {
			t.Fatalf("the service looks up %s: %v", name, err)
		}
		mctx, cancel := context.WithTimeout(ctx, time.Minute)
		info, err := mirrorCaughtUp(mctx, st)
		cancel()
		if err != nil {
			t.Fatalf("the pipeline's mirror %s: %v", name, err)
		}
		total += info.State.Msgs
		cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			t.Fatalf("the service reads %s: %v", name, err)
		}
		if _, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil {
			t.Fatalf("the service reads %s: %v", name, err)
		}
		cfg := info.Config
		cfg.Description = "changed"
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if _, err := svc.UpdateStream(dctx, cfg); err == nil {
			t.Errorf("the service changed stream %s", name)
		}
		if err := svc.DeleteStream(dctx, name); err == nil {
			t.Errorf("the service deleted stream %s", name)
		}
		cancel()
		// As the administrator sees it, the stream is as it was.
		if ast, err := ajs.Stream(ctx, name); err != nil {
			t.Errorf("stream %s after the service's attempts: %v", name, err)
		} else if d := ast.CachedInfo().Config.Description; d == "changed" {
			t.Errorf("stream %s after the service's attempts: description %q", name, d)
		}
	}
	if total != events {
		t.Errorf("the mirrors hold %d events, want %d", total, events)
	}
}

// authUser is the credentials weir auth wrote into out for user name.
func authUser(out, name string) natsconn.Auth {
	return natsconn.Auth{NKey: filepath.Join(out, name+".nk"), InboxPrefix: access.Inbox(name)}
}

// provisionAccounts provisions contract (a file or a shipped name) as a
// deployment with an account per pipeline does — the ingress's
// administrator, then the pipeline's — with the users weir auth wrote into
// out, and returns the pipeline administrator's credentials.
func provisionAccounts(t *testing.T, srv *natstest.Server, out, contract string, c *contracts.Contract) natsconn.Auth {
	t.Helper()
	// The producer makes no stream: the administrators provision them,
	// the ingress's in its account, the pipeline's in the pipeline's.
	in := authUser(out, access.IngressAdmin(c.Ingress).Name)
	if o, err := weir(t, "provision", "-ingress", "-contract", contract, "-nats", srv.ClientURL(), "-nkey", in.NKey, "-inbox-prefix", in.InboxPrefix); err != nil {
		t.Fatalf("weir provision -ingress: %v\n%s", err, o)
	}
	admin := authUser(out, access.UserName(c.Pipeline, access.RoleAdmin))
	if o, err := weir(t, "provision", "-accounts", "-contract", contract, "-nats", srv.ClientURL(), "-nkey", admin.NKey, "-inbox-prefix", admin.InboxPrefix); err != nil {
		t.Fatalf("weir provision -accounts: %v\n%s", err, o)
	}
	return admin
}

// jsAs connects to srv as a.
func jsAs(t *testing.T, srv *natstest.Server, a natsconn.Auth) jetstream.JetStream {
	t.Helper()
	nc, err := a.Connect(srv.ClientURL())
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

// authGen is a generator of events events into c's ingress.
func authGen(c *contracts.Contract, events int) nexmarkgen.Config {
	return nexmarkgen.Config{Stream: c.Ingress.Stream, Streams: c.Ingress.Streams, SubjectPrefix: c.Ingress.SubjectPrefix, Retention: c.Ingress.Retention.D(),
		Producer: "gen", Count: uint64(events), Gen: nexmark.Config{Seed: 3, FirstEventTime: time.Now().Add(-time.Hour).Truncate(10 * time.Second),
			EventsPerSecond: 50, Partitions: c.Ingress.Partitions, KeyGroups: c.State.KeyGroups, Events: uint64(events), Hard: nexmark.HardCases{IdlePartition: -1}}}
}

// publishAs stores gen's events through js: every one, or the test fails.
func publishAs(t *testing.T, js jetstream.JetStream, gen nexmarkgen.Config) {
	t.Helper()
	if _, err := nexmarkgen.EnsureStream(t.Context(), js, gen); err != nil {
		t.Fatal(err)
	}
	if n, err := nexmarkgen.Publish(t.Context(), js, gen, time.Now, nil); err != nil || n != gen.Count {
		t.Fatalf("the producer stored %d of %d: %v", n, gen.Count, err)
	}
}

// overStreams writes the shipped contract name with its ingress over n
// streams (ingress.streams) into a file, and returns its path.
func overStreams(t *testing.T, name string, n int) string {
	t.Helper()
	base, err := os.ReadFile(filepath.Join("..", "..", "contracts", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(base), "\n  partitions: 4\n", "\n  partitions: 4\n  streams: "+strconv.Itoa(n)+"\n", 1)
	if text == string(base) {
		t.Fatalf("no ingress partitions in %s.yaml to put streams beside", name)
	}
	file := filepath.Join(t.TempDir(), name+"-streams.yaml")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}
