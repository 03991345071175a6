package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/internal/status"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
	q7 "github.com/weirflow/weir/services/nexmark-q7"
)

// TestShadowFollowsTheLiveRun runs q7 live and, beside it, `weir shadow`
// from the ingress's first record: the shadow catches up, stops keeping
// its state, resumes from it after more input arrived (reading only what
// is new), and `weir compare` finds the live run and the shadow equal
// revision by revision up to the watermark both reached — windows the
// shadow closed as the live run did, with no final watermark. Readers are
// then cut over to the shadow.
//
// Both run q7 with an idle timeout longer than the test: idleness is
// judged on the clock, so a live run whose publisher stalls past the
// shipped 2 s (a loaded machine's fsync) lets the other partitions'
// watermark pass records not yet published, and those then arrive late,
// where the shadow, reading the stored log, finds them on time. CI once
// saw an on-time pane of 460 bids live and 465 in the shadow.
func TestShadowFollowsTheLiveRun(t *testing.T) {
	srv := natstest.Run(t)
	url := srv.ClientURL()
	js := srv.JetStream(t)
	ctx := context.Background()
	shipped, err := os.ReadFile("../../contracts/nexmark-q7.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(shipped), "idle_timeout: 2s") {
		t.Fatal("contracts/nexmark-q7.yaml no longer says idle_timeout: 2s; change this test with it")
	}
	file := filepath.Join(t.TempDir(), "nexmark-q7.yaml")
	if err := os.WriteFile(file, []byte(strings.Replace(string(shipped), "idle_timeout: 2s", "idle_timeout: 30m", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := contracts.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	const events = 4000
	gen := nexmarkgen.Config{Stream: c.Ingress.Stream, SubjectPrefix: c.Ingress.SubjectPrefix, Retention: c.Ingress.Retention.D(),
		Producer: "gen", Gen: nexmark.Config{Seed: 5, FirstEventTime: time.Now().Add(-time.Hour).Truncate(10 * time.Second),
			EventsPerSecond: 50, OutOfOrder: 500 * time.Millisecond, Partitions: c.Ingress.Partitions, KeyGroups: c.State.KeyGroups,
			Events: events, Hard: nexmark.HardCases{IdlePartition: -1}}}
	if _, err := nexmarkgen.EnsureStream(ctx, js, gen); err != nil {
		t.Fatal(err)
	}
	publish := func(start, count uint64) {
		t.Helper()
		g := gen
		g.Start, g.Count = start, count
		if _, err := nexmarkgen.Publish(ctx, js, g, time.Now, nil); err != nil {
			t.Fatal(err)
		}
	}
	live := streamtest.Run(t, url, c, t.TempDir(), q7.Factories())
	// settled waits until the live run has read n events and its
	// watermark has stopped moving.
	settled := func(n int64) time.Time {
		var wm time.Time
		streamtest.CheckFor(t, 90*time.Second, func() error {
			if in := live.ByID["q7-max"].Stats().In; in < n {
				return fmt.Errorf("q7-max read %d of %d", in, n)
			}
			prev := wm
			time.Sleep(2 * time.Second)
			if wm = live.ByID["q7-max"].Stats().Watermark; wm.IsZero() || !wm.Equal(prev) {
				return fmt.Errorf("q7-max's watermark moved from %s to %s", prev, wm)
			}
			return nil
		})
		return wm
	}
	data := t.TempDir()
	shadow := func(extra ...string) (string, map[string]string) {
		t.Helper()
		args := append([]string{"shadow", "-nats", url, "-contract", file, "-generation", "s1", "-data", data, "-caught-up", "-as", "tester"}, extra...)
		out, err := weir(t, args...)
		t.Logf("weir shadow:\n%s", out)
		if err != nil || !strings.Contains(out, "caught up with nexmark-q7's ingress") {
			t.Fatalf("weir shadow: %v\n%s", err, out)
		}
		rows := map[string]string{}
		for _, m := range regexp.MustCompile(`(?m)^(q7-\w+)\s+(.*)$`).FindAllStringSubmatch(out, -1) {
			rows[m[1]] = m[2]
		}
		return out, rows
	}
	compare := func(wm time.Time) string {
		t.Helper()
		out, err := weir(t, "compare", "-nats", url, "-contract", file, "-with", "nexmark-q7-s1", "-until", wm.UTC().Format(time.RFC3339Nano))
		t.Logf("weir compare:\n%s", out)
		if err != nil || !strings.Contains(out, "nexmark-q7 and nexmark-q7-s1 are equal") {
			t.Fatalf("the live run and its shadow differ: %v\n%s", err, out)
		}
		return out
	}

	publish(0, events/2)
	wm := settled(events / 2)
	if out, err := weir(t, "shadow", "-nats", url, "-pipeline", "nexmark-q7", "-generation", "s1", "-data", data); err == nil || !strings.Contains(err.Error(), "-from is required") {
		t.Fatalf("a new shadow without -from: %v\n%s", err, out)
	}
	_, rows := shadow("-from", "1")
	if !strings.HasPrefix(rows["q7-max"], fmt.Sprint(events/2)+" ") {
		t.Fatalf("the shadow's q7-max read %q, want %d records", rows["q7-max"], events/2)
	}
	compare(wm)

	// More input: the live run goes on, and the shadow resumes from its
	// state, reading only the new half.
	publish(events/2, events/2)
	wm = settled(events)
	_, rows = shadow()
	if !strings.HasPrefix(rows["q7-max"], fmt.Sprint(events/2)+" ") {
		t.Fatalf("the resumed shadow's q7-max read %q, want the %d new records only", rows["q7-max"], events/2)
	}
	out := compare(wm)
	if m := regexp.MustCompile(`(\d+) equal revision by revision`).FindStringSubmatch(out); m == nil || m[1] == "0" {
		t.Fatalf("no window compared:\n%s", out)
	}
	live.Stop()

	// A shadow into a generation that exists, from fresh state, is refused.
	if out, err := weir(t, "shadow", "-nats", url, "-pipeline", "nexmark-q7", "-generation", "s1", "-data", t.TempDir(), "-from", "1"); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Fatalf("a second shadow into generation s1: %v\n%s", err, out)
	}
	if out, err := weir(t, "cutover", "-nats", url, "-pipeline", "nexmark-q7", "-to", "nexmark-q7-s1", "-reason", "shadow equal", "-as", "tester"); err != nil || !strings.Contains(out, "readers now read generation nexmark-q7-s1") {
		t.Fatalf("weir cutover to the shadow: %v\n%s", err, out)
	}
	if out, err := weir(t, "audit", "-nats", url, "-pipeline", "nexmark-q7", "-action", "shadow"); err != nil || strings.Count(out, "tester") != 1 || !strings.Contains(out, "nexmark-q7-s1") {
		t.Fatalf("weir audit -action shadow: %v\n%s", err, out)
	}
}

// TestAShadowThatFailsStops: when the shadow's runtimes fail — here their
// state directory cannot be made, under a file — the wait returns the
// failure and stopping them returns at once, where it used to wait for an
// end already consumed.
func TestAShadowThatFailsStops(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c, err := contracts.Shipped("nexmark-q7")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rts, err := replayRuntimes(c, shippedFactories(c.Pipeline), &natsServer{url: srv.ClientURL()}, file, &stream.Replay{Generation: "x", From: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g := runGroup(ctx, rts)
	_, err = awaitCaughtUp(ctx, srv.Connect(t), js, c, rts, g, func(status.Status) bool { return true })
	if err == nil || !strings.Contains(err.Error(), "the shadow stopped") {
		t.Fatalf("awaitCaughtUp: %v, want the runtimes' failure", err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- g.stop() }()
	select {
	case err := <-stopped:
		if err == nil {
			t.Error("the failed runtimes stopped without an error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stopping failed runtimes did not return")
	}
}
