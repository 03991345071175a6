package nexmark

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
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
	return e.Append(make([]byte, 0, 256))
}

// Append appends the wire form of e to b: the bytes encoding/json gives
// the Event, written by hand because the generator encodes every event it
// makes, tens of thousands a second (a fifth of the demo generator's CPU
// went to reflection). Strings are quoted as encoding/json quotes them;
// TestAppendIsMarshal holds the two to the same bytes.
func (e Event) Append(b []byte) ([]byte, error) {
	b = append(b, `{"id":`...)
	b = appendString(b, e.ID)
	b = append(b, `,"kind":`...)
	b = appendString(b, e.Kind)
	b = append(b, `,"key":`...)
	b = appendString(b, e.Key)
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, e.TS, 10)
	if p := e.Person; p != nil {
		b = append(b, `,"person":{"id":`...)
		b = strconv.AppendInt(b, p.ID, 10)
		b = append(b, `,"name":`...)
		b = appendString(b, p.Name)
		b = append(b, `,"email":`...)
		b = appendString(b, p.Email)
		b = append(b, `,"credit_card":`...)
		b = appendString(b, p.CreditCard)
		b = append(b, `,"city":`...)
		b = appendString(b, p.City)
		b = append(b, `,"state":`...)
		b = appendString(b, p.State)
		b = append(b, `,"date_time":`...)
		b = strconv.AppendInt(b, p.DateTime, 10)
		b = append(b, '}')
	}
	if a := e.Auction; a != nil {
		b = append(b, `,"auction":{"id":`...)
		b = strconv.AppendInt(b, a.ID, 10)
		b = append(b, `,"item_name":`...)
		b = appendString(b, a.ItemName)
		b = append(b, `,"description":`...)
		b = appendString(b, a.Description)
		b = append(b, `,"initial_bid":`...)
		b = strconv.AppendInt(b, a.InitialBid, 10)
		b = append(b, `,"reserve":`...)
		b = strconv.AppendInt(b, a.Reserve, 10)
		b = append(b, `,"date_time":`...)
		b = strconv.AppendInt(b, a.DateTime, 10)
		b = append(b, `,"expires":`...)
		b = strconv.AppendInt(b, a.Expires, 10)
		b = append(b, `,"seller":`...)
		b = strconv.AppendInt(b, a.Seller, 10)
		b = append(b, `,"category":`...)
		b = strconv.AppendInt(b, a.Category, 10)
		b = append(b, '}')
	}
	if d := e.Bid; d != nil {
		b = append(b, `,"bid":{"auction":`...)
		b = strconv.AppendInt(b, d.Auction, 10)
		b = append(b, `,"bidder":`...)
		b = strconv.AppendInt(b, d.Bidder, 10)
		b = append(b, `,"price":`...)
		b = strconv.AppendInt(b, d.Price, 10)
		b = append(b, `,"channel":`...)
		b = appendString(b, d.Channel)
		b = append(b, `,"url":`...)
		b = appendString(b, d.URL)
		b = append(b, `,"date_time":`...)
		b = strconv.AppendInt(b, d.DateTime, 10)
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

// appendString appends s as a JSON string. The generator's strings are
// plain ASCII, copied as they are; anything else goes through jsontext,
// which escapes as encoding/json does and replaces invalid UTF-8.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			b, _ = jsontext.AppendQuote(b, s) // invalid UTF-8 is replaced, as encoding/json does
			return b
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
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
