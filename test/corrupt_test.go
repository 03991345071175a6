package test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream/streamtest"
)

// TestCorruptCheckpointFallsBack damages a file of the latest checkpoint
// and restores the pipeline on a new host: the dedup instance finds the
// file's digest wrong, the whole pipeline falls back to the checkpoint
// before, the fallback and the replay it adds are in the audit stream, and
// every event still reaches the sink exactly once.
func TestCorruptCheckpointFallsBack(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c := loadContract(t)
	ctx := context.Background()
	cfg := genConfig(c, 3000)
	cfg.Gen.Hard.FutureEvery = 0
	want, _ := expected(t, cfg)
	first := cfg
	first.Count = 1500
	publish(t, js, first)
	firstWant, _ := expected(t, first)
	_, stopPipeline := runPipeline(t, srv.ClientURL(), c, t.TempDir())
	_, stopCoordinator := runCoordinator(t, srv.ClientURL(), c, "co-1")
	store, err := checkpoint.Open(ctx, js, c.Pipeline, 1)
	if err != nil {
		t.Fatal(err)
	}
	streamtest.CheckFor(t, 60*time.Second, func() error {
		if _, total := sinkEvents(t, js, c); total < len(firstWant) {
			return fmt.Errorf("sink at %d", total)
		}
		if l, _, err := store.Latest(ctx); err != nil || l.Checkpoint < 3 {
			return fmt.Errorf("latest checkpoint %d (%v)", l.Checkpoint, err)
		}
		return nil
	})
	stopCoordinator()
	stopPipeline()
	latest, _, err := store.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := store.Manifest(ctx, latest.Manifests["dedup/0"])
	if err != nil {
		t.Fatal(err)
	}
	obj, err := js.ObjectStore(ctx, checkpoint.FilesBucket(c.Pipeline, "dedup"))
	if err != nil {
		t.Fatal(err)
	}
	// A file of this checkpoint alone: its Pebble manifest. (A table file
	// is shared by the checkpoints of a generation; damaged, it leaves
	// none of them to fall back to.)
	var f checkpoint.File
	for _, g := range m.Files {
		if strings.HasPrefix(g.Name, "MANIFEST") {
			f = g
		}
	}
	if f.Object == "" || !strings.Contains(f.Object, fmt.Sprintf("/%d/", latest.Checkpoint)) {
		t.Fatalf("no file of checkpoint %d alone among %+v", latest.Checkpoint, m.Files)
	}
	data, err := obj.GetBytes(ctx, f.Object)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if _, err := obj.PutBytes(ctx, f.Object, data); err != nil {
		t.Fatal(err)
	}

	rest := cfg
	rest.Start = 1500
	publish(t, js, rest)
	runPipeline(t, srv.ClientURL(), c, t.TempDir())
	streamtest.CheckFor(t, 90*time.Second, func() error {
		return sinkExactlyOnce(t, js, c, want)
	})
	recs, err := audit.List(ctx, js, c.Pipeline, audit.ActionFallback)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) == 0 {
		t.Fatal("no fallback was recorded in the audit stream")
	}
	r := recs[0]
	if r.From != fmt.Sprintf("checkpoint %d", latest.Checkpoint) || !strings.HasPrefix(r.To, "checkpoint ") || r.To == r.From ||
		!strings.Contains(r.Reason, "corrupt") || !strings.Contains(r.Reason, f.Name) || r.Detail["replay_span"] == nil {
		t.Fatalf("fallback recorded as %+v", r)
	}
	a, _, err := store.Assignment(ctx)
	if err != nil || a.Checkpoint >= latest.Checkpoint {
		t.Fatalf("the pipeline restarted under %+v (%v), not from a checkpoint before %d", a, err, latest.Checkpoint)
	}
	t.Logf("fell back: %+v", r)
}
