package window_test

import (
	"fmt"
	"time"

	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/window"
)

// Evaluate runs a spec over a script of records, watermarks and clock
// advances, and returns every pane the operator would emit.
func ExampleEvaluate() {
	spec := window.Spec{
		Kind:            window.Tumbling,
		Size:            time.Minute,
		EarlyCount:      2,
		OnTime:          true,
		LateEach:        true,
		AllowedLateness: time.Minute,
		Accumulation:    window.Retracting,
	}
	at := func(sec int) time.Time {
		return time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(sec) * time.Second)
	}
	event := func(id string, sec int) *record.Record {
		return &record.Record{Kind: record.Data, ID: id, Key: []byte("user-7"), Time: at(sec), Value: []byte(`{}`)}
	}
	script := []window.Step{
		{Record: event("e1", 10)},
		{Record: event("e2", 20)}, // two elements: an EARLY pane
		{Record: event("e3", 30)},
		{Watermark: at(60)},       // past 12:00:59.999: the ON_TIME pane
		{Record: event("e4", 40)}, // late but within a minute: a LATE pane
		{Watermark: at(120)},      // past 12:01:59.999: the window is gone
		{Record: event("e5", 50)}, // too late: side output
	}
	keyOf := func(r record.Record) []byte { return r.Key }
	panes, side, err := window.Evaluate(spec, window.Count(), keyOf, script)
	if err != nil {
		panic(err)
	}
	for _, r := range panes {
		p, _ := window.DecodePane(r.Value)
		fmt.Println(p.Info.Index, p.Info.Timing, p.Info.Final, p.Version, p.Kind, string(p.Value))
	}
	fmt.Println("side output:", side[0].ID)
	fmt.Println("first ID:", panes[0].ID)
	// Output:
	// 0 EARLY false 1 insert {"count":2}
	// 1 ON_TIME false 2 retract {"count":2}
	// 1 ON_TIME false 3 insert {"count":3}
	// 2 LATE false 4 retract {"count":3}
	// 2 LATE false 5 insert {"count":4}
	// side output: e5
	// first ID: user-7|2025-03-01T12:00:00.000Z|2025-03-01T12:01:00.000Z|v1|insert
}
