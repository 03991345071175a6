package main

import (
	bytespkg "bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/pkg/checkpoint"
	"github.com/weirflow/weir/pkg/natsconn"
	"github.com/weirflow/weir/pkg/natstest"
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
	// administrator; and the deployment's monitor.
	if len(opts.Nkeys) != 10 {
		t.Fatalf("the server knows %d users, want 10", len(opts.Nkeys))
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
	dir := t.TempDir()
	out := filepath.Join(dir, "auth")
	if o, err := weir(t, "auth", "-contract", "nexmark-dedup", "-out", out); err != nil {
		t.Fatalf("weir auth: %v\n%s", err, o)
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte("include \"auth/auth.conf\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := natstest.Start(natstest.Options{Dir: t.TempDir(), ConfigFile: conf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
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
