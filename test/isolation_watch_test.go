package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/erasure"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/dedup"
)

// TestAServiceCannotDeliverIntoAnothersWatch: the dedup pipeline, split
// in two services, with a deletion policy (erasure-wins), runs on the
// credentials weir auth derives. The administrator alone writes the
// erasure registry and the assignment; every instance watches them. A
// push consumer's deliver subject is listed to whoever may list the
// stream's consumers and is checked against no permission, and a push
// watcher takes whatever arrives there with a JetStream reply as an entry
// of its bucket (found by an attacker's review, helper-26): as the dedup
// service, a forged erasure request for key "victim", stored under a key
// it may write (its own fence) and delivered by a consumer of its own
// into the publisher's registry watch, made the publisher drop every
// later event of that key — silently. The watches pull instead: no
// consumer of the registry or the checkpoint bucket discloses a deliver
// subject, and an event of key "victim" sent afterwards reaches the sink
// as the bystander's does. Nor may it publish into the inbox of the
// coordinator or the administrator, whose asking it answers.
func TestAServiceCannotDeliverIntoAnothersWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, r, admin, send := startErasableRun(t, ctx)
	atSink := func(ids ...string) error {
		got, _, err := sinkCounts(ctx, admin, c)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if got[id] == 0 {
				return fmt.Errorf("the sink holds no %s (it holds %v)", id, got)
			}
		}
		return nil
	}
	defer r.runPipeline(t, dedup.Factories(), t.TempDir())()
	send("a-0", "victim")
	send("b-0", "bystander")
	streamtest.CheckFor(t, 60*time.Second, func() error { return atSink("a-0", "b-0") })

	a := r.attacker(t, "dedup")
	ajs := a.js(t)
	// The watches of the registry and of the checkpoint bucket, as the
	// administrator sees their consumers: none may have a deliver
	// subject; and the dedup service may not list them.
	registry := "KV_" + erasure.Bucket(c.Pipeline)
	victimInbox := access.Inbox(access.UserName(c.Pipeline, "publisher"))
	var deliver string
	for _, name := range []string{registry, "KV_" + checkpoint.BucketName(c.Pipeline)} {
		st, err := admin.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		for ci := range st.ListConsumers(ctx).Info() {
			if ci.Config.DeliverSubject == "" {
				continue
			}
			t.Errorf("a consumer of %s has the deliver subject %s", name, ci.Config.DeliverSubject)
			if name == registry && strings.HasPrefix(ci.Config.DeliverSubject, victimInbox+".") && ci.Delivered.Consumer == 0 {
				deliver = ci.Config.DeliverSubject
			}
		}
		a.refused(t, "list the consumers of "+name, "$JS.API.CONSUMER.LIST."+name, []byte(`{}`))
	}
	if deliver != "" {
		// What the dedup service can then do, as it did before the
		// watches pulled.
		t.Logf("the publisher's registry watch delivers to %s", deliver)
		forged, _ := json.Marshal(erasure.Request{Key: []byte("victim"), At: time.Now(), Actor: "dpo", Marks: map[string]uint64{}})
		own := "$KV." + checkpoint.BucketName(c.Pipeline) + ".fence.dedup.9"
		if _, err := ajs.Publish(ctx, own, forged); err != nil {
			t.Fatalf("the dedup service writes its own fence key: %v", err)
		}
		req, _ := json.Marshal(map[string]any{"stream_name": "KV_" + checkpoint.BucketName(c.Pipeline), "config": map[string]any{
			"name": "eraser", "deliver_subject": deliver, "filter_subject": own, "ack_policy": "none", "deliver_policy": "last"}})
		resp, err := a.nc.Request("$JS.API.CONSUMER.CREATE.KV_"+checkpoint.BucketName(c.Pipeline)+".eraser."+own, req, 5*time.Second)
		if err != nil || strings.Contains(string(resp.Data), `"error"`) {
			t.Fatalf("the dedup service's consumer: %v %s", err, resp.Data)
		}
		time.Sleep(2 * time.Second)
	}
	send("a-1", "victim")
	send("b-1", "bystander")
	streamtest.CheckFor(t, 60*time.Second, func() error { return atSink("b-1") })
	streamtest.CheckFor(t, 10*time.Second, func() error { return atSink("a-1") })

	// A pull's deliveries come to its process's inbox: the dedup service,
	// which answers the coordinator's and the administrator's asking, may
	// publish where they hear answers and not into their inboxes, where
	// it could have guessed a pull's reply subject.
	for _, asker := range []string{access.RoleCoordinator, access.RoleAdmin} {
		a.refused(t, "publish into the "+asker+"'s inbox", access.Inbox(access.UserName(c.Pipeline, asker))+".guess", []byte("forged"))
	}
}

// TestAServiceCannotRetargetAnothersWatch: the dedup pipeline, split in
// two services, with a deletion policy, runs on the credentials weir auth
// derives. A grant to make consumers of a stream is a grant to change any
// consumer of it — a consumer's name is one subject token — and every
// service read the erasure registry that way: the publisher service, as
// its real user, listed the registry's consumers — both services' watches
// — and updated each with a filter that matches no key; the watches went
// on, heartbeats and all, and never heard of an erasure again (an
// attacker's review, helper-28; on 3822026 the event of the key erased
// afterwards reached the sink). Watches now read by direct get and make
// no consumer (jsapi.WatchKV), and no service may make or change a
// consumer of the registry or the checkpoint bucket: nothing to list,
// nothing to change, and the erasure holds.
func TestAServiceCannotRetargetAnothersWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, r, admin, send := startErasableRun(t, ctx)
	defer r.runPipeline(t, dedup.Factories(), t.TempDir())()
	send("a-0", "first")
	send("b-0", "victim")
	streamtest.CheckFor(t, 60*time.Second, func() error {
		got, _, err := sinkCounts(ctx, admin, c)
		if err != nil || got["a-0"] == 0 || got["b-0"] == 0 {
			return fmt.Errorf("the sink holds %v (%v)", got, err)
		}
		return nil
	})

	reg, err := erasure.Open(ctx, admin, c.Pipeline, c.Deletion.Within.D())
	if err != nil {
		t.Fatal(err)
	}
	// erase registers an erasure of key reaching the next thousand
	// ingress records (erasure-wins drops them), sends one of key and one
	// of a bystander, and reports whether the key's reached the sink.
	erase := func(key, id, bystander string) bool {
		t.Helper()
		st, err := admin.Stream(ctx, c.Ingress.Stream)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := reg.Put(ctx, erasure.Request{Key: []byte(key), At: time.Now(), Actor: "tester",
			Marks: map[string]uint64{c.Ingress.Stream: st.CachedInfo().State.LastSeq + 1000}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second) // the watches hear of it
		send(id, key)
		send(bystander, "bystander")
		streamtest.CheckFor(t, 60*time.Second, func() error {
			got, _, err := sinkCounts(ctx, admin, c)
			if err != nil || got[bystander] == 0 {
				return fmt.Errorf("the sink holds no %s (%v)", bystander, err)
			}
			return nil
		})
		time.Sleep(5 * time.Second)
		got, _, err := sinkCounts(ctx, admin, c)
		if err != nil {
			t.Fatal(err)
		}
		return got[id] > 0
	}
	// Untouched, an erased key's later records are dropped.
	if erase("first", "a-1", "c-1") {
		t.Fatal("an event of an erased key reached the sink with nobody attacking")
	}

	// The publisher service, as its real user, updates each of the
	// registry's consumers — the watches of both services, as they were —
	// to a filter no key matches.
	a := r.attacker(t, "publisher")
	ajs := a.js(t)
	registry := "KV_" + erasure.Bucket(c.Pipeline)
	seen, err := admin.Stream(ctx, registry)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ajs.Stream(ctx, registry)
	if err != nil {
		t.Fatal(err)
	}
	retargeted := 0
	for ci := range seen.ListConsumers(ctx).Info() {
		cfg := ci.Config
		t.Logf("consumer %s of %s, filter %q %v", ci.Name, registry, cfg.FilterSubject, cfg.FilterSubjects)
		cfg.FilterSubject, cfg.FilterSubjects = "$KV."+erasure.Bucket(c.Pipeline)+".nobody", nil
		uctx, ucancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := st.UpdateConsumer(uctx, cfg)
		ucancel()
		if err != nil {
			t.Logf("update of %s refused: %v", ci.Name, err)
			continue
		}
		retargeted++
	}
	for _, kv := range []string{registry, "KV_" + checkpoint.BucketName(c.Pipeline)} {
		a.refused(t, "make or change a consumer of "+kv, "$JS.API.CONSUMER.CREATE."+kv+".x.$KV.x", []byte(`{}`))
	}
	if retargeted > 0 {
		t.Errorf("the publisher service changed the filter of %d watches of the erasure registry, the dedup service's among them", retargeted)
	}
	if erase("victim", "b-1", "c-2") {
		t.Errorf("an event of key %q, erased after the publisher service retargeted the registry's watches, reached the sink", "victim")
	}
}

// erasableSplitDedup is the dedup pipeline split in two services (dedup
// reads the ingress, publisher the deduped edge) with a deletion policy,
// erasure-wins.
func erasableSplitDedup(t *testing.T) *contracts.Contract {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "contracts", "nexmark-dedup.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	split := "  - id: publish\n    service: dedup\n"
	if !strings.Contains(string(src), split) {
		t.Fatalf("nexmark-dedup.yaml has no %q", split)
	}
	text := strings.Replace(string(src), split, "  - id: publish\n    service: publisher\n", 1) + "\ndeletion:\n  within: 48h\n  replay: erasure-wins\n"
	file := filepath.Join(t.TempDir(), "dedup-erasable.yaml")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := contracts.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startErasableRun deploys erasableSplitDedup, provisioned, and returns
// it, the administrator's JetStream and a send of an event of id and key
// as the producer.
func startErasableRun(t *testing.T, ctx context.Context) (*contracts.Contract, *accessRun, jetstream.JetStream, func(id, key string)) {
	t.Helper()
	c := erasableSplitDedup(t)
	r := startAccessRun(t, c)
	producer := r.js(t, access.RoleProducer)
	send := func(id, key string) {
		t.Helper()
		body := fmt.Sprintf(`{"id":%q,"key":%q,"ts":%d,"type":"bid"}`, id, key, time.Now().Add(-time.Minute).UnixMilli())
		if _, err := producer.Publish(ctx, c.Ingress.Subject(0), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	return c, r, r.js(t, access.RoleAdmin), send
}
