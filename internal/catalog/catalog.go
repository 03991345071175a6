package catalog

import (
	"fmt"
	"strings"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/window"
)

// Query is one pipeline the tools can run, registered once.
type Query struct {
	// Name is what -query names it: dedup, q5, auctions.
	Name string
	// Contract names its contract: a shipped one's file name without
	// .yaml (contracts.Shipped), unless Load is set.
	Contract string
	// Load loads a contract that is not shipped (a test's); nil for a
	// shipped one.
	Load func() (*contracts.Contract, error)
	// Service is the service whose operators it runs (operators[].service),
	// and Factories their constructors by operator ID.
	Service   string
	Factories map[string]stream.Factory
	// Results says how to read its results: a command line, %s the NATS
	// server's URL.
	Results string
	// Windowed is true when a watermark fires its results: a result is
	// due at its event time plus the contract's out-of-orderness, not at
	// its event's time (`weir bench nexmark`'s latency mode).
	Windowed bool
	// Baseline is the query written by hand with nats.go and maps, none
	// of weir's guarantees (bench.HandWritten); nil for none. A query
	// with one is among `weir bench nexmark -query all`.
	Baseline func() Baseline
	// Reference evaluates its window stage over the generated corpus
	// (test/queries_test.go); nil for none.
	Reference *Reference
}

// LoadContract loads the query's contract.
func (q Query) LoadContract() (*contracts.Contract, error) {
	if q.Load != nil {
		return q.Load()
	}
	return contracts.Shipped(q.Contract)
}

// Baseline is a query's logic as a user writes it by hand: Add takes an
// event, Fire closes what the watermark (ms) has passed; both publish what
// they emit. bench.HandWritten runs it.
type Baseline interface {
	Add(ev nexmark.Event, emit func(any))
	Fire(wm int64, emit func(any))
}

// Reference is how the reference evaluator sees a query: its window stage's
// shape and aggregate, and Input, which maps a generated event to the
// record that stage sees, or false when the query ignores the event.
type Reference struct {
	Shape window.Spec
	Agg   window.Aggregator
	Input func(nexmark.Event) (record.Record, bool)
}

// Catalog is a list of queries, in the order "all" runs them.
type Catalog []Query

// Lookup returns the query named name.
func (c Catalog) Lookup(name string) (Query, bool) {
	for _, q := range c {
		if q.Name == name {
			return q, true
		}
	}
	return Query{}, false
}

// Names lists the queries' names, in the catalog's order.
func (c Catalog) Names() []string {
	out := make([]string, len(c))
	for i, q := range c {
		out[i] = q.Name
	}
	return out
}

// Choose returns the queries a -query flag names: comma-separated names,
// or "all" for every query all accepts (nil: every one).
func (c Catalog) Choose(flag string, all func(Query) bool) ([]Query, error) {
	var out []Query
	if flag == "all" {
		for _, q := range c {
			if all == nil || all(q) {
				out = append(out, q)
			}
		}
		return out, nil
	}
	for name := range strings.SplitSeq(flag, ",") {
		q, ok := c.Lookup(name)
		if !ok {
			return nil, fmt.Errorf("unknown query %q (have %s)", name, strings.Join(c.Names(), ", "))
		}
		out = append(out, q)
	}
	return out, nil
}

// ForPipeline returns the query whose contract declares pipeline.
func (c Catalog) ForPipeline(pipeline string) (Query, bool) {
	for _, q := range c {
		if ct, err := q.LoadContract(); err == nil && ct.Pipeline == pipeline {
			return q, true
		}
	}
	return Query{}, false
}
