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
	r := startAccessRun(t, c)
	admin := r.js(t, access.RoleAdmin)
	producer := r.js(t, access.RoleProducer)
	send := func(id, key string) {
		t.Helper()
		body := fmt.Sprintf(`{"id":%q,"key":%q,"ts":%d,"type":"bid"}`, id, key, time.Now().Add(-time.Minute).UnixMilli())
		if _, err := producer.Publish(ctx, c.Ingress.Subject(0), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
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
	ajs, err := jetstream.New(a.nc)
	if err != nil {
		t.Fatal(err)
	}
	// Every watch of the registry and of the checkpoint bucket, as the
	// consumer lists show them to the dedup service: both services watch
	// the registry, so it has two consumers at least.
	registry := "KV_" + erasure.Bucket(c.Pipeline)
	victimInbox := access.Inbox(access.UserName(c.Pipeline, "publisher"))
	var deliver string
	var delivered uint64
	streamtest.CheckFor(t, 30*time.Second, func() error {
		deliver = ""
		n := 0
		for _, name := range []string{registry, "KV_" + checkpoint.BucketName(c.Pipeline)} {
			st, err := ajs.Stream(ctx, name)
			if err != nil {
				return err
			}
			for ci := range st.ListConsumers(ctx).Info() {
				if name == registry {
					n++
				}
				if ci.Config.DeliverSubject != "" {
					t.Errorf("a consumer of %s shows the dedup service its deliver subject %s", name, ci.Config.DeliverSubject)
				}
				if name == registry && strings.HasPrefix(ci.Config.DeliverSubject, victimInbox+".") {
					deliver, delivered = ci.Config.DeliverSubject, ci.Delivered.Consumer
				}
			}
		}
		if n < 2 {
			return fmt.Errorf("%d watches of %s, want both services'", n, registry)
		}
		return nil
	})
	if deliver != "" {
		// What the dedup service can then do, as it did before the
		// watches pulled.
		t.Logf("the publisher's registry watch delivers to %s, %d delivered so far", deliver, delivered)
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
