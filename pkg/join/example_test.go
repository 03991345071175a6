package join_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/join"
	"github.com/weirflow/weir/pkg/operator/operatortest"
	"github.com/weirflow/weir/pkg/record"
)

// Nexmark q8, new users: persons joined with the auctions they opened in
// the same 10 s window. Both event kinds arrive on one input keyed by the
// person (an auction by its seller); operatortest plays the runtime.
func ExampleWindowed() {
	side := func(r record.Record) (join.Side, bool) {
		e, err := nexmark.Decode(r.Value)
		switch {
		case err != nil:
			return 0, false
		case e.Kind == nexmark.KindPerson:
			return join.Left, true
		case e.Kind == nexmark.KindAuction:
			return join.Right, true
		}
		return 0, false // bids are not part of the join
	}
	newUser := func(l, r record.Record) (record.Record, error) {
		p, err := nexmark.Decode(l.Value)
		if err != nil {
			return record.Record{}, err
		}
		a, err := nexmark.Decode(r.Value)
		if err != nil {
			return record.Record{}, err
		}
		v, err := json.Marshal(map[string]any{"id": p.Person.ID, "name": p.Person.Name, "auction": a.Auction.ID})
		return record.Record{Value: v}, err
	}
	j, err := join.NewWindowed(10*time.Second, "q8", side, newUser)
	if err != nil {
		panic(err)
	}
	h := openHarness(operatortest.Panicker{}, j)
	defer h.Close()

	t0 := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	event := func(id string, ms int64, e nexmark.Event) record.Record {
		e.ID, e.TS = id, t0+ms
		seller := int64(0)
		if e.Person != nil {
			e.Person.DateTime, e.Key, seller = e.TS, strconv.FormatInt(e.Person.ID, 10), e.Person.ID
		} else {
			e.Auction.DateTime, e.Key, seller = e.TS, strconv.FormatInt(e.Auction.ID, 10), e.Auction.Seller
		}
		v, err := e.Encode()
		if err != nil {
			panic(err)
		}
		return record.Record{Kind: record.Data, ID: id, Key: []byte(strconv.FormatInt(seller, 10)), Time: time.UnixMilli(t0 + ms), Value: v}
	}
	person := nexmark.Person{ID: 1000, Name: "Ada"}
	h.mustProcess(event("e1", 2_000, nexmark.Event{Kind: nexmark.KindPerson, Person: &person}))
	h.mustProcess(event("e2", 4_000, nexmark.Event{Kind: nexmark.KindAuction, Auction: &nexmark.Auction{ID: 7, Seller: 1000}}))
	h.mustProcess(event("e3", 12_000, nexmark.Event{Kind: nexmark.KindAuction, Auction: &nexmark.Auction{ID: 8, Seller: 1000}}))
	h.advance(time.UnixMilli(t0 + 9_999))
	h.mustProcess(event("e4", 9_000, nexmark.Event{Kind: nexmark.KindAuction, Auction: &nexmark.Auction{ID: 9, Seller: 1000}}))

	for _, r := range h.Out {
		fmt.Println(r.ID, r.Time.UTC().Format(time.TimeOnly+".000"), string(r.Value))
	}
	for _, s := range h.Side {
		fmt.Println("late:", s.Record.ID)
	}
	// Output:
	// e1+e2 00:00:09.999 {"auction":7,"id":1000,"name":"Ada"}
	// late: e4
}
