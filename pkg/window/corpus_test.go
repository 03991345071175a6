package window

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/weirflow/weir/pkg/record"
)

// kindVariants are the window shapes every corpus script is replayed with.
var kindVariants = []Spec{
	{Kind: Tumbling, Size: 10 * time.Second},
	{Kind: Sliding, Size: 10 * time.Second, Slide: 5 * time.Second},
	{Kind: Session, Gap: 3 * time.Second},
	{Kind: Global},
}

// variant is spec with the window shape of shape and accumulation acc,
// keeping its triggers and lateness where the shape allows them. ok is
// false when the shape cannot be used (a global window needs an early
// trigger).
func variant(spec, shape Spec, acc Accumulation) (Spec, bool) {
	v := spec
	v.Kind, v.Size, v.Slide, v.Gap = shape.Kind, shape.Size, shape.Slide, shape.Gap
	v.Accumulation = acc
	v.OnTime = shape.Kind != Global
	if shape.Kind == Global {
		v.AllowedLateness, v.LateEach, v.LateEvery = 0, false, 0
	}
	return v, v.Validate() == nil
}

// TestCorpusVariants replays every corpus script under each window kind,
// accumulation mode and aggregator, checking the Operator against Evaluate
// and the invariants every pane sequence must keep.
func TestCorpusVariants(t *testing.T) {
	aggs := []Aggregator{Count(), MaxBy("n")}
	for _, sc := range loadScripts(t) {
		for _, shape := range kindVariants {
			for _, acc := range []Accumulation{Discarding, Accumulating, Retracting} {
				spec, ok := variant(sc.spec, shape, acc)
				if !ok {
					continue
				}
				for _, agg := range aggs {
					name := fmt.Sprintf("%s/%s/%s/%s", sc.name, shape.Kind, acc, agg.Name())
					t.Run(name, func(t *testing.T) {
						panes, _ := runBoth(t, spec, agg, sc.steps)
						checkInvariants(t, spec, panes)
					})
				}
			}
		}
	}
}

type windowKey struct {
	key        string
	start, end time.Time
}

// history is the decoded emissions of each window, in order.
func history(tb testing.TB, panes []record.Record) (map[windowKey][]Pane, []windowKey) {
	tb.Helper()
	h := map[windowKey][]Pane{}
	var order []windowKey
	for _, r := range panes {
		p, err := DecodePane(r.Value)
		if err != nil {
			tb.Fatal(err)
		}
		if r.ID != p.ID() || string(r.Key) != p.Key || !r.Time.Equal(p.Window.MaxTimestamp()) {
			tb.Fatalf("record %s does not match its pane %+v", r.ID, p)
		}
		k := windowKey{p.Key, p.Window.Start, p.Window.End}
		if h[k] == nil {
			order = append(order, k)
		}
		h[k] = append(h[k], p)
	}
	return h, order
}

// checkInvariants checks what holds for every pane sequence, whatever the
// input: versions count emissions from 1; indexes count firings from 0;
// timings go EARLY*, at most one ON_TIME, then LATE*; only the last firing
// is final; retractions (retracting mode only) take back exactly the
// previous insert; and in retracting mode a Count's inserts minus
// retractions equal the window's last value.
func checkInvariants(tb testing.TB, spec Spec, panes []record.Record) {
	tb.Helper()
	h, order := history(tb, panes)
	for _, k := range order {
		ps := h[k]
		fail := func(i int, format string, args ...any) {
			tb.Helper()
			tb.Fatalf("window %v of key %q, emission %d (%+v): %s", Window{k.start, k.end}, k.key, i, ps[i], fmt.Sprintf(format, args...))
		}
		var last json.RawMessage
		var net int64
		// A merged session continues the versions and pane indexes of the
		// sessions it absorbed; every other window starts at 1 and 0.
		version, index := uint64(1), uint64(0)
		if spec.Kind == Session {
			version, index = ps[0].Version, ps[0].Info.Index
		}
		onTime, late := false, false
		for i, p := range ps {
			if p.Version != version+uint64(i) {
				fail(i, "version %d, want %d", p.Version, version+uint64(i))
			}
			// A firing is a retraction followed by its insert, or a lone
			// retraction (a merged session's last word), or a lone insert.
			sameFiring := i > 0 && ps[i-1].Kind == Retract && p.Kind == Insert && ps[i-1].Info == p.Info
			if i > 0 && !sameFiring {
				index++
				if ps[i-1].Info.Final {
					fail(i, "emission after a final firing")
				}
			}
			if p.Info.Index != index {
				fail(i, "pane index %d, want %d", p.Info.Index, index)
			}
			switch p.Info.Timing {
			case Early:
				if onTime || late {
					fail(i, "EARLY after ON_TIME or LATE")
				}
			case OnTime:
				if (onTime && !sameFiring) || late {
					fail(i, "second ON_TIME pane, or after LATE")
				}
				onTime = true
			case Late:
				late = true
			}
			switch p.Kind {
			case Retract:
				if spec.Accumulation != Retracting {
					fail(i, "retraction in %s mode", spec.Accumulation)
				}
				if last == nil || string(last) != string(p.Value) {
					fail(i, "retracts %s, but the last insert was %s", p.Value, last)
				}
				net -= countOf(p.Value)
				last = nil
			case Insert:
				if spec.Accumulation == Retracting && last != nil {
					fail(i, "insert without retracting %s first", last)
				}
				net += countOf(p.Value)
				last = p.Value
			}
		}
		if spec.Accumulation == Retracting && net != countOf(last) {
			tb.Fatalf("window %v of key %q: inserts minus retractions count %d, last value %s", Window{k.start, k.end}, k.key, net, last)
		}
	}
}

// countOf is the "count" of a pane value, 0 for nil.
func countOf(v json.RawMessage) int64 {
	var c struct{ Count int64 }
	if v != nil {
		_ = json.Unmarshal(v, &c)
	}
	return c.Count
}

// finalValues is each window's last insert, "" when its last emission is a
// retraction.
func finalValues(tb testing.TB, panes []record.Record) map[windowKey]string {
	h, _ := history(tb, panes)
	out := map[windowKey]string{}
	for k, ps := range h {
		if p := ps[len(ps)-1]; p.Kind == Insert {
			out[k] = string(p.Value)
		} else {
			out[k] = ""
		}
	}
	return out
}

// TestRetractingCountBalances checks, on the corpus, that in retracting mode
// the inserts minus the retractions of a Count, summed over all windows,
// equal the number of accepted elements once every window has closed, for
// tumbling windows and sessions, whose elements are each in one window.
func TestRetractingCountBalances(t *testing.T) {
	for _, sc := range loadScripts(t) {
		for _, shape := range kindVariants[:3] {
			if shape.Kind == Sliding {
				continue
			}
			spec, ok := variant(sc.spec, shape, Retracting)
			if !ok {
				continue
			}
			steps := append(append([]Step(nil), sc.steps...), Step{Advance: time.Hour, Watermark: epoch(1000 * time.Hour)})
			panes, side := runBoth(t, spec, Count(), steps)
			var net int64
			for _, r := range panes {
				p, err := DecodePane(r.Value)
				if err != nil {
					t.Fatal(err)
				}
				if p.Kind == Retract {
					net -= countOf(p.Value)
				} else {
					net += countOf(p.Value)
				}
			}
			records := 0
			for _, st := range steps {
				if st.Record != nil {
					records++
				}
			}
			if want := int64(records - len(side)); net != want {
				t.Errorf("%s as %s: inserts minus retractions count %d, want %d accepted elements", sc.name, shape.Kind, net, want)
			}
		}
	}
}
