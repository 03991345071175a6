// Package auctions is the Nexmark auction flow: each auction is closed at
// its expiry, in event time, and its winning bid — the highest at or above
// the reserve, bid before the auction expired — is charged to the winner
// through the outbox (package outbox), so the charge happens once however
// often the pipeline fails and replays.
//
// Close is the operator. Its input is the Nexmark event stream keyed by
// auction (an auction's key is its ID, a bid's its auction), so an
// auction's events all reach the instance that keeps its state.
//
// The pipeline is contracts/nexmark-winning-bids.yaml (Nexmark's query 9,
// winning bids, with each winner charged): this service runs its one
// operator, which writes the intents to the outbox edge; the dispatcher
// (package dispatcher) performs them against a payment provider, such as
// the simulator in services/provider.
//
// # The auction flow
//
// The auction flow (contracts/nexmark-winning-bids.yaml,
// services/nexmark-auctions) is the outbox's shipped pipeline: Nexmark q9,
// winning bids, with each winner charged. Its operator reads the ingress
// keyed by auction (an auction's key is its ID, a bid's its auction), keeps
// per auction its event, its best bid and whether it closed (a value family
// with a TTL), sets an event-time timer at the expiry, and on it records one
// intent, keyed by the auction event's coordinate. Bids that come before
// their auction are kept while they could still win (one placed no later
// than another and beating it makes the other lose whatever the expiry), at
// most 64, beyond which they go to the side output; bids placed after the
// expiry or arriving after the close go there too. weir demo -query
// auctions runs it with the provider simulator (journal in the data
// directory) and a dispatcher in-process; the compose stack and
// deploy/k8s/effects.yaml run a dispatcher per outbox pipeline and the
// simulator.
package auctions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/outbox"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
	"github.com/weirflow/weir/pkg/stream"
)

// Version is reported to $SRV.INFO.
const Version = "0.1.0"

// Service is the service name the operator is assigned to in the contract.
const Service = "nexmark-auctions"

// Family is the state family of the auctions: per auction, its event, its
// best bid so far and whether it closed.
const Family = "auctions"

// Operator is the operator's ID in the auction flow's contract.
const Operator = "auction-close"

// ChargeKind is the kind of the intents Close records: the dispatcher POSTs
// them to <provider>/charges.
const ChargeKind = "charges"

const closeTimer = "close"

// Charge is the payload of a charge intent.
type Charge struct {
	Auction int64 `json:"auction"`
	Seller  int64 `json:"seller"`
	Bidder  int64 `json:"bidder"`
	// Amount is the winning bid's price, in cents.
	Amount int64  `json:"amount"`
	Bid    string `json:"bid"` // the winning bid event's ID
}

// auction is an auction's state.
type auction struct {
	Auction *nexmark.Auction  `json:"auction,omitempty"`
	At      record.Coordinate `json:"at"` // of the auction event
	Best    *bid              `json:"best,omitempty"`
	// Early are bids that came before the auction event: whether they
	// were bid before it expired is known only once it arrives.
	Early  []bid `json:"early,omitempty"`
	Closed bool  `json:"closed,omitempty"`
}

// bid is a bid with the identity of its event.
type bid struct {
	nexmark.Bid
	ID string            `json:"id"`
	At record.Coordinate `json:"at"`
}

// beats reports whether b wins over c: a higher price, or at the same
// price the earlier bid, then the lower bidder — an order that does not
// depend on the order bids arrive in.
func (b bid) beats(c *bid) bool {
	switch {
	case c == nil || b.Price != c.Price:
		return c == nil || b.Price > c.Price
	case b.DateTime != c.DateTime:
		return b.DateTime < c.DateTime
	}
	return b.Bidder < c.Bidder
}

// Close closes auctions at their expiry and records the winner's charge.
type Close struct{ pipeline string }

// New returns the operator of pipeline, whose name goes into the charges'
// idempotency keys.
func New(pipeline string) *Close { return &Close{pipeline: pipeline} }

// Factories are the service's operators.
func Factories() map[string]stream.Factory {
	return map[string]stream.Factory{
		Operator: func(c *contracts.Contract) (operator.Operator, error) { return New(c.Pipeline), nil },
	}
}

// Run runs the service with command-line args and environment.
func Run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return stream.Main(ctx, Service, Version, args, getenv, stderr, Factories())
}

// Families implements operator.StateUser.
func (o *Close) Families() []string { return []string{Family} }

// Process keeps auctions and bids; persons are not its business.
func (o *Close) Process(env operator.Env, r record.Record) error {
	ev, err := nexmark.Decode(r.Value)
	if err != nil {
		return operator.Poison("value", err)
	}
	if ev.Kind != nexmark.KindAuction && ev.Kind != nexmark.KindBid {
		return nil
	}
	st, err := load(env)
	if err != nil {
		return err
	}
	switch ev.Kind {
	case nexmark.KindAuction:
		if st.Auction != nil {
			return nil // the same auction again: a duplicate event
		}
		st.Auction, st.At = ev.Auction, r.At
		for _, b := range st.Early {
			if err := o.offer(env, &st, b, r); err != nil {
				return err
			}
		}
		st.Early = nil
		if err := env.SetTimer(state.EventTime, time.UnixMilli(st.Auction.Expires), closeTimer); err != nil {
			return err
		}
	case nexmark.KindBid:
		b := bid{Bid: *ev.Bid, ID: r.ID, At: r.At}
		switch {
		case st.Closed:
			return env.SideOutput(r, fmt.Sprintf("auction %d closed before this bid arrived", b.Auction))
		case st.Auction == nil:
			if err := st.wait(env, b, r); err != nil {
				return err
			}
		default:
			if err := o.offer(env, &st, b, r); err != nil {
				return err
			}
		}
	}
	return save(env, st)
}

// MaxEarly bounds the bids an auction's state keeps while its auction
// event has not come.
const MaxEarly = 64

// wait keeps a bid that came before its auction's event. Which bids count
// depends on the expiry, unknown yet, so it keeps every bid that could
// still win: one bid placed no later than another and beating it makes the
// other one lose whatever the expiry. Beyond MaxEarly candidates a bid goes
// to the side output rather than grow the state without bound.
func (st *auction) wait(env operator.Env, b bid, r record.Record) error {
	for _, e := range st.Early {
		if e.ID == b.ID || (e.DateTime <= b.DateTime && e.beats(&b)) {
			return nil // a duplicate, or a bid that cannot win
		}
	}
	kept := st.Early[:0]
	for _, e := range st.Early {
		if !(b.DateTime <= e.DateTime && b.beats(&e)) {
			kept = append(kept, e)
		}
	}
	st.Early = kept
	if len(st.Early) >= MaxEarly {
		return env.SideOutput(r, fmt.Sprintf("auction %d has not arrived and already has %d candidate bids waiting for it", b.Auction, MaxEarly))
	}
	st.Early = append(st.Early, b)
	return nil
}

// offer weighs a bid against the best: a bid placed after the auction
// expired goes to the side output with its own coordinate.
func (o *Close) offer(env operator.Env, st *auction, b bid, r record.Record) error {
	if b.DateTime > st.Auction.Expires {
		late := record.Record{ID: b.ID, At: b.At, Time: time.UnixMilli(b.DateTime), Key: r.Key, Value: r.Value}
		if b.ID != r.ID {
			late.Value = nil // an early bid's own event is not at hand
		}
		return env.SideOutput(late, fmt.Sprintf("bid at %d on auction %d, which expired at %d", b.DateTime, b.Auction, st.Auction.Expires))
	}
	if b.beats(st.Best) {
		st.Best = &b
	}
	return nil
}

// OnTimer closes the auction: the winning bid, if it reaches the reserve,
// becomes a charge intent keyed by the auction event's coordinate, so a
// replay of the same input records the same key.
func (o *Close) OnTimer(env operator.Env, t state.Timer) error {
	st, err := load(env)
	if err != nil || st.Auction == nil || st.Closed {
		return err
	}
	st.Closed = true
	if w := st.Best; w != nil && w.Price >= st.Auction.Reserve {
		payload, _ := json.Marshal(Charge{Auction: st.Auction.ID, Seller: st.Auction.Seller, Bidder: w.Bidder, Amount: w.Price, Bid: w.ID})
		in := outbox.Intent{Key: outbox.Key(o.pipeline, Operator, st.At, 0), Kind: ChargeKind, Payload: payload, Source: st.At.String()}
		rec, err := in.Record(time.UnixMilli(st.Auction.Expires))
		if err != nil {
			return err
		}
		rec.At = st.At
		if err := env.Emit(rec); err != nil {
			return err
		}
	}
	return save(env, st)
}

func load(env operator.Env) (auction, error) {
	var st auction
	v, ok, err := env.Value(Family).Get()
	if err != nil || !ok {
		return st, err
	}
	if err := json.Unmarshal(v, &st); err != nil {
		return st, errors.Join(errors.New("auctions: corrupt auction state"), err)
	}
	return st, nil
}

func save(env operator.Env, st auction) error {
	v, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return env.Value(Family).Set(v)
}
