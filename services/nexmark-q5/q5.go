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
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

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

// SchemaVersion is 2: a window's state is binary (encodeHot), no longer
// the JSON result it emits.
func (Max) SchemaVersion() int { return 2 }

// Process folds one auction's count into its window's result and sets the
// timer that emits it.
func (Max) Process(c operator.Env, r record.Record) error {
	p, err := window.DecodePane(r.Value)
	if err != nil {
		return operator.Poison("payload", err)
	}
	n, err := paneCount(p.Value)
	if err != nil {
		return operator.Poison("payload.value", fmt.Errorf("count pane value %s: %w", p.Value, err))
	}
	st := c.Value(MaxFamily)
	h := Hot{Window: p.Window}
	if b, ok, err := st.Get(); err != nil {
		return err
	} else if ok {
		if h, err = decodeHot(b); err != nil {
			return err
		}
	}
	switch {
	case n > h.Count:
		h.Count, h.Auctions = n, []string{p.Key}
	case n == h.Count && !slices.Contains(h.Auctions, p.Key):
		h.Auctions = append(h.Auctions, p.Key)
		slices.Sort(h.Auctions)
	}
	if err := st.Set(encodeHot(h)); err != nil {
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
	h, err := decodeHot(b)
	if err != nil {
		return err
	}
	v, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := st.Clear(); err != nil {
		return err
	}
	return c.Emit(record.Record{ID: "q5|" + h.Window.String(), Key: c.Key(), Time: t.Time, Value: v})
}

// paneCount reads the count of a count pane's value, {"count":N}, as
// window.Count renders it; anything else through encoding/json.
func paneCount(v []byte) (uint64, error) {
	if d, ok := bytes.CutPrefix(v, []byte(`{"count":`)); ok {
		if d, ok := bytes.CutSuffix(d, []byte(`}`)); ok {
			if n, err := strconv.ParseUint(string(d), 10, 64); err == nil {
				return n, nil
			}
		}
	}
	var c struct {
		Count *uint64 `json:"count"`
	}
	if err := json.Unmarshal(v, &c); err != nil {
		return 0, err
	}
	if c.Count == nil {
		return 0, fmt.Errorf("no count")
	}
	return *c.Count, nil
}

// encodeHot is a window's state: its bounds (Unix ms), the count, and the
// auctions that reach it.
func encodeHot(h Hot) []byte {
	b := binary.AppendVarint(nil, h.Window.Start.UnixMilli())
	b = binary.AppendVarint(b, h.Window.End.UnixMilli())
	b = binary.AppendUvarint(b, h.Count)
	b = binary.AppendUvarint(b, uint64(len(h.Auctions)))
	for _, a := range h.Auctions {
		b = binary.AppendUvarint(b, uint64(len(a)))
		b = append(b, a...)
	}
	return b
}

func decodeHot(b []byte) (Hot, error) {
	fail := func() (Hot, error) { return Hot{}, fmt.Errorf("q5: corrupt window state %x", b) }
	r := b
	v := func() (int64, bool) {
		x, n := binary.Varint(r)
		r = r[max(n, 0):]
		return x, n > 0
	}
	u := func() (uint64, bool) {
		x, n := binary.Uvarint(r)
		r = r[max(n, 0):]
		return x, n > 0
	}
	start, ok1 := v()
	end, ok2 := v()
	count, ok3 := u()
	n, ok4 := u()
	if !ok1 || !ok2 || !ok3 || !ok4 || n > uint64(len(r)) {
		return fail()
	}
	h := Hot{Window: window.Window{Start: time.UnixMilli(start).UTC(), End: time.UnixMilli(end).UTC()}, Count: count, Auctions: make([]string, 0, n)}
	for range n {
		l, ok := u()
		if !ok || l > uint64(len(r)) {
			return fail()
		}
		h.Auctions = append(h.Auctions, string(r[:l]))
		r = r[l:]
	}
	if len(r) != 0 {
		return fail()
	}
	return h, nil
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
