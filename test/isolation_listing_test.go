package test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/pkg/stream/streamtest"
)

// TestAServiceCannotHideAnothersManifestsFromTheCollection: the publisher
// service, as its real user, writes keys it may write — its own
// operator's manifest keys, manifest.publish.x<i>.0 — each 16 times (the
// bucket's history) with values of a few MiB, until what it wrote exceeds
// what one batched direct get answers (the server's max_pending, 64 MiB).
// On 1ae9998 jsapi.ListKeys stopped at the first short batch, so every
// listing of manifest.> — the coordinator's collection's — ended inside
// the publisher's keys, and the manifests written since, the dedup
// operator's latest among them, were missing from it: the coordinator
// collected the files they refer to, and the latest checkpoint did not
// restore (an attacker's review, helper-29). A listing now reads until a
// batch comes back empty. The latest checkpoint must still restore, and
// the coordinator must list every manifest of it.
func TestAServiceCannotHideAnothersManifestsFromTheCollection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cr := startControlPlaneRun(t, ctx)
	a := cr.attacker(t, "publisher")
	ajs := a.js(t)
	bucket := checkpoint.BucketName(cr.c.Pipeline)
	size := min(int(a.nc.MaxPayload())-64<<10, 4<<20)
	value := make([]byte, size)
	for i := range value {
		value[i] = ' '
	}
	var written int
	for i := 0; written < 70<<20; i++ {
		for rev := 0; rev < 16 && written < 70<<20; rev++ {
			// Key n 0: the collection deletes it (not JSON), and its
			// history stays.
			if _, err := ajs.Publish(ctx, fmt.Sprintf("$KV.%s.manifest.publish.x%d.0", bucket, i), value); err != nil {
				t.Fatalf("the publisher may write its own manifest keys: %v", err)
			}
			written += size
		}
	}
	t.Logf("the publisher wrote %d MiB under its own manifest keys", written>>20)
	before, _, err := cr.store.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	streamtest.CheckFor(t, 60*time.Second, func() error {
		l, _, err := cr.store.Latest(ctx)
		if err != nil || l.Checkpoint < before.Checkpoint+3 {
			return fmt.Errorf("latest is checkpoint %d (%v), want it past %d", l.Checkpoint, err, before.Checkpoint+3)
		}
		return nil
	})
	co := cr.js(t, access.RoleCoordinator)
	var failures []string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		l, _, err := cr.store.Latest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := jsapi.ListKeys(ctx, co, bucket, "manifest.>")
		if err != nil {
			t.Fatal(err)
		}
		for inst, key := range l.Manifests {
			if !slices.Contains(keys, key) {
				failures = append(failures, fmt.Sprintf("checkpoint %d: the coordinator's listing of manifest.> (%d keys) misses %s's %s", l.Checkpoint, len(keys), inst, key))
			}
			m, err := cr.store.Manifest(ctx, key)
			if err != nil {
				continue // collected meanwhile, a checkpoint later
			}
			if err := cr.store.Download(ctx, m, t.TempDir()); err != nil {
				failures = append(failures, fmt.Sprintf("checkpoint %d, the latest: %s does not restore: %v", l.Checkpoint, inst, err))
			}
		}
	}
	for i, f := range failures {
		if i < 6 {
			t.Error(f)
		}
	}
	if len(failures) > 0 {
		t.Errorf("%d failures", len(failures))
	}
}

// TestAServiceCannotRetargetTheAuditListing: on 1ae9998 every service
// could make consumers of the audit stream, so it could change any of
// them — the administrator's `weir audit` listing's (audit.List, an
// ordered consumer) included: the dedup service, as its real user, found
// the administrator's consumer and filtered it away from every record, or
// deleted it (helper-29). A service now only looks the trail up and
// appends to it (access: lookup).
func TestAServiceCannotRetargetTheAuditListing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := splitDedup(t)
	r := startAccessRun(t, c)
	admin := r.js(t, access.RoleAdmin)
	if _, err := audit.Append(ctx, admin, c.Pipeline, audit.Record{Actor: "test", Action: audit.ActionRestore, Target: c.Pipeline}); err != nil {
		t.Fatal(err)
	}
	s := audit.StreamName(c.Pipeline)
	st, err := admin.Stream(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	// What audit.List makes.
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"weir." + c.Pipeline + ".audit.>"}})
	if err != nil {
		t.Fatal(err)
	}
	name := cons.CachedInfo().Name
	a := r.attacker(t, "dedup")
	ajs := a.js(t)
	info, err := ajs.Consumer(ctx, s, name)
	if err == nil {
		cfg := info.CachedInfo().Config
		cfg.FilterSubjects, cfg.FilterSubject = nil, "weir."+c.Pipeline+".audit.nothing"
		if _, err := ajs.UpdateConsumer(ctx, s, cfg); err == nil {
			t.Errorf("the dedup service changed the administrator's audit listing's consumer %s", name)
		}
	}
	if m, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second)); err != nil {
		t.Errorf("the administrator's audit listing read no record (%v)", err)
	} else {
		_ = m
	}
	a.refused(t, "delete the administrator's audit consumer", "$JS.API.CONSUMER.DELETE."+s+"."+name, nil)
}
