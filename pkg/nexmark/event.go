package nexmark

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/go-json-experiment/json"
)

// Event kinds as they appear in the "kind" field of the wire format.
const (
	KindPerson  = "person"
	KindAuction = "auction"
	KindBid     = "bid"
)

// ErrInvalidEvent is wrapped by every Decode error.
var ErrInvalidEvent = errors.New("nexmark: invalid event")

// Person is a registered user of the auction site.
type Person struct {
	ID         int64  `json:"id"`
	Name       string `json:"name"`
	Email      string `json:"email"`
	CreditCard string `json:"credit_card"`
	City       string `json:"city"`
	State      string `json:"state"`
	// DateTime is the event time in Unix milliseconds.
	DateTime int64 `json:"date_time"`
}

// Auction is an item put up for sale by a person.
type Auction struct {
	ID          int64  `json:"id"`
	ItemName    string `json:"item_name"`
	Description string `json:"description"`
	// InitialBid and Reserve are prices in cents.
	InitialBid int64 `json:"initial_bid"`
	Reserve    int64 `json:"reserve"`
	// DateTime is the event time and Expires the closing time, both in Unix
	// milliseconds.
	DateTime int64 `json:"date_time"`
	Expires  int64 `json:"expires"`
	Seller   int64 `json:"seller"`
	Category int64 `json:"category"`
}

// Bid is a person's offer on an auction.
type Bid struct {
	Auction int64 `json:"auction"`
	Bidder  int64 `json:"bidder"`
	// Price is in cents.
	Price   int64  `json:"price"`
	Channel string `json:"channel"`
	URL     string `json:"url"`
	// DateTime is the event time in Unix milliseconds.
	DateTime int64 `json:"date_time"`
}

// Event is one message of the wire format: exactly one of Person, Auction
// and Bid is set, as Kind says. Key is the auction id for bids and auctions
// and the person id for persons, in decimal; TS is the event time in Unix
// milliseconds. ID is unique and stable: the same generator config and
// index always produce the same ID, and an injected duplicate repeats it.
type Event struct {
	ID      string   `json:"id"`
	Kind    string   `json:"kind"`
	Key     string   `json:"key"`
	TS      int64    `json:"ts"`
	Person  *Person  `json:"person,omitempty"`
	Auction *Auction `json:"auction,omitempty"`
	Bid     *Bid     `json:"bid,omitempty"`
}

// Time returns the event time.
func (e Event) Time() time.Time { return time.UnixMilli(e.TS).UTC() }

// Encode returns the wire form of e. Field order is fixed by the struct
// definitions, so equal events encode to equal bytes.
func (e Event) Encode() ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("nexmark: encode event %q: %w", e.ID, err)
	}
	return b, nil
}

// Decode parses one wire message and checks that it is a well-formed event:
// a known kind with exactly its payload, a non-empty ID, and a key and time
// that agree with the payload. Errors wrap ErrInvalidEvent and name the
// offending field.
func Decode(data []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(data, &e); err != nil {
		return Event{}, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	if err := e.check(); err != nil {
		return Event{}, err
	}
	return e, nil
}

func (e Event) check() error {
	if e.ID == "" {
		return fmt.Errorf("%w: field id is empty", ErrInvalidEvent)
	}
	payloads := 0
	for _, set := range []bool{e.Person != nil, e.Auction != nil, e.Bid != nil} {
		if set {
			payloads++
		}
	}
	if payloads != 1 {
		return fmt.Errorf("%w: event %q has %d payloads, want exactly 1", ErrInvalidEvent, e.ID, payloads)
	}
	var key, ts int64
	switch e.Kind {
	case KindPerson:
		if e.Person == nil {
			return fmt.Errorf("%w: event %q of kind person has no field person", ErrInvalidEvent, e.ID)
		}
		key, ts = e.Person.ID, e.Person.DateTime
	case KindAuction:
		if e.Auction == nil {
			return fmt.Errorf("%w: event %q of kind auction has no field auction", ErrInvalidEvent, e.ID)
		}
		key, ts = e.Auction.ID, e.Auction.DateTime
	case KindBid:
		if e.Bid == nil {
			return fmt.Errorf("%w: event %q of kind bid has no field bid", ErrInvalidEvent, e.ID)
		}
		key, ts = e.Bid.Auction, e.Bid.DateTime
	default:
		return fmt.Errorf("%w: event %q has unknown kind %q", ErrInvalidEvent, e.ID, e.Kind)
	}
	if want := strconv.FormatInt(key, 10); e.Key != want {
		return fmt.Errorf("%w: event %q field key is %q, payload says %q", ErrInvalidEvent, e.ID, e.Key, want)
	}
	if e.TS != ts {
		return fmt.Errorf("%w: event %q field ts is %d, payload date_time is %d", ErrInvalidEvent, e.ID, e.TS, ts)
	}
	return nil
}

// KeyedBid decodes an event and, if it is a bid, returns the bid as JSON
// under the key keyOf gives it: how the queries that read bids re-key
// them. ok is false for persons and auctions; err is an undecodable event.
func KeyedBid(value []byte, keyOf func(Bid) string) (key string, bid []byte, ok bool, err error) {
	ev, err := Decode(value)
	if err != nil || ev.Kind != KindBid {
		return "", nil, false, err
	}
	bid, err = json.Marshal(ev.Bid)
	return keyOf(*ev.Bid), bid, err == nil, err
}
