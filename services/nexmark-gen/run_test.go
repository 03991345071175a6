package nexmarkgen

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/pkg/natstest"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseConfig(t *testing.T) {
	for _, c := range []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, c Config)
		err   string
	}{
		{name: "defaults", check: func(t *testing.T, c Config) {
			if c.Stream != "NEXMARK" || c.SubjectPrefix != "nexmark.events" || c.Producer != "nexmark-1" || c.Replicas != 1 ||
				c.Gen.Partitions != 4 || c.Gen.Hard.IdlePartition != -1 || c.Retention != 24*time.Hour ||
				c.NATSURL != "nats://127.0.0.1:4222" {
				t.Errorf("%+v", c)
			}
		}},
		{
			name: "environment",
			env: map[string]string{"NATS_URL": "nats://x:1", "WEIR_RATE": "250", "WEIR_COUNT": "1000",
				"WEIR_SEED": "9", "WEIR_LATE_EVERY": "10", "WEIR_LATE_BY": "2s", "WEIR_FIRST_EVENT_TIME": "1000"},
			check: func(t *testing.T, c Config) {
				if c.NATSURL != "nats://x:1" || c.Rate != 250 || c.Count != 1000 || c.Gen.Seed != 9 ||
					c.Producer != "nexmark-9" || c.Gen.Hard.LateEvery != 10 || c.Gen.Hard.LateBy != 2*time.Second ||
					c.Gen.FirstEventTime.UnixMilli() != 1000 {
					t.Errorf("%+v", c)
				}
			},
		},
		{
			name: "flags win",
			args: []string{"-rate", "5", "-first-event-time", "2025-06-01T00:00:00Z", "-producer", "p1"},
			env:  map[string]string{"WEIR_RATE": "250"},
			check: func(t *testing.T, c Config) {
				if c.Rate != 5 || c.Producer != "p1" || c.Gen.FirstEventTime.Year() != 2025 {
					t.Errorf("%+v", c)
				}
			},
		},
		{
			name: "replicas",
			env:  map[string]string{"WEIR_REPLICAS": "3"},
			check: func(t *testing.T, c Config) {
				if c.Replicas != 3 || StreamConfig(c, 0).Replicas != 3 {
					t.Errorf("replicas %d, stream config %d; want 3", c.Replicas, StreamConfig(c, 0).Replicas)
				}
			},
		},
		{name: "too many replicas", args: []string{"-replicas", "7"}, err: "replicas 7"},
		{name: "sequenced with a start", args: []string{"-sequenced", "-start", "5"}, err: "starts where the stream says it stopped"},
		{name: "bad env", env: map[string]string{"WEIR_COUNT": "many"}, err: "WEIR_COUNT"},
		{name: "bad flag", args: []string{"-nope"}, err: "not defined"},
		{name: "extra args", args: []string{"x"}, err: "unexpected arguments"},
		{name: "bad time", args: []string{"-first-event-time", "yesterday"}, err: "first-event-time"},
		{name: "invalid config", args: []string{"-hot-key-ratio", "2"}, err: "hot_key_ratio"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			cfg, err := parseConfig(c.args, env(c.env), &out)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want mention of %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, cfg)
		})
	}
}

func TestRun(t *testing.T) {
	s := natstest.Run(t)
	var out bytes.Buffer
	err := Run(t.Context(), []string{"-count", "120", "-partitions", "2", "-stream", "RUN"},
		env(map[string]string{"NATS_URL": s.ClientURL(), "WEIR_DUPLICATE_EVERY": "10"}), &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "done: 120 published, next start 120") {
		t.Errorf("output:\n%s", out.String())
	}
	js, err := jetstream.New(s.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(t.Context(), "RUN")
	if err != nil {
		t.Fatal(err)
	}
	if n := msgCount(t, st); n != 120 {
		t.Errorf("stream has %d messages, want 120", n)
	}

	// Cancelling an unbounded run is a clean stop that prints where to
	// resume, and everything it counted is stored.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stopped bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"-stream", "RUN", "-start", "120", "-rate", "5000"},
			env(map[string]string{"NATS_URL": s.ClientURL(), "WEIR_DUPLICATE_EVERY": "10"}), &stopped)
	}()
	for deadline := time.Now().Add(10 * time.Second); msgCount(t, st) < 300; {
		if time.Now().After(deadline) {
			t.Fatal("unbounded run did not reach 300 messages in 10s")
		}
		runtime.Gosched()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("cancelled run: %v", err)
	}
	n := msgCount(t, st)
	if want := fmt.Sprintf("stopped: %d published, next start %d", n-120, n); !strings.Contains(stopped.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, stopped.String())
	}

	// Published by sequence, a producer starts where the stream says it
	// stopped, run after run, past another writer's messages.
	for i, want := range []string{"from position 0", "from position 50"} {
		var seqd bytes.Buffer
		if err := Run(t.Context(), []string{"-stream", "SEQ", "-subject-prefix", "seq", "-sequenced", "-count", "50"},
			env(map[string]string{"NATS_URL": s.ClientURL()}), &seqd); err != nil {
			t.Fatalf("sequenced run %d: %v\n%s", i, err, seqd.String())
		}
		if !strings.Contains(seqd.String(), want) || !strings.Contains(seqd.String(), fmt.Sprintf("next start %d", 50*(i+1))) {
			t.Errorf("sequenced run %d, want %q:\n%s", i, want, seqd.String())
		}
		if _, err := js.Publish(t.Context(), "seq.0", []byte(`{"other":true}`)); err != nil {
			t.Fatal(err)
		}
	}
	seqd, err := js.Stream(t.Context(), "SEQ")
	if err != nil {
		t.Fatal(err)
	}
	if n := msgCount(t, seqd); n != 102 {
		t.Errorf("sequenced stream has %d messages, want 100 and 2 of another writer", n)
	}

	// -h prints usage and is not an error.
	out.Reset()
	if err := Run(t.Context(), []string{"-h"}, env(nil), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "-hot-key-ratio") {
		t.Errorf("usage:\n%s", out.String())
	}
}

func TestParseConfigFromContract(t *testing.T) {
	var out strings.Builder
	c, err := parseConfig([]string{"-contract", "../../contracts/nexmark-dedup.yaml", "-partitions", "9"}, env(nil), &out)
	if err != nil {
		t.Fatal(err)
	}
	if c.Stream != "NEXMARK" || c.SubjectPrefix != "nexmark.events" || c.Gen.Partitions != 4 || c.Retention != 24*time.Hour {
		t.Fatalf("config from contract = %+v, want the contract's ingress section", c)
	}
	_, err = parseConfig(nil, env(map[string]string{"WEIR_CONTRACT": "../../contracts/testdata/bad-dedup-ttl.yaml"}), &out)
	if err == nil || !strings.Contains(err.Error(), "refusing to start") {
		t.Fatalf("bad contract: err = %v, want a refusal", err)
	}
}

// A stream created without atomic batches is used as its owner made it —
// every event still stored — and the run says why it is slow and how to
// change that.
func TestRunWarnsOfAStreamWithoutAtomicBatches(t *testing.T) {
	s := natstest.Run(t)
	js, err := jetstream.New(s.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "OLD", Subjects: []string{DefaultSubjectPrefix + ".*"}}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Run(t.Context(), []string{"-count", "50", "-stream", "OLD"}, env(map[string]string{"NATS_URL": s.ClientURL()}), &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "does not allow atomic batches") || !strings.Contains(out.String(), "nats stream edit OLD --allow-batch") {
		t.Errorf("output does not warn of the unbatched stream:\n%s", out.String())
	}
	st, err := js.Stream(t.Context(), "OLD")
	if err != nil {
		t.Fatal(err)
	}
	if n := msgCount(t, st); n != 50 {
		t.Errorf("stream has %d messages, want 50", n)
	}
	if !strings.Contains(out.String(), "done: 50 published") {
		t.Errorf("output:\n%s", out.String())
	}
}
