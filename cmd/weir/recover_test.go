package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/dedup"
)

// TestRetentionExhaustionDrill trims the ingress under a stopped pipeline,
// twice, and carries out each of `weir recover`'s choices:
//
//  1. a savepoint restored into a new deployment needs records retention
//     has since removed: the dedup instance refuses to start, naming the
//     stream, the partitions, the committed and first sequences and the
//     records lost; `weir recover` shows the refusal, the savepoint as
//     trimmed and the newer checkpoint as held, and `-from-checkpoint`
//     restarts the pipeline from it with nothing lost or repeated;
//  2. records published while the pipeline is stopped are all removed:
//     the instance refuses again until `-declare-loss`, then starts at
//     what the stream holds, and reads everything after.
//
// `weir audit` lists every act with who did it and why.
func TestRetentionExhaustionDrill(t *testing.T) {
	srv := natstest.Run(t)
	url := srv.ClientURL()
	js := srv.JetStream(t)
	ctx := context.Background()
	c, err := contracts.Shipped("nexmark-dedup")
	if err != nil {
		t.Fatal(err)
	}
	publish := dedupInput(t, js, c, 5, 5000)
	ingress := func() jetstream.Stream {
		st, err := js.Stream(ctx, c.Ingress.Stream)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	pub := func(start, count uint64) uint64 {
		publish(start, count)
		return ingress().CachedInfo().State.LastSeq
	}
	sinkAt := func(n int) {
		t.Helper()
		streamtest.CheckFor(t, 60*time.Second, func() error {
			ids, total := sinkIDs(t, js)
			if len(ids) != n || total != n {
				return fmt.Errorf("sink holds %d messages of %d ids, want %d once each", total, len(ids), n)
			}
			return nil
		})
	}
	// The dedup instance alone, to see it refuse.
	refuses := func(dir string) *edge.TrimmedError {
		t.Helper()
		rt, err := stream.New(stream.Config{NATSURL: url, Contract: c, DataDir: filepath.Join(dir, "dedup"), Operator: "dedup",
			Instance: "0", TickInterval: 20 * time.Millisecond}, dedup.New())
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err = rt.Run(rctx)
		var te *edge.TrimmedError
		if !errors.As(err, &te) {
			t.Fatalf("the dedup instance started past removed records: %v", err)
		}
		return te
	}
	must := func(out string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return out
	}

	endOfFirst := pub(0, 1000)
	dir := t.TempDir()
	stopOld := deployment(t, url, c, dir)
	coordinate(t, url, c, time.Hour, 10*time.Second)
	sinkAt(1000)
	streamtest.CheckFor(t, 30*time.Second, func() error {
		_, err := weir(t, "savepoint", "create", "early", "-nats", url)
		return err
	})
	pub(1000, 1000)
	sinkAt(2000)
	must(weir(t, "checkpoint", "trigger", "-nats", url, "-as", "drill-operator"))
	stopOld()
	store, err := checkpoint.Existing(ctx, js, c.Pipeline)
	if err != nil {
		t.Fatal(err)
	}
	latest, _, err := store.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// Retention removes the first 200 records of the second slice: the
	// savepoint needs them, the checkpoint does not.
	if err := ingress().Purge(ctx, jetstream.WithPurgeSequence(endOfFirst+201)); err != nil {
		t.Fatal(err)
	}
	fresh := t.TempDir()
	must(weir(t, "savepoint", "restore", "early", "-data", fresh, "-nats", url, "-as", "drill-operator"))
	te := refuses(fresh)
	msg := te.Error()
	for _, want := range []string{"stream " + c.Ingress.Stream, "partition ", "committed position ", "first sequence is " + strconv.FormatUint(endOfFirst+201, 10), "records were lost"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("the refusal does not say %q:\n%s", want, msg)
		}
	}
	for _, in := range te.Inputs {
		if in.First != endOfFirst+201 || in.Removed == 0 || in.Removed > 1200 || in.Committed >= in.First {
			t.Fatalf("refused input %+v: want the first sequence %d and between 1 and 1200 records removed", in, endOfFirst+201)
		}
	}
	out := must(weir(t, "recover", "-nats", url))
	t.Logf("weir recover:\n%s", out)
	ckpt := "checkpoint " + strconv.FormatUint(latest.Checkpoint, 10)
	for _, want := range []string{"1 instance(s) refuse to start", "dedup/0", "-from-checkpoint " + strconv.FormatUint(latest.Checkpoint, 10)} {
		if !strings.Contains(out, want) {
			t.Fatalf("weir recover does not show %q:\n%s", want, out)
		}
	}
	for _, want := range []string{`(?m)^savepoint early\s.*\strimmed: dedup/0 ingress/`, `(?m)^` + ckpt + `\s.*\sheld: `} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Fatalf("weir recover does not show %q:\n%s", want, out)
		}
	}
	if out, err := weir(t, "recover", "-nats", url, "-from-checkpoint", "1"); err == nil || !strings.Contains(err.Error(), "-reason") {
		t.Fatalf("a choice without a reason was taken: %v\n%s", err, out)
	}
	if out, err := weir(t, "recover", "-nats", url, "-from-savepoint", "early", "-reason", "drill"); err == nil || !strings.Contains(err.Error(), "cannot be restored without loss") {
		t.Fatalf("restoring the trimmed savepoint was not refused: %v\n%s", err, out)
	}
	must(weir(t, "recover", "-nats", url, "-from-checkpoint", strconv.FormatUint(latest.Checkpoint, 10), "-reason", "drill: savepoint too old", "-as", "drill-operator"))
	stopNew := deployment(t, url, c, fresh)
	pub(2000, 1000)
	sinkAt(3000)
	if out := must(weir(t, "recover", "-nats", url)); !strings.Contains(out, "no instance refuses to start") {
		t.Fatalf("the refusal is still reported after the instance started:\n%s", out)
	}
	// Stopping marks every partition as read through the stream's end.
	stopNew()

	// Everything published while the pipeline is stopped is removed.
	lastOfFourth := pub(3000, 500)
	if err := ingress().Purge(ctx); err != nil {
		t.Fatal(err)
	}
	te = refuses(fresh)
	for _, in := range te.Inputs {
		if in.First != lastOfFourth+1 || in.Removed < 1 || in.Removed > 500 {
			t.Fatalf("refused input %+v: want the first sequence %d and at most the 500 records published since", in, lastOfFourth+1)
		}
	}
	if out, err := weir(t, "recover", "-nats", url, "-declare-loss"); err == nil {
		t.Fatalf("a declaration without a reason was taken:\n%s", out)
	}
	if out, err := weir(t, "recover", "-nats", url, "-declare-loss", "-reason", "too short", "-through", strconv.FormatUint(lastOfFourth-100, 10)); err == nil || !strings.Contains(err.Error(), "does not cover") {
		t.Fatalf("a declaration short of the gap was taken: %v\n%s", err, out)
	}
	out = must(weir(t, "recover", "-nats", url, "-declare-loss", "-reason", "drill: input removed while stopped", "-as", "drill-operator"))
	if !strings.Contains(out, "declared lost: stream "+c.Ingress.Stream+" sequences ") || !strings.Contains(out, " through "+strconv.FormatUint(lastOfFourth, 10)+",") {
		t.Fatalf("weir recover -declare-loss:\n%s", out)
	}
	stopLast := deployment(t, url, c, fresh)
	defer stopLast()
	pub(3500, 500)
	sinkAt(3500)

	out = must(weir(t, "audit", "-nats", url))
	t.Logf("weir audit:\n%s", out)
	// The AS column: who the connection presented itself as, nobody here.
	for _, want := range []string{`drill-operator\s+-\s+checkpoint\s+nexmark`, `drill-operator\s+-\s+savepoint-restore\s+early`,
		`drill-operator\s+-\s+restore\s+nexmark\s.*checkpoint ` + strconv.FormatUint(latest.Checkpoint, 10) + `\s+drill: savepoint too old`,
		`drill-operator\s+-\s+declare-loss\s+` + c.Ingress.Stream + `\s.*drill: input removed while stopped`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Fatalf("weir audit does not list %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "drill-operator"); n != 4 {
		t.Fatalf("weir audit names drill-operator %d times, want 4 (checkpoint, savepoint restore, restore, declared loss):\n%s", n, out)
	}
	out = must(weir(t, "audit", "-nats", url, "-action", "declare-loss", "-json"))
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, `"to":"`+strconv.FormatUint(lastOfFourth, 10)+`"`) || !strings.Contains(out, `"from":"`) {
		t.Fatalf("weir audit -action declare-loss -json:\n%s", out)
	}
}
