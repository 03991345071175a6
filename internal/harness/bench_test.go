package harness

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/weirflow/weir/internal/bench"
)

// TestBenchNexmark runs every mode of `weir bench nexmark` on a small run
// with -json, and checks each measurement is there and measured: rates,
// and for the pipeline modes, the CPU of the processes, their memory and
// latencies.
func TestBenchNexmark(t *testing.T) {
	out, err := weir(t, "bench", "nexmark", "-query", "dedup", "-events", "2000", "-json",
		"-latency-span", "2s", "-dir", t.TempDir())
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	seen := map[string]bench.Measurement{}
	for _, m := range measurements(t, out) {
		seen[m.Mode] = m
		if m.EventsPerSec <= 0 || m.Events <= 0 {
			t.Errorf("%s: %d events at %.0f/s", m.Mode, m.Events, m.EventsPerSec)
		}
	}
	for _, mode := range benchModes {
		if _, ok := seen[mode]; !ok {
			t.Errorf("no %s measurement in:\n%s", mode, out)
		}
	}
	for _, mode := range []string{modePreloaded, modeLive, modeLatency} {
		m := seen[mode]
		if m.CPUSeconds <= 0 || m.EventsPerCPUSec <= 0 || m.PeakRSSBytes <= 0 || m.PeakRSS["dedup"] <= 0 || m.PeakRSS["coordinator"] <= 0 {
			t.Errorf("%s: CPU %.2fs, %.0f events/CPU-s, peak RSS %d %v", mode, m.CPUSeconds, m.EventsPerCPUSec, m.PeakRSSBytes, m.PeakRSS)
		}
		// The broker works on every hop: counting its CPU lowers the figure.
		if m.BrokerCPUSeconds <= 0 || m.EventsPerTotalCPUSec <= 0 || m.EventsPerTotalCPUSec >= m.EventsPerCPUSec {
			t.Errorf("%s: broker CPU %.2fs, %.0f events/CPU-s with the broker's, %.0f without", mode, m.BrokerCPUSeconds, m.EventsPerTotalCPUSec, m.EventsPerCPUSec)
		}
	}
	if m := seen[modeLatency]; m.P50ms == nil || m.P99ms == nil || *m.P99ms < *m.P50ms {
		t.Errorf("latency: p50 %v p99 %v", m.P50ms, m.P99ms)
	}
	if m := seen[modeHand]; !strings.HasPrefix(m.Note, "2000 results") {
		t.Errorf("hand-written dedup: %s, want 2000 results", m.Note)
	}
}

// TestBenchNexmarkLatencyAtARate: -latency-rate sets the rate the latency
// mode publishes at, without the modes that would otherwise choose it, so
// two builds can be compared at one rate.
func TestBenchNexmarkLatencyAtARate(t *testing.T) {
	out, err := weir(t, "bench", "nexmark", "-query", "dedup", "-modes", modeLatency, "-latency-rate", "500",
		"-latency-span", "2s", "-events", "1000", "-json", "-dir", t.TempDir())
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	ms := measurements(t, out)
	if len(ms) != 1 || ms[0].Mode != modeLatency || ms[0].Events != 1000 || !strings.Contains(ms[0].Note, "at 500 events/s (-latency-rate)") || ms[0].P99ms == nil {
		t.Fatalf("want one latency measurement of 1,000 events at 500/s, got:\n%s", out)
	}
}

// TestBenchNexmarkLatencyStages: with -profile, the latency mode of a
// windowed query writes where each window's result waited, and the stages
// come in the pipeline's order: the ingress made the window due, then each
// edge carried the watermark past it, then the result was stored.
func TestBenchNexmarkLatencyStages(t *testing.T) {
	dir := t.TempDir()
	out, err := weir(t, "bench", "nexmark", "-query", "q5", "-modes", modeLatency, "-latency-rate", "1000",
		"-latency-span", "8s", "-events", "1000", "-json", "-profile", dir, "-dir", t.TempDir())
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	text, err := os.ReadFile(filepath.Join(dir, "q5-latency-stages.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var head []string
	rows := 0
	for line := range strings.Lines(string(text)) {
		cells := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
		switch {
		case len(cells) > 0 && cells[0] == "window":
			head = cells
		case head != nil && len(cells) == len(head):
			rows++
			// ingress, bids wm, counts wm, counts panes, results
			var at []int
			for i, name := range head {
				if name == "ingress" || strings.HasSuffix(name, " wm") || name == "results" {
					var ms int
					if _, err := fmt.Sscanf(cells[i], "%d", &ms); err != nil {
						t.Fatalf("%s %q: %v in\n%s", name, cells[i], err, text)
					}
					at = append(at, ms)
				}
			}
			if len(at) != 4 || !slices.IsSorted(at) {
				t.Errorf("stages out of the pipeline's order (ingress, bids wm, counts wm, first result): %v in\n%s", at, text)
			}
		}
	}
	if !slices.Equal(head, []string{"window", "ingress", "bids wm", "counts wm", "counts panes", "results"}) || rows == 0 {
		t.Fatalf("columns %q, %d windows in\n%s", head, rows, text)
	}
}

// TestBenchNexmarkEffects runs the preloaded mode once per sink effect:
// both measurements are there, labelled, and the transactional one counts
// its events only once their results are released, which takes a
// completed checkpoint.
func TestBenchNexmarkEffects(t *testing.T) {
	out, err := weir(t, "bench", "nexmark", "-query", "dedup", "-modes", modePreloaded, "-events", "2000", "-json",
		"-effects", "at-least-once,transactional", "-checkpoint-interval", "500ms", "-dir", t.TempDir())
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	seen := map[string]bench.Measurement{}
	for _, m := range measurements(t, out) {
		seen[m.Query] = m
	}
	for _, q := range []string{"dedup/at-least-once", "dedup/transactional"} {
		if m, ok := seen[q]; !ok || m.EventsPerSec <= 0 {
			t.Errorf("%s: %+v (measured: %v) in:\n%s", q, m, ok, out)
		}
	}
	if m := seen["dedup/transactional"]; m.Checkpoints < 1 {
		t.Errorf("transactional run drained without a completed checkpoint: %d", m.Checkpoints)
	}
	if _, err := weir(t, "bench", "nexmark", "-effects", "outbox"); err == nil || !strings.Contains(err.Error(), "unknown sink effect") {
		t.Errorf("-effects outbox: %v, want an unknown sink effect", err)
	}
}

// measurements reads the -json lines of a benchmark's output.
func measurements(t *testing.T, out string) []bench.Measurement {
	t.Helper()
	var ms []bench.Measurement
	for line := range strings.Lines(out) {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var m bench.Measurement
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		ms = append(ms, m)
	}
	return ms
}

// TestBenchNexmarkProfilesTheMeasuredSpan: with -profile, each process of
// b-preloaded profiles the measured span alone, and the run writes its cost
// model — CPU per event by stage, the broker's included — beside the
// profiles.
func TestBenchNexmarkProfilesTheMeasuredSpan(t *testing.T) {
	dir := t.TempDir()
	out, err := weir(t, "bench", "nexmark", "-query", "q7", "-modes", modePreloaded, "-events", "5000", "-json", "-profile", dir, "-dir", t.TempDir())
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, f := range []string{"q7-broker.cpu.pprof", "q7-nexmark-q7.cpu.pprof", "q7-coordinator.cpu.pprof", "q7-broker.block.pprof", "q7-nexmark-q7.heap.pprof"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	costs, err := os.ReadFile(filepath.Join(dir, "q7-costs.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for line := range strings.Lines(string(costs)) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "all" {
			all = f
		}
	}
	// all, then the broker, the coordinator, the service and the total.
	if !strings.Contains(string(costs), "CPU per event over") || len(all) != 5 || all[4] == "-" {
		t.Errorf("the cost model has no total of every process:\n%s", costs)
	}
}

// TestBenchNexmarkIngestStreams runs the ingest modes in the order asked,
// one stream beside the partitions over three, and refuses fewer than one
// stream.
func TestBenchNexmarkIngestStreams(t *testing.T) {
	out, err := weir(t, "bench", "nexmark", "-modes", modeStreams+","+modeAtomic, "-ingest-streams", "3", "-events", "4000", "-json", "-dir", t.TempDir())
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	ms := measurements(t, out)
	if len(ms) != 2 || ms[0].Mode != modeStreams || ms[1].Mode != modeAtomic {
		t.Fatalf("measured %+v, want %s then %s", ms, modeStreams, modeAtomic)
	}
	for _, m := range ms {
		if m.Events != 4000 || m.EventsPerSec <= 0 || m.BrokerCPUSeconds <= 0 {
			t.Errorf("%s: %d events at %.0f/s, broker CPU %.2fs", m.Mode, m.Events, m.EventsPerSec, m.BrokerCPUSeconds)
		}
	}
	if !strings.Contains(ms[0].Note, "over 3 streams") {
		t.Errorf("%s: note %q does not say over how many streams", modeStreams, ms[0].Note)
	}
	if _, err := weir(t, "bench", "nexmark", "-modes", modeStreams, "-ingest-streams", "0"); err == nil || !strings.Contains(err.Error(), "-ingest-streams 0") {
		t.Errorf("-ingest-streams 0: %v, want it refused", err)
	}
}

// TestBenchNexmarkIngestStreamsOnACluster: with -cluster 3 the ingest
// modes run on three brokers, every stream replicated to each, and say
// which node leads each stream; other modes are refused.
func TestBenchNexmarkIngestStreamsOnACluster(t *testing.T) {
	out, err := weir(t, "bench", "nexmark", "-modes", modeStreams, "-cluster", "3", "-events", "2000", "-json", "-dir", t.TempDir())
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	ms := measurements(t, out)
	if len(ms) != 1 || ms[0].EventsPerSec <= 0 {
		t.Fatalf("measured %+v", ms)
	}
	_, leaders, ok := strings.Cut(ms[0].Note, "leaders ")
	leaders, _, _ = strings.Cut(leaders, ";")
	if names := strings.Split(leaders, ", "); !ok || len(names) != 4 || !strings.Contains(ms[0].Note, "3 replicas") {
		t.Errorf("note %q does not name the leader of each of 4 streams of 3 replicas", ms[0].Note)
	} else {
		for _, n := range names {
			if !strings.HasPrefix(n, "weir-") {
				t.Errorf("stream led by %q, want a node of the cluster", n)
			}
		}
	}
	if _, err := weir(t, "bench", "nexmark", "-modes", modePreloaded+","+modeStreams, "-cluster", "3"); err == nil || !strings.Contains(err.Error(), "ingest modes") {
		t.Errorf("-cluster 3 with %s: %v, want it refused", modePreloaded, err)
	}
}

// TestBenchNexmarkPipelineOverStreams runs q7 preloaded with its ingress
// over one stream and over two, side by side and labelled; the baselines,
// which read one stream, are refused with -streams.
func TestBenchNexmarkPipelineOverStreams(t *testing.T) {
	out, err := weir(t, "bench", "nexmark", "-query", "q7", "-modes", modePreloaded, "-streams", "1,2", "-events", "2000", "-json", "-dir", t.TempDir())
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	seen := map[string]bench.Measurement{}
	for _, m := range measurements(t, out) {
		seen[m.Query] = m
	}
	for _, q := range []string{"q7/streams=1", "q7/streams=2"} {
		// Events handled before every operator is ready are not timed:
		// on a loaded machine most of the 2,000 can be.
		if m, ok := seen[q]; !ok || m.EventsPerSec <= 0 || m.Events <= 0 || m.Events > 2000 {
			t.Errorf("%s: %+v (measured: %v) in:\n%s", q, m, ok, out)
		}
	}
	if _, err := weir(t, "bench", "nexmark", "-modes", modeFetchAck, "-streams", "2"); err == nil || !strings.Contains(err.Error(), "reads one stream") {
		t.Errorf("-streams 2 with %s: %v, want it refused", modeFetchAck, err)
	}
}
