package test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/dedup"
)

// TestForgedCheckpointStopsTheInstance runs the dedup pipeline with its
// snapshots sealed, each process with the credentials weir auth derives,
// until a few checkpoints are complete. Then, as the dedup service's NATS
// user — what a process holds whose credentials leaked without the
// checkpoint key — it rewrites the latest manifest of dedup/0, computing
// its checksum anew: as an earlier checkpoint's manifest (a rollback of
// the instance's state behind the pipeline's back), and with its MAC
// dropped (as an unsealed snapshot or an earlier build's). A new host with
// the keys restores neither: it stops saying why, and does not fall back.
func TestForgedCheckpointStopsTheInstance(t *testing.T) {
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
	op, ok := c.Operator("dedup")
	if !ok {
		t.Fatal("no dedup operator in nexmark-dedup")
	}
	r := startAccessRun(t, c)
	cfg := genConfig(c, 2000)
	want, _ := expected(t, cfg)
	publish(t, r.js(t, access.RoleProducer), cfg)
	stop := runAs(t, r.srv.ClientURL(), c, t.TempDir(), dedup.Factories(), keys, func(role string) natsconn.Auth { return r.users[role] })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := r.js(t, access.RoleAdmin)
	streamtest.CheckFor(t, 60*time.Second, func() error { return checkSink(ctx, admin, c, want, -1) })
	store, err := checkpoint.Open(ctx, admin, c.Pipeline, 0)
	if err != nil {
		t.Fatal(err)
	}
	var latest checkpoint.Latest
	streamtest.CheckFor(t, 30*time.Second, func() error {
		l, _, err := store.Latest(ctx)
		if err != nil || l.Checkpoint < 3 {
			return fmt.Errorf("fewer than 3 checkpoints complete (%v)", err)
		}
		latest = l
		return nil
	})
	stop()

	attacker := r.js(t, op.Service)
	kv, err := attacker.KeyValue(ctx, checkpoint.BucketName(c.Pipeline))
	if err != nil {
		t.Fatal(err)
	}
	target := latest.Manifests["dedup/0"]
	var earlier []uint64
	names, err := jsapi.ListKeys(ctx, attacker, checkpoint.BucketName(c.Pipeline), "manifest.dedup.0.>")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range names {
		n, err := strconv.ParseUint(key[strings.LastIndexByte(key, '.')+1:], 10, 64)
		if err == nil && key != target && n < latest.Checkpoint {
			earlier = append(earlier, n)
		}
	}
	if len(earlier) == 0 {
		t.Fatalf("no manifest of dedup/0 before %s to roll back to", target)
	}
	sort.Slice(earlier, func(i, j int) bool { return earlier[i] < earlier[j] })
	orig, err := kv.Get(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	// forge stores under target the manifest from, its members changed
	// by edit and its checksum, which needs no key, computed anew.
	forge := func(from string, edit func(map[string]json.RawMessage)) {
		t.Helper()
		e, err := kv.Get(ctx, from)
		if err != nil {
			t.Fatal(err)
		}
		var members map[string]json.RawMessage
		if err := json.Unmarshal(e.Value(), &members); err != nil {
			t.Fatal(err)
		}
		delete(members, "checksum")
		if edit != nil {
			edit(members)
		}
		b, err := json.Marshal(members)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		members["checksum"], _ = json.Marshal(hex.EncodeToString(sum[:]))
		if b, err = json.Marshal(members); err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, target, b); err != nil {
			t.Fatalf("the dedup service's user writes %s: %v", target, err)
		}
	}
	for _, v := range []struct {
		what string
		from string
		edit func(map[string]json.RawMessage)
		want error
	}{
		{"checkpoint " + strconv.FormatUint(earlier[0], 10) + "'s manifest in its place", checkpoint.ManifestKey("dedup", "0", earlier[0]), nil, checkpoint.ErrForged},
		{"its MAC dropped", target, func(members map[string]json.RawMessage) {
			delete(members, "mac")
			delete(members, "mac_key")
		}, checkpoint.ErrUnsealed},
	} {
		forge(v.from, v.edit)
		o, err := dedup.Factories()["dedup"](c)
		if err != nil {
			t.Fatal(err)
		}
		rt, err := stream.New(stream.Config{NATSURL: r.srv.ClientURL(), Auth: r.users[op.Service], CheckpointKeys: keys, Contract: c,
			DataDir: t.TempDir(), Operator: "dedup", Instance: "0", TickInterval: 20 * time.Millisecond, Logger: testLogger(t)}, o)
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stopRun := context.WithTimeout(ctx, 20*time.Second)
		err = rt.Run(runCtx)
		timedOut := runCtx.Err() != nil
		stopRun()
		if !errors.Is(err, v.want) || errors.Is(err, checkpoint.ErrCorrupt) || timedOut {
			t.Errorf("%s %s: the new host %v, want it to stop with %v", target, v.what, err, v.want)
		} else {
			t.Logf("%s %s: %v", target, v.what, err)
		}
		if _, err := kv.Put(ctx, target, orig.Value()); err != nil {
			t.Fatal(err)
		}
	}
	falls, err := audit.List(ctx, admin, c.Pipeline, audit.ActionFallback)
	if err != nil {
		t.Fatal(err)
	}
	if len(falls) > 0 {
		t.Fatalf("a forged checkpoint made the pipeline fall back: %+v", falls[0])
	}
}
