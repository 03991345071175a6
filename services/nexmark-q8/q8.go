// Package q8 is Nexmark query 8, new users: the people who opened an
// auction in the same tumbling window of event time in which they
// registered — the contract's emission.window, 10 seconds in the shipped
// contract.
//
// Two operators, declared in contracts/nexmark-q8.yaml: q8-key keys persons
// by their id and auctions by their seller; q8-join is a windowed join
// (pkg/join) that emits every person–auction pair of a window once the
// watermark passes the window's end, to the json result edge
// (weir.nexmark-q8.results.<p>).
package q8

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/join"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream"
)

// Version is reported to $SRV.INFO.
const Version = "0.1.0"

// Service is the service name operators are assigned to in the contract.
const Service = "nexmark-q8"

// Family is the join state family.
const Family = "q8-join"

// Size is the join window of the shipped contract
// (contracts/nexmark-q8.yaml, emission.window), for code that builds the
// query's reference model; the operator reads the window of the contract
// it runs, and a test holds Size to the shipped one.
const Size = 10 * time.Second

// Key is the q8-key operator.
type Key struct{}

// Process keys persons by id and auctions by seller; bids are not q8's.
func (Key) Process(c operator.Env, r record.Record) error {
	ev, err := nexmark.Decode(r.Value)
	if err != nil {
		return operator.Poison("payload", err)
	}
	switch ev.Kind {
	case nexmark.KindPerson:
		return c.Emit(record.Record{Key: []byte(strconv.FormatInt(ev.Person.ID, 10)), Value: r.Value})
	case nexmark.KindAuction:
		return c.Emit(record.Record{Key: []byte(strconv.FormatInt(ev.Auction.Seller, 10)), Value: r.Value})
	}
	return nil
}

// NewUser is one result: a person and an auction they opened in the window
// they registered in.
type NewUser struct {
	WindowStart time.Time `json:"window_start"`
	Person      int64     `json:"person"`
	Name        string    `json:"name"`
	Auction     int64     `json:"auction"`
	Reserve     int64     `json:"reserve"`
}

func side(r record.Record) (join.Side, bool) {
	ev, err := nexmark.Decode(r.Value)
	if err != nil {
		return 0, false
	}
	switch ev.Kind {
	case nexmark.KindPerson:
		return join.Left, true
	case nexmark.KindAuction:
		return join.Right, true
	}
	return 0, false
}

// combine pairs a person and an auction of the window of size they share.
func combine(size time.Duration) join.CombineFunc {
	return func(l, r record.Record) (record.Record, error) {
		p, err := nexmark.Decode(l.Value)
		if err != nil {
			return record.Record{}, err
		}
		a, err := nexmark.Decode(r.Value)
		if err != nil {
			return record.Record{}, err
		}
		v, err := json.Marshal(NewUser{
			WindowStart: l.Time.Truncate(size).UTC(), Person: p.Person.ID, Name: p.Person.Name,
			Auction: a.Auction.ID, Reserve: a.Auction.Reserve,
		})
		return record.Record{Value: v}, err
	}
}

// NewJoin builds q8-join over the contract's window, which must be
// tumbling, with only the on-time pane: the join pairs a window's records
// once, when the watermark passes its end, and takes no late ones.
func NewJoin(c *contracts.Contract) (operator.Operator, error) {
	w, e := c.Emission.Window, c.Emission
	if w.Kind != contracts.WindowTumbling {
		return nil, fmt.Errorf("q8: the join needs a tumbling window (emission.window in %s), not %q", c.File, w)
	}
	if e.Triggers.Early.Fires() || e.Triggers.Late.Fires() || e.AllowedLateness.D() > 0 {
		return nil, fmt.Errorf("q8: the join emits each window once, on time: contract %s declares early or late triggers or allowed_lateness, which it cannot honour", c.File)
	}
	return join.NewWindowed(w.Size.D(), Family, side, combine(w.Size.D()))
}

// Factories are the service's operators.
func Factories() map[string]stream.Factory {
	return map[string]stream.Factory{
		"q8-key":  func(*contracts.Contract) (operator.Operator, error) { return Key{}, nil },
		"q8-join": NewJoin,
	}
}

// Run runs the service with command-line args and environment.
func Run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return stream.Main(ctx, Service, Version, args, getenv, stderr, Factories())
}
