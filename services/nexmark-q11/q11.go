// Package q11 is Nexmark query 11, user sessions: how many bids each bidder
// made in each session, a session closing after the contract's gap
// (emission.window, 10 seconds) of event time without a bid from that
// bidder.
//
// Two operators, declared in contracts/nexmark-q11.yaml: q11-key reads the
// ingress, keeps bids only and keys them by bidder; q11-sessions merges
// sessions (a late bid can join two sessions into one) and emits each
// session's count to the json result edge (weir.nexmark-q11.results.<p>).
// With retracting accumulation every revision of a session retracts what
// was emitted for it before. The service runs both (WEIR_OPERATOR=*), or
// either alone.
package q11

import (
	"context"
	"io"
	"strconv"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/window"
)

// Version is reported to $SRV.INFO.
const Version = "0.1.0"

// Service is the service name operators are assigned to in the contract.
const Service = "nexmark-q11"

// Shape is the window shape of the shipped contract
// (contracts/nexmark-q11.yaml, emission.window), for code that builds the
// query's reference model; the operator reads the shape of the contract
// it runs.
func Shape() window.Spec { return window.ShippedShape("nexmark-q11") }

// Family is the session state family.
const Family = "q11-sessions"

// Key is the q11-key operator: bids keyed by bidder.
func Key() operator.Operator {
	return nexmark.Bids(func(b nexmark.Bid) string { return strconv.FormatInt(b.Bidder, 10) })
}

// NewSessions builds the q11-sessions operator from the contract's
// emission section: its session gap, triggers and lateness.
func NewSessions(c *contracts.Contract) (operator.Operator, error) {
	spec, err := window.SpecOf(c)
	if err != nil {
		return nil, err
	}
	return window.New(spec, window.Count(), Family)
}

// Factories are the service's operators.
func Factories() map[string]stream.Factory {
	return map[string]stream.Factory{
		"q11-key":      func(*contracts.Contract) (operator.Operator, error) { return Key(), nil },
		"q11-sessions": NewSessions,
	}
}

// Run runs the service with command-line args and environment.
func Run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return stream.Main(ctx, Service, Version, args, getenv, stderr, Factories())
}
