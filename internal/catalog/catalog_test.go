package catalog

import (
	"slices"
	"testing"
)

// TestShippedQueriesAreWhole: every shipped query's contract loads, names
// its service, and every operator the contract gives that service has a
// factory; names and pipelines are unique, and a query is found by both.
func TestShippedQueriesAreWhole(t *testing.T) {
	cat := Shipped()
	pipelines := map[string]string{}
	for _, q := range cat {
		c, err := q.LoadContract()
		if err != nil {
			t.Fatalf("%s: %v", q.Name, err)
		}
		ops := 0
		for _, op := range c.Operators {
			if op.Service != q.Service {
				continue
			}
			ops++
			if _, ok := q.Factories[op.ID]; !ok {
				t.Errorf("%s: no factory for operator %s of service %s", q.Name, op.ID, q.Service)
			}
		}
		if ops == 0 {
			t.Errorf("%s: contract %s gives service %s no operator", q.Name, c.File, q.Service)
		}
		if other, ok := pipelines[c.Pipeline]; ok {
			t.Errorf("%s and %s both run pipeline %s", other, q.Name, c.Pipeline)
		}
		pipelines[c.Pipeline] = q.Name
		if got, ok := cat.ForPipeline(c.Pipeline); !ok || got.Name != q.Name {
			t.Errorf("ForPipeline(%s) = %s, want %s", c.Pipeline, got.Name, q.Name)
		}
	}
	names := cat.Names()
	if len(slices.Compact(slices.Sorted(slices.Values(names)))) != len(names) {
		t.Errorf("names repeat: %v", names)
	}
	if _, err := cat.Choose("q5,nope", nil); err == nil {
		t.Error("Choose took an unknown query")
	}
	if all, err := cat.Choose("all", func(q Query) bool { return q.Baseline != nil }); err != nil || len(all) == 0 || len(all) == len(cat) {
		t.Errorf("Choose(all, with a baseline) = %d of %d queries, %v", len(all), len(cat), err)
	}
}
