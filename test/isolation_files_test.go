package test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/dedup"
)

// filesBucket is the object bucket holding the files of the manifest
// stored under key, as its raw JSON says: the bucket it names, or the
// pipeline's shared one when it names none.
func filesBucket(ctx context.Context, t *testing.T, js jetstream.JetStream, pipeline, key string) string {
	t.Helper()
	kv, err := js.KeyValue(ctx, checkpoint.BucketName(pipeline))
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Bucket string `json:"bucket"`
	}
	if err := json.Unmarshal(e.Value(), &m); err != nil {
		t.Fatal(err)
	}
	if m.Bucket == "" {
		return checkpoint.BucketName(pipeline)
	}
	return m.Bucket
}

// TestAServiceCannotDestroyAnotherOperatorsSnapshots: the dedup
// pipeline, split in two services on the credentials weir auth derives,
// completes a checkpoint and stops. The dedup service's real user then
// attacks the publisher's snapshot files in the bucket that holds them:
// a metadata message carrying Nats-Rollup: all — which, stored, purges
// every file of the bucket — on a file's subject and on a chunk's, a file
// marked deleted, a purge of the bucket and a message deleted from it.
// The server refuses each; the publisher's snapshot verifies and
// downloads whole, and the pipeline, started again on new hosts, restores
// it: every event reaches the sink once. (On e09ed26 every operator's
// files were in one bucket any of the pipeline's services could roll up.)
func TestAServiceCannotDestroyAnotherOperatorsSnapshots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := splitDedup(t)
	r := startAccessRun(t, c)
	admin := r.js(t, access.RoleAdmin)
	cfg := genConfig(c, 2000)
	want, future := expected(t, cfg)
	first := cfg
	first.Count = 1000
	publish(t, r.js(t, access.RoleProducer), first)
	stop := r.runPipeline(t, dedup.Factories(), t.TempDir())
	store, err := checkpoint.Open(ctx, admin, c.Pipeline, 0)
	if err != nil {
		t.Fatal(err)
	}
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if l, _, err := store.Latest(ctx); err != nil || len(l.Manifests) != 2 {
			return fmt.Errorf("no checkpoint of both operators complete yet (%v)", err)
		}
		return nil
	})
	stop()
	latest, _, err := store.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// An instance falling back to an older checkpoint verifies every
	// operator's files: the dedup service may look the publisher's up.
	own, err := checkpoint.Open(ctx, r.js(t, "dedup"), c.Pipeline, 0)
	if err != nil {
		t.Fatal(err)
	}
	vctx, vcancel := context.WithTimeout(ctx, 30*time.Second) // a denied request is never answered
	defer vcancel()
	if err := own.Verify(vctx, checkpoint.Snapshot{Checkpoint: latest.Checkpoint, Manifests: latest.Manifests}); err != nil {
		t.Fatalf("the dedup service verifies checkpoint %d: %v", latest.Checkpoint, err)
	}
	r.checkNothingDenied(t)
	key := latest.Manifests["publish/0"]
	m, err := store.Manifest(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) == 0 {
		t.Fatalf("the publisher's snapshot %s has no files: the attack would destroy nothing", key)
	}
	bucket := filesBucket(ctx, t, admin, c.Pipeline, key)

	a := r.attacker(t, "dedup")
	file := "$O." + bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(m.Files[0].Object))
	rollup := func(subject string) *nats.Msg {
		msg := nats.NewMsg(subject)
		msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
		msg.Data = []byte(`{"name":"forged","bucket":"` + bucket + `","deleted":true}`)
		return msg
	}
	a.refusedMsg(t, "roll the publisher's files up on a file's metadata", rollup(file))
	a.refusedMsg(t, "roll the publisher's files up on a chunk", rollup("$O."+bucket+".C.forged"))
	deleted, _ := json.Marshal(map[string]any{"name": m.Files[0].Object, "bucket": bucket, "deleted": true})
	a.refused(t, "mark a publisher's file deleted", file, deleted)
	a.refused(t, "purge the publisher's files", "$JS.API.STREAM.PURGE.OBJ_"+bucket, []byte(`{}`))
	a.refused(t, "delete a message of the publisher's files", "$JS.API.STREAM.MSG.DELETE.OBJ_"+bucket, []byte(`{"seq":1}`))

	if err := store.Verify(ctx, checkpoint.Snapshot{Checkpoint: latest.Checkpoint, Manifests: latest.Manifests}); err != nil {
		t.Errorf("checkpoint %d after the attacks: %v", latest.Checkpoint, err)
	}
	if err := store.Download(ctx, m, filepath.Join(t.TempDir(), "publish")); err != nil {
		t.Errorf("the publisher's snapshot after the attacks: %v", err)
	}
	if t.Failed() {
		t.FailNow()
	}
	rest := cfg
	rest.Start = 1000
	publish(t, r.js(t, access.RoleProducer), rest)
	defer r.runPipeline(t, dedup.Factories(), t.TempDir())()
	streamtest.CheckFor(t, 90*time.Second, func() error { return checkSink(ctx, admin, c, want, future) })
	t.Logf("5 attacks on the publisher's files in %s refused; checkpoint %d restored on new hosts; %d events once at the sink",
		bucket, latest.Checkpoint, len(want))
}
