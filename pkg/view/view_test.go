package view_test

import (
	"context"
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
