package test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/erasure"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/pkg/view"
	q11 "github.com/weirflow/weir/services/nexmark-q11"
)

// TestAnErasureRunsWithItsOwnCredentials runs q11 into a view with a
// deletion policy, each process with the credentials weir auth derives:
// the services watch the erasure registry, the administrator registers an
// erasure of a bidder and hears the session operator's report, the
// bidder's windows leave the view, and the server denies nothing.
func TestAnErasureRunsWithItsOwnCredentials(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "contracts", "nexmark-q11.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "q11-erasable.yaml")
	text := strings.Replace(string(src), "effect: at-least-once", "effect: versioned-upsert", 1) + "\ndeletion:\n  within: 48h\n  replay: erasure-wins\n"
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := contracts.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	r := startAccessRun(t, c)
	admin := r.js(t, access.RoleAdmin)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	publish(t, r.js(t, access.RoleProducer), corpusConfig(c))
	corpusScript(t, r.js(t, access.RoleProducer), c, corpusConfig(c), queries["q11"].input)
	defer r.runPipeline(t, q11.Factories(), t.TempDir())()

	var v *view.View
	var bidder string
	streamtest.CheckFor(t, 90*time.Second, func() error {
		if v == nil {
			if v, err = view.Open(ctx, admin, c.Pipeline, "results"); err != nil {
				return err
			}
		}
		es, err := v.List(ctx)
		if err != nil || len(es) == 0 {
			return fmt.Errorf("the view holds %d windows (%v)", len(es), err)
		}
		bidder, _, _ = strings.Cut(es[0].Key, ".")
		return nil
	})

	reports := make(chan erasure.Report, 8)
	sub, err := admin.Conn().Subscribe(erasure.ReportsSubject(c.Pipeline), func(m *nats.Msg) {
		if rep, err := erasure.ParseReport(c.Pipeline, m.Subject, m.Data); err == nil {
			reports <- rep
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	reg, err := erasure.Open(ctx, admin, c.Pipeline, c.Deletion.Within.D())
	if err != nil {
		t.Fatal(err)
	}
	st, err := admin.Stream(ctx, c.Ingress.Stream)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := reg.Put(ctx, erasure.Request{Key: []byte(bidder), At: time.Now(), Actor: "tester",
		Marks: map[string]uint64{c.Ingress.Stream: st.CachedInfo().State.LastSeq}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case rep := <-reports:
		if rep.Rev != rev || rep.Operator != "q11-sessions" || rep.ViewKeys == 0 {
			t.Errorf("report %+v, want q11-sessions' of revision %d with the bidder's windows purged", rep, rev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no instance reported the erasure")
	}
	es, err := v.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if strings.HasPrefix(e.Key, bidder+".") {
			t.Errorf("the view still holds %s", e.Key)
		}
	}
	r.checkNothingDenied(t)
}
