package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/pkg/view"
	"github.com/weirflow/weir/pkg/window"
)

// TestQueriesAsViews runs q7 (upserts) and q11 (retractions) with their
// results materialized as versioned views (sink.effect versioned-upsert)
// over the queries' test corpus, and compares each view with the reference
// evaluator's panes: per key and window, the view holds the newest pane —
// its value, or its retraction — and nothing else.
func TestQueriesAsViews(t *testing.T) {
	for _, name := range []string{"q7", "q11"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			q := queries[name]
			srv := natstest.Run(t)
			js := srv.JetStream(t)
			c, err := contracts.Shipped(q.contract)
			if err != nil {
				t.Fatal(err)
			}
			c.Sink.Effect = contracts.EffectVersionedUpsert
			if ps := c.Lint(); len(ps) > 0 {
				t.Fatalf("%s as a view: %v", q.contract, ps)
			}
			script := corpus(t, js, c, q.input)
			spec, err := window.FromContract(q.shape, c.Emission)
			if err != nil {
				t.Fatal(err)
			}
			panes, _, err := window.Evaluate(spec, q.agg, func(r record.Record) []byte { return r.Key }, script)
			if err != nil {
				t.Fatal(err)
			}
			want := newestPanes(t, panes)
			runService(t, srv.ClientURL(), c, q.service, q.factories)

			ctx := context.Background()
			result := c.Operators[len(c.Operators)-1].Output
			var v *view.View
			streamtest.CheckFor(t, 90*time.Second, func() error {
				if v == nil {
					if v, err = view.Open(ctx, js, c.Pipeline, result); err != nil {
						return err
					}
				}
				return sameView(ctx, v, want)
			})
			live, retracted := 0, 0
			for _, p := range want {
				if p.Kind == window.Retract {
					retracted++
				} else {
					live++
				}
			}
			t.Logf("%s: the view holds the reference's newest pane of %d windows, %d of them retracted", name, live+retracted, retracted)
		})
	}
}

// newestPanes keeps, per view key, the reference's pane of the highest
// version.
func newestPanes(t *testing.T, rs []record.Record) map[string]window.Pane {
	t.Helper()
	out := map[string]window.Pane{}
	for _, r := range rs {
		p, err := window.DecodePane(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if old, ok := out[view.Key(p)]; !ok || p.Version > old.Version {
			out[view.Key(p)] = p
		}
	}
	if len(out) == 0 {
		t.Fatal("the reference emitted no pane")
	}
	return out
}

// sameView compares the view with the newest panes: List holds every
// newest insert, Get shows every newest retraction.
func sameView(ctx context.Context, v *view.View, want map[string]window.Pane) error {
	es, err := v.List(ctx)
	if err != nil {
		return err
	}
	listed := map[string]bool{}
	for _, e := range es {
		listed[e.Key] = true
		w, ok := want[e.Key]
		if !ok || w.Kind == window.Retract {
			return fmt.Errorf("view holds %s (version %d), which the reference retracted or never emitted", e.Key, e.Pane.Version)
		}
		if e.Pane.Version != w.Version || string(e.Pane.Value) != string(w.Value) {
			return fmt.Errorf("view holds %s at version %d %s, the reference's newest is version %d %s", e.Key, e.Pane.Version, e.Pane.Value, w.Version, w.Value)
		}
	}
	for k, w := range want {
		if w.Kind != window.Retract {
			if !listed[k] {
				return fmt.Errorf("view lacks %s (version %d of %d windows)", k, w.Version, len(want))
			}
			continue
		}
		e, err := v.Get(ctx, k)
		if err != nil || !e.Retracted() || e.Pane.Version != w.Version {
			return fmt.Errorf("view's %s: %+v, %v; want its retraction at version %d", k, e.Pane, err, w.Version)
		}
	}
	return nil
}
