// Package q5 is Nexmark query 5, hot items: the auctions with the most bids
// in every window of the contract's emission.window (10 seconds, sliding by
// 2 in the shipped contract).
//
// Three operators, declared in contracts/nexmark-q5.yaml: q5-key keys bids
// by auction; q5-count counts each auction's bids per sliding window (the
// window library, state keyed by auction) and routes each count to the
// window it belongs to; q5-max keeps, per window, the highest count and the
// auctions that reach it, and emits them to the json result edge
// (weir.nexmark-q5.results.0) when the watermark passes the window's end.
package q5

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/window"
)

// Version is reported to $SRV.INFO.
const Version = "0.1.0"

// Service is the service name operators are assigned to in the contract.
const Service = "nexmark-q5"

// State families.
const (
	CountFamily = "q5-counts"
	PartFamily  = "q5-parts"
	MaxFamily   = "q5-max"
)

// Shape is the counting window of the shipped contract
// (contracts/nexmark-q5.yaml, emission.window), for code that builds the
// query's reference model; the operators read the shape of the contract
// they run.
func Shape() window.Spec { return window.ShippedShape("nexmark-q5") }

// Key is the q5-key operator: bids keyed by auction.
func Key() operator.Operator {
	return nexmark.Bids(func(b nexmark.Bid) string { return strconv.FormatInt(b.Auction, 10) })
}

// WindowKey is the key a count is routed by: its window.
func WindowKey(w window.Window) string { return w.String() }

// NewPart builds q5-part, the first phase of a count split over hot
// auctions: when the contract splits the bids edge (edges[].split) and
// puts q5-part between it and q5-count, q5-part counts each part of an
// auction and q5-count merges the parts (window.NewPartial, window.Merge).
func NewPart(c *contracts.Contract) (operator.Operator, error) {
	spec, err := window.SpecOf(c)
	if err != nil {
		return nil, err
	}
	return window.NewPartial(spec, window.Count(), PartFamily)
}

// NewCount builds q5-count: the window library counting per auction — or,
// behind q5-part, merging its parts — its panes routed by window instead
// of by auction.
func NewCount(c *contracts.Contract) (operator.Operator, error) {
	spec, err := window.SpecOf(c)
	if err != nil {
		return nil, err
	}
	var w operator.Operator
	if _, split := c.Operator("q5-part"); split {
		w, err = window.NewMerge(spec, window.Count(), CountFamily)
	} else {
		w, err = window.New(spec, window.Count(), CountFamily)
	}
	if err != nil {
		return nil, err
	}
	return operator.Chain(w, operator.Rekey(func(r record.Record) ([]byte, error) {
		p, err := window.DecodePane(r.Value)
		if err != nil {
			return nil, err
		}
		return []byte(WindowKey(p.Window)), nil
	})), nil
}

// Hot is one window's result.
type Hot struct {
	Window   window.Window `json:"window"`
	Count    uint64        `json:"count"`
	Auctions []string      `json:"auctions"`
}

// Max is q5-max: per window, the highest count and its auctions.
type Max struct{}

// Families names the state Max keeps.
func (Max) Families() []string { return []string{MaxFamily} }

// Process folds one auction's count into its window's result and sets the
// timer that emits it.
func (Max) Process(c operator.Env, r record.Record) error {
	p, err := window.DecodePane(r.Value)
	if err != nil {
		return operator.Poison("payload", err)
	}
	var v struct {
		Count uint64 `json:"count"`
	}
	if err := json.Unmarshal(p.Value, &v); err != nil {
		return operator.Poison("payload.value", fmt.Errorf("count pane value %s: %w", p.Value, err))
	}
	st := c.Value(MaxFamily)
	h := Hot{Window: p.Window}
	if b, ok, err := st.Get(); err != nil {
		return err
	} else if ok {
		if err := json.Unmarshal(b, &h); err != nil {
			return err
		}
	}
	switch {
	case v.Count > h.Count:
		h.Count, h.Auctions = v.Count, []string{p.Key}
	case v.Count == h.Count && !slices.Contains(h.Auctions, p.Key):
		h.Auctions = append(h.Auctions, p.Key)
		slices.Sort(h.Auctions)
	}
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := st.Set(b); err != nil {
		return err
	}
	return c.SetTimer(state.EventTime, p.Window.MaxTimestamp(), "emit")
}

// OnTimer emits a window's result once every count of it has arrived: the
// counts carry the window's maximum timestamp as event time, and the
// watermark passing it says no more will come.
func (Max) OnTimer(c operator.Env, t state.Timer) error {
	st := c.Value(MaxFamily)
	b, ok, err := st.Get()
	if err != nil || !ok {
		return err
	}
	var h Hot
	if err := json.Unmarshal(b, &h); err != nil {
		return err
	}
	if err := st.Clear(); err != nil {
		return err
	}
	return c.Emit(record.Record{ID: "q5|" + h.Window.String(), Key: c.Key(), Time: t.Time, Value: b})
}

// Factories are the service's operators.
func Factories() map[string]stream.Factory {
	return map[string]stream.Factory{
		"q5-key":   func(*contracts.Contract) (operator.Operator, error) { return Key(), nil },
		"q5-part":  NewPart,
		"q5-count": NewCount,
		"q5-max":   func(*contracts.Contract) (operator.Operator, error) { return Max{}, nil },
	}
}

// Run runs the service with command-line args and environment.
func Run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return stream.Main(ctx, Service, Version, args, getenv, stderr, Factories())
}
