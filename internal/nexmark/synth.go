package nexmark

import (
	"fmt"
	"strconv"
	"strings"
)

// Proportions of the event mix: of every TotalProportion consecutive event
// indices the first PersonProportion are persons, the next
// AuctionProportion auctions and the rest bids.
const (
	PersonProportion  = 1
	AuctionProportion = 3
	BidProportion     = 46
	TotalProportion   = PersonProportion + AuctionProportion + BidProportion
)

// Id spaces, as in the Beam and Flink Nexmark generators.
const (
	FirstPersonID   int64 = 1000
	FirstAuctionID  int64 = 1000
	FirstCategoryID int64 = 10
	NumCategories         = 5
	// InFlightAuctions is how many of the most recent auctions an ordinary
	// bid chooses from.
	InFlightAuctions = 100
	// ActivePeople is how many of the most recent people bid and sell.
	ActivePeople = 1000
	// HotAuctionID is the auction that takes Hard.HotKeyRatio of all bids.
	// It is the first auction, so it exists before any bid.
	HotAuctionID = FirstAuctionID
)

// vocabulary holds the word lists names and items are drawn from. It lives
// in the Generator rather than in package variables so that nothing global
// can be changed under a running generator.
type vocabulary struct {
	firstNames, lastNames, cities, states, channels, adjectives, nouns []string
}

func newVocabulary() vocabulary {
	return vocabulary{
		firstNames: []string{"Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"},
		lastNames:  []string{"Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"},
		cities:     []string{"Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"},
		states:     []string{"AZ", "CA", "ID", "OR", "WA", "WY"},
		channels:   []string{"Google", "Facebook", "Baidu", "Apple"},
		adjectives: []string{"vintage", "rare", "signed", "mint", "antique", "boxed", "restored", "limited"},
		nouns:      []string{"clock", "guitar", "camera", "lamp", "bicycle", "vase", "watch", "print", "radio", "chair"},
	}
}

// rng is SplitMix64: tiny, fast, and specified bit for bit, so a stream is
// identical on every platform and Go release. Each event draws from its own
// rng seeded from (Seed, index), which makes Event(i) independent of every
// other index.
type rng struct{ s uint64 }

const golden = 0x9E3779B97F4A7C15

func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

func newRNG(seed int64, i uint64) rng {
	return rng{s: mix64(mix64(uint64(seed)) + i*golden)}
}

func (r *rng) next() uint64 {
	r.s += golden
	return mix64(r.s)
}

// intn returns a value in [0, n); n must be positive. The modulo bias is
// below 2^-40 for the small n used here.
func (r *rng) intn(n int64) int64 { return int64(r.next() % uint64(n)) }

// float returns a value in [0, 1) with 53 random bits.
func (r *rng) float() float64 { return float64(r.next()>>11) / (1 << 53) }

func pick(r *rng, words []string) string { return words[r.intn(int64(len(words)))] }

// price returns a price in cents, log-uniform-ish between $1 and $1M, with
// integer arithmetic only.
func price(r *rng) int64 {
	scale := int64(100)
	for k := r.intn(6); k > 0; k-- {
		scale *= 10
	}
	return scale + r.intn(9*scale)
}

// lastPerson is the base-0 id of the newest person at or before index i.
func lastPerson(i uint64) int64 {
	epoch, offset := int64(i/TotalProportion), int64(i%TotalProportion)
	if offset >= PersonProportion {
		offset = PersonProportion - 1
	}
	return epoch*PersonProportion + offset
}

// lastAuction is the base-0 id of the newest auction at or before index i;
// it is -1 before the first auction.
func lastAuction(i uint64) int64 {
	epoch, offset := int64(i/TotalProportion), int64(i%TotalProportion)
	switch {
	case offset < PersonProportion:
		epoch--
		offset = AuctionProportion - 1
	case offset >= PersonProportion+AuctionProportion:
		offset = AuctionProportion - 1
	default:
		offset -= PersonProportion
	}
	return epoch*AuctionProportion + offset
}

// activePerson picks a base-0 person id among the ActivePeople newest at i.
func activePerson(r *rng, i uint64) int64 {
	n := lastPerson(i) + 1
	active := min(n, ActivePeople)
	return n - active + r.intn(active)
}

// synthesize builds event i with nominal time nominal and event time ts;
// r has already supplied the time jitter.
func (g *Generator) synthesize(r *rng, i uint64, ts int64) Event {
	ev := Event{ID: g.eventID(i), TS: ts}
	offset := i % TotalProportion
	switch {
	case offset < PersonProportion:
		p := g.person(r, i, ts)
		ev.Kind, ev.Key, ev.Person = KindPerson, strconv.FormatInt(p.ID, 10), p
	case offset < PersonProportion+AuctionProportion:
		a := g.auction(r, i, ts)
		ev.Kind, ev.Key, ev.Auction = KindAuction, strconv.FormatInt(a.ID, 10), a
	default:
		b := g.bid(r, i, ts)
		ev.Kind, ev.Key, ev.Bid = KindBid, strconv.FormatInt(b.Auction, 10), b
	}
	return ev
}

func (g *Generator) person(r *rng, i uint64, ts int64) *Person {
	first, last := pick(r, g.words.firstNames), pick(r, g.words.lastNames)
	id := FirstPersonID + lastPerson(i)
	return &Person{
		ID:    id,
		Name:  first + " " + last,
		Email: fmt.Sprintf("%s.%s%d@nexmark.example", strings.ToLower(first), strings.ToLower(last), id),
		CreditCard: fmt.Sprintf("%04d %04d %04d %04d",
			r.intn(10000), r.intn(10000), r.intn(10000), r.intn(10000)),
		City:     pick(r, g.words.cities),
		State:    pick(r, g.words.states),
		DateTime: ts,
	}
}

func (g *Generator) auction(r *rng, i uint64, ts int64) *Auction {
	item := pick(r, g.words.adjectives) + " " + pick(r, g.words.nouns)
	initial := price(r)
	// An auction stays open about as long as it stays among the
	// InFlightAuctions newest, so ordinary bids on it fall before Expires.
	open := int64(g.openMillis * (1 + r.float()))
	return &Auction{
		ID:          FirstAuctionID + lastAuction(i),
		ItemName:    item,
		Description: fmt.Sprintf("%s, %s condition, lot %d", item, pick(r, g.words.adjectives), r.intn(100000)),
		InitialBid:  initial,
		Reserve:     initial + price(r),
		DateTime:    ts,
		Expires:     ts + max(open, 1),
		Seller:      FirstPersonID + activePerson(r, i),
		Category:    FirstCategoryID + r.intn(NumCategories),
	}
}

func (g *Generator) bid(r *rng, i uint64, ts int64) *Bid {
	var auction int64
	if hot := r.float(); hot < g.cfg.Hard.HotKeyRatio {
		auction = HotAuctionID
	} else {
		newest := lastAuction(i)
		oldest := max(newest-(InFlightAuctions-1), 0)
		auction = FirstAuctionID + oldest + r.intn(newest-oldest+1)
	}
	channel := pick(r, g.words.channels)
	return &Bid{
		Auction:  auction,
		Bidder:   FirstPersonID + activePerson(r, i),
		Price:    price(r),
		Channel:  channel,
		URL:      fmt.Sprintf("https://www.nexmark.example/%s/item.htm?query=1&ref=%d", strings.ToLower(channel), r.intn(1000)),
		DateTime: ts,
	}
}
