// Package q0 is Nexmark query 0, pass-through: every bid goes on to the
// json result edge (weir.nexmark-q0.results.<p>) unchanged, keyed by its
// auction; persons and auctions are dropped.
//
// One operator, declared in contracts/nexmark-q0.yaml. It computes nothing,
// so its cost is the engine's floor — what every other query pays before
// it does its own work.
package q0

import (
	"context"
	"io"
	"strconv"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/stream"
)

// Version is reported to $SRV.INFO.
const Version = "0.1.0"

// Service is the service name operators are assigned to in the contract.
const Service = "nexmark-q0"

// Pass is the q0-pass operator: every bid, keyed by its auction.
func Pass() operator.Operator {
	return nexmark.Bids(func(b nexmark.Bid) string { return strconv.FormatInt(b.Auction, 10) })
}

// Factories are the service's operators.
func Factories() map[string]stream.Factory {
	return map[string]stream.Factory{
		"q0-pass": func(*contracts.Contract) (operator.Operator, error) { return Pass(), nil },
	}
}

// Run runs the service with command-line args and environment.
func Run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return stream.Main(ctx, Service, Version, args, getenv, stderr, Factories())
}
