package test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/dedup"
)

// TestAServiceCannotStopTheCollection: the publisher service, as its real
// user, writes one key it may write — manifest.publish.x.99999999999, a
// checkpoint never collectable, with a value that is not a manifest.
// On 69a8536 checkpoint.Collect returned on the first manifest it could
// not read, so from then on no collection got past it: the manifests of
// every operator and every snapshot file of every operator stayed for
// ever (the coordinator only logged a warning; helper-30). It now keeps
// the files of the buckets such a manifest may name — its own
// operator's, and the shared one — and collects the rest: the dedup
// operator's old manifests must still be collected.
func TestAServiceCannotStopTheCollection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cr := startControlPlaneRun(t, ctx)
	a := cr.attacker(t, "publisher")
	ajs := a.js(t)
	bucket := checkpoint.BucketName(cr.c.Pipeline)
	if _, err := ajs.Publish(ctx, "$KV."+bucket+".manifest.publish.x.99999999999", []byte("not a manifest")); err != nil {
		t.Fatalf("the publisher may write its own manifest keys: %v", err)
	}
	before, _, err := cr.store.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	streamtest.CheckFor(t, 90*time.Second, func() error {
		l, _, err := cr.store.Latest(ctx)
		if err != nil || l.Checkpoint < before.Checkpoint+8 {
			return fmt.Errorf("latest is checkpoint %d (%v), want it past %d", l.Checkpoint, err, before.Checkpoint+8)
		}
		return nil
	})
	l, _, err := cr.store.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := jsapi.ListKeys(ctx, cr.js(t, access.RoleAdmin), bucket, "manifest.dedup.>")
	if err != nil {
		t.Fatal(err)
	}
	var stale []string
	for _, k := range keys {
		n, err := strconv.ParseUint(k[strings.LastIndexByte(k, '.')+1:], 10, 64)
		// Three retained, one in progress, and slack for a collection
		// that runs after the next completes.
		if err == nil && n+6 < l.Checkpoint {
			stale = append(stale, k)
		}
	}
	if len(stale) > 0 {
		t.Errorf("latest is checkpoint %d, and %d of the dedup operator's manifests of collectable checkpoints are still there (e.g. %s): one key the publisher wrote stopped the coordinator's collection",
			l.Checkpoint, len(stale), stale[0])
	}
}

// TestAServiceCannotRegisterAnothersInstances: the publisher service
// writes registrations and a trimmed report under its own keys
// (instance.publish.*, trimmed.publish.*) whose values name the dedup
// operator. On 69a8536 checkpoint.Store.Instances and TrimmedReports
// indexed what they read by the value's operator and instance, never the
// key's (helper-30): the coordinator then expected an acknowledgement of
// dedup/9 (checkpoints timed out blaming dedup), a fresh dedup/0 took
// itself as having run, and `weir recover` showed dedup/0 refusing to
// start. A value naming another than its key is now ignored.
func TestAServiceCannotRegisterAnothersInstances(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cr := startControlPlaneRun(t, ctx)
	a := cr.attacker(t, "publisher")
	ajs := a.js(t)
	kv := "$KV." + checkpoint.BucketName(cr.c.Pipeline) + "."
	if _, err := ajs.Publish(ctx, kv+"instance.publish.x", []byte(`{"operator":"dedup","instance":"9"}`)); err != nil {
		t.Fatalf("the publisher may register its own instances: %v", err)
	}
	if _, err := ajs.Publish(ctx, kv+"trimmed.publish.x", []byte(`{"operator":"dedup","instance":"0","at":"2026-01-01T00:00:00Z","inputs":[{"input":"ingress","stream":"`+cr.c.Ingress.StreamNames()[0]+`","partition":0,"committed":0,"first":1}]}`)); err != nil {
		t.Fatalf("the publisher may report its own trimmed inputs: %v", err)
	}
	co, err := checkpoint.Open(ctx, cr.js(t, access.RoleCoordinator), cr.c.Pipeline, 0)
	if err != nil {
		t.Fatal(err)
	}
	ins, err := co.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ins["dedup/9"]; ok {
		t.Errorf("the coordinator's registry lists dedup/9, which only the publisher registered (instance.publish.x)")
	}
	reports, err := co.TrimmedReports(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := reports["dedup/0"]; ok {
		t.Errorf("the trimmed reports list dedup/0 refusing to start, which only the publisher reported (trimmed.publish.x)")
	}
}

// TestAServiceCannotStopOthersWithABrokenFence: a fence a reader cannot
// decode stops it — a writer without its fence would have its older
// generation's frames read as current — and every reader used to read
// every operator's fences: the publisher service, writing a broken fence
// under its own key, stopped the dedup service's start though dedup reads
// none of its frames (helper-30). A reader now reads the fences of its
// input's writer alone: the pipeline starts and every event reaches the
// sink once.
func TestAServiceCannotStopOthersWithABrokenFence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := splitDedup(t)
	r := startAccessRun(t, c)
	attacker := r.js(t, "publisher")
	if _, err := attacker.Publish(ctx, "$KV."+checkpoint.BucketName(c.Pipeline)+".fence.publish.x", []byte("not a fence")); err != nil {
		t.Fatalf("the publisher service writes its own fence key: %v", err)
	}
	cfg := genConfig(c, 500)
	want, future := expected(t, cfg)
	publish(t, r.js(t, access.RoleProducer), cfg)
	defer r.runPipeline(t, dedup.Factories(), t.TempDir())()
	streamtest.CheckFor(t, 60*time.Second, func() error { return checkSink(ctx, r.js(t, access.RoleAdmin), c, want, future) })
}
