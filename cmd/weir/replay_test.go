package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
	q7 "github.com/weirflow/weir/services/nexmark-q7"
)

// TestReplayComparesWithTheContinuousRun runs q7 continuously over a
// corpus, replays the same ingress range into a new result generation with
// `weir replay`, and `weir compare` finds the two equal revision by
// revision up to the watermark the continuous run reached. A replay with
// early panes added to the trigger policy is reported with the revisions
// that differ, in words and as JSON.
func TestReplayComparesWithTheContinuousRun(t *testing.T) {
	srv := natstest.Run(t)
	url := srv.ClientURL()
	js := srv.JetStream(t)
	ctx := context.Background()
	c, err := contracts.Shipped("nexmark-q7")
	if err != nil {
		t.Fatal(err)
	}
	const events = 4000
	gen := nexmarkgen.Config{Stream: c.Ingress.Stream, SubjectPrefix: c.Ingress.SubjectPrefix, Retention: c.Ingress.Retention.D(),
		Producer: "gen", Count: events, Gen: nexmark.Config{Seed: 11, FirstEventTime: time.Now().Add(-time.Hour).Truncate(10 * time.Second),
			EventsPerSecond: 50, OutOfOrder: 500 * time.Millisecond, Partitions: c.Ingress.Partitions, KeyGroups: c.State.KeyGroups,
			Events: events, Hard: nexmark.HardCases{IdlePartition: -1}}}
	if _, err := nexmarkgen.EnsureStream(ctx, js, gen); err != nil {
		t.Fatal(err)
	}
	if _, err := nexmarkgen.Publish(ctx, js, gen, time.Now, nil); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, c.Ingress.Stream)
	if err != nil {
		t.Fatal(err)
	}
	last := st.CachedInfo().State.LastSeq

	// The continuous run, until it has read everything and its watermark
	// has stopped moving — past the idle timeout, which can move it too.
	live := streamtest.Run(t, url, c, t.TempDir(), q7.Factories())
	var wm time.Time
	streamtest.CheckFor(t, 90*time.Second, func() error {
		if n := live.ByID["q7-max"].Stats().In; n < events {
			return fmt.Errorf("q7-max read %d of %d", n, events)
		}
		prev := wm
		time.Sleep(3 * time.Second)
		if wm = live.ByID["q7-max"].Stats().Watermark; wm.IsZero() || !wm.Equal(prev) {
			return fmt.Errorf("q7-max's watermark moved from %s to %s", prev, wm)
		}
		return nil
	})
	live.Stop()

	out, err := weir(t, "replay", "-nats", url, "-pipeline", "nexmark-q7", "-from", "1", "-to", strconv.FormatUint(last, 10), "-generation", "r1", "-as", "tester")
	if err != nil {
		t.Fatalf("weir replay: %v\n%s", err, out)
	}
	t.Logf("weir replay:\n%s", out)
	if !strings.Contains(out, "replay ended") || !strings.Contains(out, "nexmark-q7-r1") {
		t.Fatalf("weir replay:\n%s", out)
	}
	// A range that ends before the stream does ends too, having read
	// exactly its records.
	half := strconv.FormatUint(last/2, 10)
	out, err = weir(t, "replay", "-nats", url, "-pipeline", "nexmark-q7", "-from", "1001", "-to", half, "-generation", "part", "-timeout", "1m")
	if err != nil || !regexp.MustCompile(`(?m)^q7-max\s+`+strconv.FormatUint(last/2-1000, 10)+`\s`).MatchString(out) {
		t.Fatalf("a replay of sequences 1001..%s: %v\n%s", half, err, out)
	}
	if out, err := weir(t, "replay", "-nats", url, "-pipeline", "nexmark-q7", "-from", "1", "-to", "2", "-generation", "r1"); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Fatalf("a replay into an existing generation: %v\n%s", err, out)
	}
	until := wm.UTC().Format(time.RFC3339Nano)
	out, err = weir(t, "compare", "-nats", url, "-pipeline", "nexmark-q7", "-with", "nexmark-q7-r1", "-until", until)
	t.Logf("weir compare:\n%s", out)
	if err != nil || !strings.Contains(out, "nexmark-q7 and nexmark-q7-r1 are equal") {
		t.Fatalf("the continuous run and its replay differ: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`(\d+) equal revision by revision`).FindStringSubmatch(out)
	if n, _ := strconv.Atoi(m[1]); n < 5 {
		t.Fatalf("only %d windows compared:\n%s", n, out)
	}
	// Without the bound, the replay's last windows — closed by its final
	// watermark, still open in the continuous run — show as its own.
	out, err = weir(t, "compare", "-nats", url, "-pipeline", "nexmark-q7", "-with", "nexmark-q7-r1")
	if err == nil || !strings.Contains(out, "only in nexmark-q7-r1") {
		t.Fatalf("comparing past the continuous run's watermark: %v\n%s", err, out)
	}

	// The trigger policy changed: early panes every 20 elements.
	src, err := os.ReadFile(filepath.Join("..", "..", "contracts", "nexmark-q7.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(src), "  triggers:\n", "  triggers:\n    early: {count: 20}\n", 1)
	if changed == string(src) {
		t.Fatal("the trigger policy was not changed")
	}
	file := filepath.Join(t.TempDir(), "q7-early.yaml")
	if err := os.WriteFile(file, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := weir(t, "replay", "-nats", url, "-contract", file, "-from", "1", "-to", strconv.FormatUint(last, 10), "-generation", "early"); err != nil {
		t.Fatalf("weir replay with early panes: %v\n%s", err, out)
	}
	out, err = weir(t, "compare", "-nats", url, "-pipeline", "nexmark-q7", "-with", "nexmark-q7-early", "-until", until)
	t.Logf("weir compare with early panes:\n%s", out)
	if err == nil || !strings.Contains(out, "nexmark-q7-early has an early pane") || !regexp.MustCompile(`[1-9]\d* differ`).MatchString(out) {
		t.Fatalf("the changed trigger policy was not reported revision by revision: %v\n%s", err, out)
	}
	out, _ = weir(t, "compare", "-nats", url, "-pipeline", "nexmark-q7", "-with", "nexmark-q7-early", "-until", until, "-json")
	var report comparison
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("weir compare -json: %v\n%s", err, out)
	}
	early := 0
	for _, e := range report.Edges {
		for _, d := range e.Differ {
			if d.B != nil && strings.EqualFold(d.B.Timing, "early") {
				early++
			}
		}
	}
	if early == 0 {
		t.Fatalf("weir compare -json names no early pane among the differences:\n%s", out)
	}
	if out, err := weir(t, "audit", "-nats", url, "-pipeline", "nexmark-q7", "-action", "replay"); err != nil || strings.Count(out, "tester") != 1 || !strings.Contains(out, "nexmark-q7-r1") {
		t.Fatalf("weir audit -action replay: %v\n%s", err, out)
	}
}
