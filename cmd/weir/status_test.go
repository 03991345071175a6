package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/internal/status"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
)

// TestStatus runs the dedup pipeline with a coordinator and checks that
// `weir status` prints its operators with their watermarks, the inputs'
// lag, the edges and the checkpoint log; and that -watch refreshes.
func TestStatus(t *testing.T) {
	srv := natstest.Run(t)
	url := srv.ClientURL()
	nc := srv.Connect(t)
	js, _ := jetstream.New(nc)
	c, err := contracts.Shipped("nexmark-dedup")
	if err != nil {
		t.Fatal(err)
	}
	const events = 1000
	gen := nexmarkgen.Config{Stream: c.Ingress.Stream, SubjectPrefix: c.Ingress.SubjectPrefix, Retention: c.Ingress.Retention.D(),
		Producer: "gen", Count: events, Gen: nexmark.Config{Seed: 3, FirstEventTime: time.Now().Add(-time.Hour), EventsPerSecond: 1000,
			Partitions: c.Ingress.Partitions, KeyGroups: c.State.KeyGroups, Events: events, Hard: nexmark.HardCases{IdlePartition: -1}}}
	ctx := context.Background()
	if _, err := nexmarkgen.EnsureStream(ctx, js, gen); err != nil {
		t.Fatal(err)
	}
	if _, err := nexmarkgen.Publish(ctx, js, gen, time.Now, nil); err != nil {
		t.Fatal(err)
	}
	stop := deployment(t, url, c, t.TempDir())
	defer stop()
	coordinate(t, url, c, 300*time.Millisecond, 5*time.Second)

	// Wait until the pipeline has taken everything in and checkpointed.
	streamtest.CheckFor(t, 60*time.Second, func() error {
		s, err := status.Gather(ctx, nc, js, c)
		if err != nil {
			return err
		}
		if s.Latest == nil {
			return errors.New("no checkpoint completed")
		}
		for _, o := range s.Operators {
			if o.Lag != 0 || o.In == 0 || o.Watermark.IsZero() {
				return fmt.Errorf("%s: in %d, lag %d, watermark %v", o.ID, o.In, o.Lag, o.Watermark)
			}
		}
		return nil
	})

	out, err := weir(t, "status", "-nats", url)
	if err != nil {
		t.Fatalf("weir status: %v\n%s", err, out)
	}
	t.Logf("weir status:\n%s", out)
	wm := `\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}`
	for _, want := range []string{
		`pipeline nexmark\s+contract contracts/nexmark-dedup.yaml`,
		`coordinator co \(leader\)`,
		`checkpoint: #\d+ completed`,
		`(?m)^dedup\s+0\s+ready\s+` + wm + `\s+\S+\s+1000\s`,
		`(?m)^publish\s+0\s+ready\s+` + wm + `\s`,
		`(?m)^ingress/3\s+dedup/0\s+nexmark\.events\.3\s+` + wm + `\s+0\s+0\s+0\s+\d+`,
		`(?m)^deduped/0\s+publish/0\s+weir\.nexmark\.deduped\.0\s`,
		`(?m)^ingress\s+NEXMARK\s+-\s+dedup\s+1000\s`,
		`(?m)^deduped\s+WEIR_NEXMARK_DEDUPED\s+dedup\s+publish\s`,
		`(?m)^\d+\s+complete\s`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("weir status output does not match %s", want)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("weir status without -watch cleared the screen")
	}

	// The contract may be named by shipped name or file; a contract of
	// another pipeline is refused.
	if out, err := weir(t, "status", "-nats", url, "-contract", "nexmark-dedup"); err != nil || !strings.Contains(out, "pipeline nexmark ") {
		t.Fatalf("status -contract nexmark-dedup (%v):\n%s", err, out)
	}
	if out, err := weir(t, "status", "-nats", url, "-contract", "../../contracts/nexmark-dedup.yaml"); err != nil || !strings.Contains(out, "pipeline nexmark ") {
		t.Fatalf("status -contract FILE (%v):\n%s", err, out)
	}
	if out, err := weir(t, "status", "-nats", url, "-pipeline", "nexmark", "-contract", "nexmark-q7"); err == nil {
		t.Fatalf("status with a contract of another pipeline succeeded:\n%s", out)
	}
	if out, err := weir(t, "status", "-nats", url, "-pipeline", "no-such-pipeline"); err == nil {
		t.Fatalf("status of an unknown pipeline succeeded:\n%s", out)
	}

	// -watch redraws until interrupted.
	wctx, wcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer wcancel()
	var wout, werr strings.Builder
	if err := run(wctx, []string{"status", "-nats", url, "-watch", "200ms"}, func(string) string { return "" }, &wout, &werr); err != nil {
		t.Fatalf("status -watch: %v\n%s", err, werr.String())
	}
	if n := strings.Count(wout.String(), clearScreen); n < 2 || strings.Count(wout.String(), "OPERATOR") < 2 {
		t.Fatalf("status -watch drew %d screens in 1.5s:\n%s", n, wout.String())
	}
}

// TestInstanceStateNamesHeldEpochs checks that the STATE column says when a
// transactional sink holds results waiting for their checkpoints.
func TestInstanceStateNamesHeldEpochs(t *testing.T) {
	for _, c := range []struct {
		in   status.Instance
		want string
	}{
		{status.Instance{}, "not responding"},
		{status.Instance{Responding: true}, "recovering"},
		{status.Instance{Responding: true, Stats: status.Stats{Ready: true}}, "ready"},
		{status.Instance{Responding: true, Stats: status.Stats{Ready: true, HeldEpochs: 2}}, "ready, holding 2 epochs"},
	} {
		if got := instanceState(c.in); got != c.want {
			t.Errorf("%+v: %q, want %q", c.in, got, c.want)
		}
	}
}
