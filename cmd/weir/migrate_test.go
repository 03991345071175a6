package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/dedup"
)

// TestMigrationThatChangesTheKeyIsRefused: a savepoint of the dedup
// pipeline checked against the same build is compatible; against a build
// that takes the ID it dedups by from another place (a header instead of
// the payload), `weir migrate check` names the
// change as semantic, on a copy, and restoring it into that build is
// refused — until declared a semantic migration, which is audited. The
// change runs as a shadow generation instead, which `weir compare` sets
// beside the live one.
func TestMigrationThatChangesTheKeyIsRefused(t *testing.T) {
	srv := natstest.Run(t)
	url := srv.ClientURL()
	js := srv.JetStream(t)
	ctx := context.Background()
	c, err := contracts.Shipped("nexmark-dedup")
	if err != nil {
		t.Fatal(err)
	}
	pub := dedupInput(t, js, c, 9, 1000)
	pub(0, 1000)
	live := t.TempDir()
	stop := deployment(t, url, c, live)
	coordinate(t, url, c, time.Hour, 10*time.Second)
	streamtest.CheckFor(t, 30*time.Second, func() error {
		_, err := weir(t, "savepoint", "create", "v1", "-nats", url)
		return err
	})
	stop()

	out, err := weir(t, "migrate", "check", "-savepoint", "v1", "-nats", url)
	if err != nil || !strings.Contains(out, "dedup/0: opens as the new build's state, and means the same") || !strings.Contains(out, "compatible") {
		t.Fatalf("weir migrate check against the same build: %v\n%s", err, out)
	}
	src, err := os.ReadFile(filepath.Join("..", "..", "contracts", "nexmark-dedup.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(src), "  id:         {from: json, field: id}", "  id:         {from: header, header: Nats-Msg-Id}", 1)
	if changed == string(src) {
		t.Fatal("the key selection was not changed")
	}
	file := filepath.Join(t.TempDir(), "dedup-by-key.yaml")
	if err := os.WriteFile(file, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = weir(t, "migrate", "check", "-savepoint", "v1", "-contract", file, "-nats", url)
	t.Logf("weir migrate check:\n%s", out)
	if err == nil || !strings.Contains(out, "key selection: id json id -> id header Nats-Msg-Id (semantic") || !strings.Contains(out, "needs a semantic migration") || !strings.Contains(out, "weir replay") {
		t.Fatalf("weir migrate check against a build keyed otherwise: %v\n%s", err, out)
	}

	byKey, err := contracts.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	restore := func(migration bool) error {
		dir := t.TempDir()
		if out, err := weir(t, "savepoint", "restore", "v1", "-data", dir, "-nats", url); err != nil {
			t.Fatalf("savepoint restore: %v\n%s", err, out)
		}
		rt, err := stream.New(stream.Config{NATSURL: url, Contract: byKey, DataDir: filepath.Join(dir, "dedup"), Operator: "dedup",
			Instance: "0", SemanticMigration: migration, TickInterval: 20 * time.Millisecond}, dedup.New())
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err = rt.Run(rctx)
		if migration && !rt.Ready() && err == nil && !errors.Is(rctx.Err(), context.DeadlineExceeded) {
			t.Fatal("the declared migration never ran")
		}
		return err
	}
	if err := restore(false); err == nil || !strings.Contains(err.Error(), "refusing to restore") || !strings.Contains(err.Error(), "key selection") {
		t.Fatalf("restoring into a build keyed otherwise: %v", err)
	}
	// An upgrade in place: the new build on the old build's local state.
	rt, err := stream.New(stream.Config{NATSURL: url, Contract: byKey, DataDir: filepath.Join(live, "dedup"), Operator: "dedup",
		Instance: "0", TickInterval: 20 * time.Millisecond}, dedup.New())
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = rt.Run(rctx)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "refusing to restore the local state") || !strings.Contains(err.Error(), "key selection") {
		t.Fatalf("the new build started on the old build's local state: %v", err)
	}
	if err := restore(true); err != nil {
		t.Fatalf("the declared semantic migration: %v", err)
	}
	recs, err := audit.List(ctx, js, c.Pipeline, audit.ActionMigrate)
	if err != nil || len(recs) != 1 || !strings.Contains(recs[0].Detail["changes"].([]any)[0].(string), "key selection") {
		t.Fatalf("the semantic migration's audit record: %+v, %v", recs, err)
	}

	// The shadow: the changed build over the retained input, beside the
	// live results.
	st, err := js.Stream(ctx, c.Ingress.Stream)
	if err != nil {
		t.Fatal(err)
	}
	last := strconv.FormatUint(st.CachedInfo().State.LastSeq, 10)
	if out, err := weir(t, "replay", "-nats", url, "-contract", file, "-from", "1", "-to", last, "-generation", "shadow"); err != nil {
		t.Fatalf("the shadow generation: %v\n%s", err, out)
	}
	out, err = weir(t, "compare", "-nats", url, "-pipeline", "nexmark", "-with", "nexmark-shadow")
	t.Logf("weir compare:\n%s", out)
	if err == nil || !strings.Contains(out, "only in nexmark\n") && !strings.Contains(out, "only in nexmark-shadow") {
		t.Fatalf("the shadow keyed otherwise compares equal: %v\n%s", err, out)
	}

	// Cutover: readers of the pipeline's results read the shadow, with the
	// live generation and the savepoint kept to roll back to.
	tailIDs := func() string {
		t.Helper()
		out, err := weir(t, "tail", "-nats", url, "-pipeline", "nexmark", "-n", "1", "-f=false")
		if err != nil {
			t.Fatalf("weir tail: %v\n%s", err, out)
		}
		return out
	}
	if out := tailIDs(); strings.Contains(out, `"id":"gen-`) {
		t.Fatalf("before the cutover, weir tail reads the shadow:\n%s", out)
	}
	if out, err := weir(t, "cutover", "-nats", url, "-pipeline", "nexmark", "-to", "nexmark-nowhere", "-reason", "x"); err == nil || !strings.Contains(err.Error(), "never run") {
		t.Fatalf("a cutover to a generation that never ran: %v\n%s", err, out)
	}
	out, err = weir(t, "cutover", "-nats", url, "-pipeline", "nexmark", "-to", "nexmark-shadow", "-rollback-savepoint", "v1", "-keep", "48h", "-reason", "ids from headers", "-as", "tester")
	if err != nil || !strings.Contains(out, "readers now read generation nexmark-shadow (was nexmark)") || !strings.Contains(out, `savepoint "v1" are needed until`) {
		t.Fatalf("weir cutover: %v\n%s", err, out)
	}
	if out := tailIDs(); !strings.Contains(out, "serves generation nexmark-shadow") || !strings.Contains(out, `"id":"gen-`) {
		t.Fatalf("after the cutover, weir tail does not read the shadow:\n%s", out)
	}
	if out, err := weir(t, "cutover", "-nats", url, "-pipeline", "nexmark", "-rollback", "-reason", "roll back", "-as", "tester"); err != nil || !strings.Contains(out, "readers now read generation nexmark (was nexmark-shadow)") {
		t.Fatalf("weir cutover -rollback: %v\n%s", err, out)
	}
	if out := tailIDs(); strings.Contains(out, `"id":"gen-`) {
		t.Fatalf("after the rollback, weir tail reads the shadow:\n%s", out)
	}
	if out, err := weir(t, "audit", "-nats", url, "-action", "cutover"); err != nil || strings.Count(out, "tester") != 2 {
		t.Fatalf("weir audit -action cutover: %v\n%s", err, out)
	}
}
