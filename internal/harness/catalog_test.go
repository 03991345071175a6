package harness

import (
	_ "embed"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/catalog"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream"
)

// A query of the test's own, registered in nothing but the catalog the
// test's harness runs (testHarness): its operator, its contract
// (testdata/people.yaml) and its hand-written baseline are here.

//go:embed testdata/people.yaml
var peopleContract []byte

// people emits every new person, keyed by their ID.
func people() operator.Operator {
	return operator.Func(func(env operator.Env, r record.Record) error {
		ev, err := nexmark.Decode(r.Value)
		if err != nil {
			return operator.Poison("payload", err)
		}
		if ev.Person == nil {
			return nil
		}
		v, err := json.Marshal(map[string]any{"person": ev.Person.ID, "name": ev.Person.Name})
		if err != nil {
			return err
		}
		return env.Emit(record.Record{Key: []byte(strconv.FormatInt(ev.Person.ID, 10)), Value: v})
	})
}

// handPeople is people written by hand.
type handPeople struct{}

func (handPeople) Add(ev nexmark.Event, emit func(any)) {
	if ev.Person != nil {
		emit(map[string]any{"person": ev.Person.ID, "name": ev.Person.Name})
	}
}
func (handPeople) Fire(int64, func(any)) {}

func peopleQuery() catalog.Query {
	return catalog.Query{
		Name: "people", Contract: "test-people", Service: "test-people",
		Load:      func() (*contracts.Contract, error) { return contracts.Parse("testdata/people.yaml", peopleContract) },
		Factories: map[string]stream.Factory{"people": func(*contracts.Contract) (operator.Operator, error) { return people(), nil }},
		Results:   "nats --server %s sub 'weir.test-people.results.>'",
		Baseline:  func() catalog.Baseline { return handPeople{} },
	}
}

// TestACatalogQueryRunsEverywhere: a query added to the catalog and
// nowhere else runs in the demo, in `weir bench nexmark` (its processes
// this test binary, TestMain) and in `weir chaos`, whose run under faults
// equals the failure-free one.
func TestACatalogQueryRunsEverywhere(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	t.Run("demo", func(t *testing.T) {
		out, err := weir(t, "demo", "-query", "people", "-duration", "4s", "-rate", "500", "-port", "0", "-status", "", "-data", t.TempDir())
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		m := regexp.MustCompile(`(?m)^  people +in (\d+), out (\d+)`).FindStringSubmatch(out)
		if !strings.Contains(out, "pipeline test-people (testdata/people.yaml)") || m == nil || m[1] == "0" || m[2] == "0" {
			t.Fatalf("the demo ran no people:\n%s", out)
		}
	})
	t.Run("bench", func(t *testing.T) {
		// Enough events that the pipeline is still reading them when every
		// operator reports ready, however slowly the machine answers: the
		// preloaded mode times only what is left then.
		out, err := weir(t, "bench", "nexmark", "-query", "people", "-events", "50000", "-json",
			"-modes", strings.Join([]string{modeFetchAck, modeHand, modePreloaded}, ","), "-dir", t.TempDir())
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		seen := map[string]bool{}
		for _, m := range measurements(t, out) {
			seen[m.Mode] = m.Query == "people" && m.EventsPerSec > 0
		}
		if !seen[modeFetchAck] || !seen[modeHand] || !seen[modePreloaded] {
			t.Fatalf("measured %v:\n%s", seen, out)
		}
	})
	t.Run("chaos", func(t *testing.T) {
		out, err := weir(t, "chaos", "-query", "people", "-modes", "aligned", "-faults", "service,coordinator", "-rounds", "2",
			"-events", "500", "-rate", "1000", "-seed", "1", "-stall", "60s", "-json", "-dir", t.TempDir())
		if err != nil {
			t.Errorf("%v\n%s", err, out)
		}
		outs := outcomes(t, out)
		if len(outs) != 1 {
			t.Fatalf("%d runs reported, want 1:\n%s", len(outs), out)
		}
		if o := outs[0]; o.Query != "people" || !o.OK || o.Results == 0 || len(o.Schedule) != 2 {
			t.Errorf("%s", o)
			logTails(t, o.Logs)
		}
	})
}
