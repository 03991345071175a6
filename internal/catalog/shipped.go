package catalog

import (
	"strconv"

	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/window"
	"github.com/weirflow/weir/services/dedup"
	auctions "github.com/weirflow/weir/services/nexmark-auctions"
	q0 "github.com/weirflow/weir/services/nexmark-q0"
	q11 "github.com/weirflow/weir/services/nexmark-q11"
	q5 "github.com/weirflow/weir/services/nexmark-q5"
	q7 "github.com/weirflow/weir/services/nexmark-q7"
	q8 "github.com/weirflow/weir/services/nexmark-q8"
)

// Shipped is the catalog of the pipelines weir ships, in the order `weir
// chaos -query all` runs them.
func Shipped() Catalog {
	return Catalog{
		{Name: "dedup", Contract: "nexmark-dedup", Service: "dedup", Factories: dedup.Factories(),
			Results:  "nats --server %s sub 'weir.nexmark.events.>'",
			Baseline: func() Baseline { return &handDedup{seen: map[string]struct{}{}} }},
		{Name: "q0", Contract: "nexmark-q0", Service: q0.Service, Factories: q0.Factories(),
			Results:  "nats --server %s sub 'weir.nexmark-q0.results.>'",
			Baseline: func() Baseline { return handQ0{} }},
		{Name: "q5", Contract: "nexmark-q5", Service: q5.Service, Factories: q5.Factories(),
			Results: "nats --server %s sub 'weir.nexmark-q5.results.>'", Windowed: true,
			Baseline: func() Baseline { return &handQ5{counts: map[int64]map[int64]int64{}} }},
		{Name: "q7", Contract: "nexmark-q7", Service: q7.Service, Factories: q7.Factories(),
			Results: "nats --server %s sub 'weir.nexmark-q7.results.>'", Windowed: true,
			Baseline: func() Baseline { return &handQ7{max: map[int64]nexmark.Bid{}} },
			Reference: &Reference{Shape: q7.Shape(), Agg: window.MaxBy("price"),
				Input: func(ev nexmark.Event) (record.Record, bool) { return BidRecord(ev, q7.AllBids) }}},
		{Name: "q8", Contract: "nexmark-q8", Service: q8.Service, Factories: q8.Factories(),
			Results: "nats --server %s sub 'weir.nexmark-q8.results.>'", Windowed: true,
			Baseline: func() Baseline { return &handQ8{windows: map[int64]*q8Window{}} }},
		{Name: "q11", Contract: "nexmark-q11", Service: q11.Service, Factories: q11.Factories(),
			Results: "nats --server %s sub 'weir.nexmark-q11.results.>'", Windowed: true,
			Baseline: func() Baseline { return &handQ11{sessions: map[int64]*q11Session{}} },
			Reference: &Reference{Shape: q11.Shape(), Agg: window.Count(),
				Input: func(ev nexmark.Event) (record.Record, bool) {
					if ev.Bid == nil {
						return record.Record{}, false
					}
					return BidRecord(ev, strconv.FormatInt(ev.Bid.Bidder, 10))
				}}},
		// The auction flow: its intents are performed by a dispatcher
		// against the provider simulator, both run by the demo.
		{Name: "auctions", Contract: "nexmark-winning-bids", Service: auctions.Service, Factories: auctions.Factories(),
			Results: "nats --server %s sub 'weir.nexmark-winning-bids.charges.>'   (the outbox's intents)"},
	}
}

// BidRecord is the record a window stage keyed by key sees of a generated
// event: its bid, or false when the event is no bid.
func BidRecord(ev nexmark.Event, key string) (record.Record, bool) {
	payload, err := ev.Encode()
	if err != nil {
		return record.Record{}, false
	}
	_, v, ok, _ := nexmark.KeyedBid(payload, func(nexmark.Bid) string { return key })
	return record.Record{Kind: record.Data, ID: ev.ID, Key: []byte(key), Time: ev.Time(), Value: v}, ok
}
