package harness

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirflow/weir/internal/results"
)

// TestChaos runs weir chaos's short seeded sample over every shipped
// pipeline, in one checkpoint mode or the other, with two coordinators:
// seed 1's six rounds inject each kind of fault once — a service, a
// coordinator and the broker SIGKILLed and started again, a rescale from
// one instance to two with a process killed while the instances restore,
// a process paused with SIGSTOP past the coordinators' lease, and a
// service restored on a new host — while the corpus is published. Every
// run's results equal the failure-free run's, revision by revision, and so
// do its dead letters and side outputs; no
// process ends on its own; each stays within the memory it declares.
// Longer runs are docs/RELIABILITY.md's command.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("kills real processes")
	}
	interrupted := 0
	for _, sample := range []struct{ queries, mode string }{
		{"dedup,q5,q11,auctions", "aligned"},
		{"q0,q7,q8", "unaligned"},
	} {
		out, err := weir(t, "chaos", "-query", sample.queries, "-modes", sample.mode, "-rounds", "6", "-events", "2000",
			"-rate", "1000", "-seed", "1", "-stall", "60s", "-json", "-dir", t.TempDir())
		if err != nil {
			t.Errorf("%v\n%s", err, out)
		}
		runs := 0
		for _, o := range outcomes(t, out) {
			runs++
			interrupted += o.Interrupted
			// The corpus's future timestamps are letters in every pipeline.
			if !o.OK || o.Mode != sample.mode || len(o.Faults) != len(chaosFaults) || o.Results == 0 || o.Revisions < o.Results ||
				o.Letters == 0 || o.Exits > 0 || len(o.PeakRSS) == 0 {
				t.Errorf("%s", o)
				logTails(t, o.Logs)
			}
			t.Log(o)
		}
		if want := len(strings.Split(sample.queries, ",")); runs != want {
			t.Fatalf("%d runs reported, want %d:\n%s", runs, want, out)
		}
	}
	if interrupted == 0 {
		t.Error("no rescale was interrupted: every kill came after the new layout's first checkpoint")
	}
}

// TestChaosOnACluster is weir chaos -cluster 3's short sample: dedup on a
// three-node cluster, every stream and bucket replicated to each node, a
// node SIGKILLed mid-run and a process — a node, a service or a
// coordinator — paused past the lease; the results and letters equal the
// failure-free run's. Longer runs are
// docs/RELIABILITY.md's command.
func TestChaosOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("kills real processes")
	}
	out, err := weir(t, "chaos", "-cluster", "3", "-query", "dedup", "-modes", "aligned", "-faults", "broker,pause", "-rounds", "2",
		"-events", "1000", "-rate", "1000", "-seed", "2", "-stall", "60s", "-json", "-dir", t.TempDir())
	if err != nil {
		t.Errorf("%v\n%s", err, out)
	}
	var o chaosOutcome
	if outs := outcomes(t, out); len(outs) > 0 {
		o = outs[len(outs)-1]
	}
	if !o.OK || o.Faults[faultBroker] != 1 || o.Results == 0 || o.Letters == 0 || o.Exits > 0 || !strings.Contains(strings.Join(o.Schedule, ";"), "kill broker-") {
		t.Errorf("%s", o)
		logTails(t, o.Logs)
	}
	t.Log(o)
}

// outcomes reads the -json lines of weir chaos's output: a run's outcome
// each; its progress, on stderr, is left out.
func outcomes(t *testing.T, out string) []chaosOutcome {
	t.Helper()
	var outs []chaosOutcome
	for line := range strings.SplitSeq(out, "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var o chaosOutcome
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		outs = append(outs, o)
	}
	return outs
}

// logTails logs the last lines of every process log of a failed run's
// directory: CI keeps no files, only what a test prints.
func logTails(t *testing.T, dir string) {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil || len(b) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		t.Logf("the last lines of %s:\n%s", filepath.Base(f), strings.Join(lines[max(0, len(lines)-25):], "\n"))
	}
}

// judge finds every kind of difference between a run and the failure-free
// one: a missing result, a missing, extra or different revision, a result
// the failure-free run lacks, a message stored twice.
func TestChaosJudge(t *testing.T) {
	rev := func(v string) results.Revision { return results.Revision{Value: json.RawMessage(v)} }
	want := map[string]map[string][]results.Revision{"results": {
		"a": {rev(`1`), rev(`2`)},
		"b": {rev(`1`)},
		"c": {rev(`1`)},
		"d": {rev(`1`), rev(`2`)},
		"e": {rev(`1`)},
	}}
	got := map[string]map[string][]results.Revision{"results": {
		"a": {rev(`1`), rev(`2`)},
		"b": {rev(`1`), rev(`9`)}, // an extra revision
		"c": {rev(`7`)},           // a different one
		"d": {rev(`1`)},           // one missing
		"x": {rev(`1`)},           // not in the failure-free run; e missing
	}}
	var o chaosOutcome
	o.judge(want, got, []string{"p.results.a"})
	if o.Missing != 2 || o.Extra != 2 || o.Differ != 1 || o.Repeated != 1 || o.Problem == "" {
		t.Fatalf("%+v, want 2 missing (d's second revision, e), 2 extra (b's second revision, x), 1 different (c), 1 repeated", o)
	}
	o.judge(want, want, nil)
	if o.Missing+o.Extra+o.Differ+o.Repeated != 0 || o.Problem != "" {
		t.Fatalf("equal runs judged %+v", o)
	}
}
