package view_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/view"
	"github.com/weirflow/weir/pkg/window"
)

func pane(t *testing.T, key string, version uint64, kind window.PaneKind, value string) []byte {
	t.Helper()
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	b, err := window.Pane{Window: window.Window{Start: start, End: start.Add(10 * time.Second)}, Key: key,
		Info: window.PaneInfo{Index: version - 1}, Version: version, Kind: kind, Value: []byte(value)}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestApplyKeepsTheNewestVersion applies panes out of order and again: only
// a newer version than the one stored is applied; an older or equal one —
// a replay, however late — is rejected; a retraction is kept as the
// window's newest pane, so a replayed older insert stays out, and List
// leaves it out.
func TestApplyKeepsTheNewestVersion(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	ctx := context.Background()
	v, err := view.Ensure(ctx, js, "p", "results", 24*time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		raw  []byte
		want bool
	}{
		{pane(t, "a b", 2, window.Insert, `{"max":2}`), true},
		{pane(t, "a b", 1, window.Insert, `{"max":1}`), false}, // older, arriving after
		{pane(t, "a b", 2, window.Insert, `{"max":2}`), false}, // the same, replayed
		{pane(t, "a b", 3, window.Insert, `{"max":3}`), true},
		{pane(t, "c", 1, window.Insert, `{"max":9}`), true},
		{pane(t, "c", 2, window.Retract, `{"max":9}`), true},
		{pane(t, "c", 1, window.Insert, `{"max":9}`), false}, // behind its retraction
	} {
		got, err := v.Apply(ctx, c.raw)
		if err != nil || got != c.want {
			t.Fatalf("apply %d: %v, %v; want applied %v", i, got, err, c.want)
		}
	}
	es, err := v.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].Pane.Key != "a b" || es[0].Pane.Version != 3 || string(es[0].Pane.Value) != `{"max":3}` {
		t.Fatalf("list: %+v, want key \"a b\" at version 3 alone", es)
	}
	if es[0].Key != "a=20b.1796119200000_1796119210000" {
		t.Errorf("view key %q", es[0].Key)
	}
	c, err := v.Get(ctx, view.Key(window.Pane{Key: "c", Window: es[0].Pane.Window}))
	if err != nil || !c.Retracted() || c.Pane.Version != 2 {
		t.Fatalf("get c: %+v, %v; want its retraction at version 2", c, err)
	}
	if _, err := v.Apply(ctx, []byte(`{"not":"a pane"}`)); err == nil {
		t.Fatal("a record that is not a pane was applied")
	}
}

// TestWatchSeesErasures: a watcher of the view is told of a key's erased
// windows, both those erased before it started and those erased while
// it watches, and its copy of the view then holds what the view holds.
func TestWatchSeesErasures(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v, err := view.Ensure(ctx, js, "p", "results", 24*time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if _, err := v.Apply(ctx, pane(t, k, 1, window.Insert, `{"max":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := v.Erase(ctx, []byte("a")); err != nil || n != 1 {
		t.Fatalf("erase a: %d, %v", n, err)
	}
	entries := make(chan view.Entry, 16)
	go func() {
		_ = v.Watch(ctx, func(e view.Entry) error { entries <- e; return nil })
	}()
	copyOf := map[string]bool{}
	take := func(n int) {
		t.Helper()
		for range n {
			select {
			case e := <-entries:
				if e.Erased {
					delete(copyOf, e.Key)
				} else {
					copyOf[e.Key] = true
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the watch gave nothing more; the copy holds %v", copyOf)
			}
		}
	}
	take(3) // b and c, and a's erasure
	if n, err := v.Erase(ctx, []byte("b")); err != nil || n != 1 {
		t.Fatalf("erase b: %d, %v", n, err)
	}
	take(1)
	es, err := v.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || len(copyOf) != 1 || !copyOf[es[0].Key] {
		t.Fatalf("the watcher's copy holds %v, the view %+v: want c's pane alone in both", copyOf, es)
	}
	raw, err := json.Marshal(view.Entry{Key: "a.1_2", Revision: 7, Erased: true})
	if err != nil || string(raw) != `{"key":"a.1_2","revision":7,"erased":true}` {
		t.Errorf("an erased entry in JSON: %s, %v", raw, err)
	}
}
