package test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
)

// contractPath is the contract the first services run.
func contractPath(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(file), "..", "contracts", "nexmark-dedup.yaml")
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func loadContract(t testing.TB) *contracts.Contract {
	t.Helper()
	c, err := contracts.Load(contractPath(t))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// genConfig is the generator configuration of these tests: events an hour
// old (so none is in the future unless injected), duplicates and future
// timestamps injected.
func genConfig(c *contracts.Contract, events uint64) nexmarkgen.Config {
	return nexmarkgen.Config{
		Stream:        c.Ingress.Stream,
		SubjectPrefix: c.Ingress.SubjectPrefix,
		Retention:     c.Ingress.Retention.D(),
		Producer:      "gen-test",
		Gen: nexmark.Config{
			Seed:            7,
			FirstEventTime:  time.Now().Add(-time.Hour).Truncate(time.Second),
			EventsPerSecond: 1000,
			Partitions:      c.Ingress.Partitions,
			KeyGroups:       c.State.KeyGroups,
			OutOfOrder:      500 * time.Millisecond,
			Events:          events,
			Hard: nexmark.HardCases{
				DuplicateEvery: 7,
				FutureEvery:    101,
				FutureBy:       48 * time.Hour,
				IdlePartition:  -1,
			},
		},
	}
}

// expected lists the IDs that must come out of dedup exactly once — of the
// messages cfg.Start to cfg.Start+cfg.Count, all when Count is 0 — and the
// number of future-timestamped messages that must be dead-lettered instead.
func expected(t testing.TB, cfg nexmarkgen.Config) (ids map[string]bool, future int) {
	t.Helper()
	g, err := nexmark.NewGenerator(cfg.Gen)
	if err != nil {
		t.Fatal(err)
	}
	ids = map[string]bool{}
	g.Seek(cfg.Start)
	for n := uint64(0); cfg.Count == 0 || n < cfg.Count; n++ {
		m, ok := g.Next()
		if !ok {
			break
		}
		if g.Future(m.Index) {
			// Dead-lettered, and so is each duplicate message of it.
			future++
			continue
		}
		if m.Duplicate {
			continue
		}
		ids[m.Event.ID] = true
	}
	return ids, future
}

func publish(t testing.TB, js jetstream.JetStream, cfg nexmarkgen.Config) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := nexmarkgen.EnsureStream(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	n, err := nexmarkgen.Publish(ctx, js, cfg, time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// output reads every record on the deduped edge and counts each ID.
func output(t testing.TB, js jetstream.JetStream, c *contracts.Contract) (map[string]int, int) {
	t.Helper()
	counts := map[string]int{}
	total := 0
	for _, msg := range streamtest.Messages(t, js, edge.StreamName(c.Pipeline, "deduped")) {
		recs, err := edge.DecodeFrame(msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Kind != record.Data {
				continue // watermarks and idle markers ride along
			}
			counts[r.ID]++
			total++
		}
	}
	return counts, total
}

// deadLetters counts the dead letters of the pipeline by field.
func deadLetters(t testing.TB, js jetstream.JetStream, c *contracts.Contract) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, l := range streamtest.Letters(t, js, c.Pipeline) {
		out[l.Field]++
	}
	return out
}

// checkExactlyOnce compares the output with the expected IDs.
func checkExactlyOnce(want map[string]bool, got map[string]int) error {
	var missing, dup, extra int
	var example string
	for id := range want {
		switch n := got[id]; {
		case n == 0:
			missing++
			example = "missing " + id
		case n > 1:
			dup++
			example = fmt.Sprintf("%s %d times", id, n)
		}
	}
	for id := range got {
		if !want[id] {
			extra++
			example = "unexpected " + id
		}
	}
	if missing+dup+extra > 0 {
		return fmt.Errorf("%d missing, %d duplicated, %d unexpected of %d (e.g. %s)", missing, dup, extra, len(want), example)
	}
	return nil
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return nil
}

// sideLetters reads the side-output letters of a pipeline.
func sideLetters(t *testing.T, js jetstream.JetStream, c *contracts.Contract) []deadletter.Letter {
	t.Helper()
	var out []deadletter.Letter
	for _, l := range streamtest.Letters(t, js, c.Pipeline) {
		if l.SideOutput {
			out = append(out, l)
		}
	}
	return out
}
