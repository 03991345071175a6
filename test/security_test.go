package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/dedup"
)

// TestThePipelineRunsOverMutualTLS runs the dedup pipeline and its
// coordinator against a server that speaks only TLS, verifies its
// clients' certificates and knows one user: every event reaches the sink
// exactly once and checkpoints complete. A client that does not trust the
// server's CA, one without a client certificate, and one with a wrong
// password are each refused, saying why.
func TestThePipelineRunsOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	certs, err := natsconn.WriteCertificates(filepath.Join(dir, "tls"), []string{"localhost", "127.0.0.1"}, "weir", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, `
tls {
  cert_file: %q
  key_file: %q
  ca_file: %q
  verify: true
}
authorization {
  users = [ { user: weir, password: "correct horse" } ]
}
`, certs.Server, certs.ServerKey, certs.CA), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := natstest.Start(natstest.Options{Dir: t.TempDir(), ConfigFile: conf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	url := srv.ClientURL()
	auth := natsconn.Auth{User: "weir", Password: "correct horse", CA: certs.CA, Cert: certs.Client, Key: certs.ClientKey}

	for _, bad := range []struct {
		what string
		auth natsconn.Auth
		want []string // one of
	}{
		{"a client that does not trust the server's CA", natsconn.Auth{User: "weir", Password: "correct horse", Cert: certs.Client, Key: certs.ClientKey}, []string{"certificate signed by unknown authority"}},
		{"a client without a certificate", natsconn.Auth{User: "weir", Password: "correct horse", CA: certs.CA}, []string{
			// TLS 1.3 refuses a missing client certificate after the
			// handshake: the client reads the alert or a closed socket.
			"certificate required", "closed by remote after TLS handshake"}},
		{"a client with a wrong password", natsconn.Auth{User: "weir", Password: "wrong", CA: certs.CA, Cert: certs.Client, Key: certs.ClientKey}, []string{"Authorization Violation"}},
	} {
		nc, err := bad.auth.Connect(url, nats.NoReconnect(), nats.Timeout(5*time.Second))
		if err == nil {
			nc.Close()
			t.Fatalf("%s was let in", bad.what)
		}
		if !slices.ContainsFunc(bad.want, func(w string) bool { return strings.Contains(err.Error(), w) }) {
			t.Errorf("%s: refused with %q, want it to say one of %q", bad.what, err, bad.want)
		}
		t.Logf("%s: %v", bad.what, err)
	}

	nc, err := auth.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := contracts.Shipped("nexmark-dedup")
	if err != nil {
		t.Fatal(err)
	}
	cfg := genConfig(c, 2000)
	want, future := expected(t, cfg)
	publish(t, js, cfg)

	runAs(t, url, c, dir, dedup.Factories(), nil, func(string) natsconn.Auth { return auth })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	streamtest.CheckFor(t, 60*time.Second, func() error { return checkSink(ctx, js, c, want, future) })
	store, err := checkpoint.Open(ctx, js, c.Pipeline, 0)
	if err != nil {
		t.Fatal(err)
	}
	streamtest.CheckFor(t, 30*time.Second, func() error {
		l, _, err := store.Latest(ctx)
		if err != nil || len(l.Manifests) != len(c.Operators) {
			return fmt.Errorf("no complete checkpoint with every operator's manifest (%v)", err)
		}
		return nil
	})
	t.Logf("%d events exactly once at the sink over mutual TLS, %d dead letters", len(want), future)
}

// TestCheckpointsAreSealed runs the dedup pipeline twice over the same
// corpus, once with its snapshots sealed (stream.Config.CheckpointKeys)
// and once without. Unsealed, the objects of the checkpoint bucket show
// event IDs of the corpus; sealed, none. A new host given the keys
// restores the sealed checkpoint and goes on, every event exactly once; a
// new host without them stops, saying which key it needs.
func TestCheckpointsAreSealed(t *testing.T) {
	line, err := checkpoint.NewKeyLine("k1")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := checkpoint.ParseKeys(line)
	if err != nil {
		t.Fatal(err)
	}
	c, err := contracts.Shipped("nexmark-dedup")
	if err != nil {
		t.Fatal(err)
	}
	cfg := genConfig(c, 2000)
	want, _ := expected(t, cfg)

	// seen runs the pipeline on a server of its own until a checkpoint
	// holds the whole corpus, and counts the corpus's IDs found in the
	// checkpoint bucket's objects.
	run := func(keys *checkpoint.Keys) (srv *natstest.Server, found int) {
		srv = natstest.Run(t)
		js := srv.JetStream(t)
		publish(t, js, cfg)
		stop := runSealed(t, srv.ClientURL(), c, keys, t.TempDir())
		ctx := context.Background()
		streamtest.CheckFor(t, 60*time.Second, func() error { return checkSink(ctx, js, c, want, -1) })
		store, err := checkpoint.Open(ctx, js, c.Pipeline, 0)
		if err != nil {
			t.Fatal(err)
		}
		first, _, err := store.Latest(ctx)
		if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
			t.Fatal(err)
		}
		streamtest.CheckFor(t, 30*time.Second, func() error {
			l, _, err := store.Latest(ctx)
			if err != nil || l.Checkpoint <= first.Checkpoint+1 {
				return fmt.Errorf("no checkpoint after the corpus yet (%v)", err)
			}
			return nil
		})
		stop()
		var all []byte
		for _, op := range c.Operators {
			obj, err := js.ObjectStore(ctx, checkpoint.FilesBucket(c.Pipeline, op.ID))
			if err != nil {
				t.Fatal(err)
			}
			infos, err := obj.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, info := range infos {
				b, err := obj.GetBytes(ctx, info.Name)
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, b...)
			}
		}
		for id := range want {
			// IDs of 6 bytes and more: a shorter one ("7-5") turns up in
			// hundreds of kilobytes of ciphertext by chance (CI saw one).
			if len(id) >= 6 && bytes.Contains(all, []byte(id)) {
				found++
			}
		}
		return srv, found
	}
	_, plain := run(nil)
	if plain == 0 {
		t.Fatal("the unsealed checkpoints show no event ID either: the scan cannot tell sealed from unsealed")
	}
	srv, sealed := run(keys)
	if sealed != 0 {
		t.Fatalf("%d of the corpus's IDs are in the sealed checkpoint bucket", sealed)
	}
	t.Logf("unsealed, the checkpoint bucket shows %d of %d event IDs; sealed, none", plain, len(want))

	// A new host without the keys stops saying which it needs.
	o, err := dedup.Factories()["dedup"](c)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := stream.New(stream.Config{NATSURL: srv.ClientURL(), Contract: c, DataDir: t.TempDir(), Operator: "dedup", Instance: "0",
		TickInterval: 20 * time.Millisecond, Logger: testLogger(t)}, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rt.Run(ctx); !errors.Is(err, checkpoint.ErrNoKey) || ctx.Err() != nil {
		t.Fatalf("a restore without the keys: %v, want it to stop for the missing key", err)
	} else {
		t.Logf("a restore without the keys: %v", err)
	}

	// A new host with them restores and goes on: the second half of the
	// corpus once more, and every event still once.
	js := srv.JetStream(t)
	stop := runSealed(t, srv.ClientURL(), c, keys, t.TempDir())
	defer stop()
	more := cfg
	more.Start = 1000
	publish(t, js, more) // message IDs: stored once again
	streamtest.CheckFor(t, 60*time.Second, func() error { return checkSink(ctx, js, c, want, -1) })
	// It restored the sealed checkpoint: no fallback past it, as from a
	// snapshot that did not open.
	falls, err := audit.List(ctx, js, c.Pipeline, audit.ActionFallback)
	if err != nil {
		t.Fatal(err)
	}
	if len(falls) > 0 {
		t.Fatalf("the restore fell back past the sealed checkpoint: %+v", falls[0])
	}
}

// runSealed runs the dedup pipeline with its snapshots sealed with keys
// (nil: not sealed), its state under dir, and its coordinator, until the
// returned stop.
func runSealed(t *testing.T, url string, c *contracts.Contract, keys *checkpoint.Keys, dir string) func() {
	t.Helper()
	return runAs(t, url, c, dir, dedup.Factories(), keys, func(string) natsconn.Auth { return natsconn.Auth{} })
}
