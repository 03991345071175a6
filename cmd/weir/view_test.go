package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/view"
	"github.com/weirflow/weir/pkg/window"
)

// TestViewGetAndList reads a versioned view with `weir view`: list prints
// the live windows' newest panes, get any key's — a retraction too — and a
// pipeline without a view is told so.
func TestViewGetAndList(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	ctx := context.Background()
	v, err := view.Ensure(ctx, js, "nexmark-q7", "results", 24*time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	w := window.Window{Start: start, End: start.Add(10 * time.Second)}
	for _, p := range []window.Pane{
		{Window: w, Key: "all", Version: 1, Value: []byte(`{"max":1}`)},
		{Window: w, Key: "all", Version: 2, Value: []byte(`{"max":7}`)},
		{Window: w, Key: "gone", Version: 1, Value: []byte(`{"max":3}`)},
		{Window: w, Key: "gone", Version: 2, Kind: window.Retract, Value: []byte(`{"max":3}`)},
	} {
		raw, err := p.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Apply(ctx, raw); err != nil {
			t.Fatal(err)
		}
	}
	url := srv.ClientURL()
	out, err := weir(t, "view", "list", "-nats", url, "-pipeline", "nexmark-q7")
	if err != nil || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"key":"all.1796119200000_1796119210000"`) || !strings.Contains(out, `"max":7`) {
		t.Fatalf("view list: %v\n%s", err, out)
	}
	out, err = weir(t, "view", "get", "-nats", url, "-pipeline", "nexmark-q7", "gone.1796119200000_1796119210000")
	if err != nil || !strings.Contains(out, `"kind":"retract"`) || !strings.Contains(out, `"version":2`) {
		t.Fatalf("view get of a retracted window: %v\n%s", err, out)
	}
	if out, err := weir(t, "view", "get", "-nats", url, "-pipeline", "nexmark-q7", "nothing.1_2"); err == nil || !strings.Contains(err.Error(), "holds no key") {
		t.Fatalf("view get of a missing key: %v\n%s", err, out)
	}
	if out, err := weir(t, "view", "list", "-nats", url, "-pipeline", "nexmark"); err == nil || !strings.Contains(err.Error(), "keeps no view") {
		t.Fatalf("view list of a pipeline without a view: %v\n%s", err, out)
	}
}
