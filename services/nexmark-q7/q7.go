// Package q7 is Nexmark query 7, highest bid: the highest bid of every
// 10-second tumbling window of event time.
//
// Two operators, declared in contracts/nexmark-q7.yaml: q7-key keeps bids
// only and sends them all to one key, since the query is global; it runs
// in q7-max's step (operators[].before), which reads the ingress, keeps
// each window's running maximum and emits panes to the json result edge
// (weir.nexmark-q7.results.0), one JSON message per pane, as the window
// shape, triggers, accumulation and allowed lateness in the contract
// (emission) say. With one key, q7-max runs as one instance whatever the
// chain, so no hop lies between them.
package q7

import (
	"context"
	"io"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/window"
)

// Version is reported to $SRV.INFO.
const Version = "0.1.0"

// Service is the service name operators are assigned to in the contract.
const Service = "nexmark-q7"

// Shape is the window shape of the shipped contract
// (contracts/nexmark-q7.yaml, emission.window), for code that builds the
// query's reference model; the operator reads the shape of the contract
// it runs.
func Shape() window.Spec { return window.ShippedShape("nexmark-q7") }

// Family is the window state family.
const Family = "q7-windows"

// AllBids is the single key of the global query.
const AllBids = "all"

// Key is q7-key: every bid, under the one key of the query. The contract
// chains it into q7-max's step.
func Key() operator.Operator { return nexmark.Bids(func(nexmark.Bid) string { return AllBids }) }

// NewMax builds the q7-max operator from the contract's emission section:
// its window, triggers and lateness.
func NewMax(c *contracts.Contract) (operator.Operator, error) {
	spec, err := window.SpecOf(c)
	if err != nil {
		return nil, err
	}
	return window.New(spec, window.MaxBy("price"), Family)
}

// Factories are the service's operators.
func Factories() map[string]stream.Factory {
	return map[string]stream.Factory{
		"q7-key": func(*contracts.Contract) (operator.Operator, error) { return Key(), nil },
		"q7-max": NewMax,
	}
}

// Run runs the service with command-line args and environment.
func Run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return stream.Main(ctx, Service, Version, args, getenv, stderr, Factories())
}
