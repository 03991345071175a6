package auctions_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/outbox"
	"github.com/weirflow/weir/pkg/operator/operatortest"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
	auctions "github.com/weirflow/weir/services/nexmark-auctions"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// recorder makes records of events, at successive source coordinates.
func recorder(t *testing.T) func(nexmark.Event) record.Record {
	seq := uint64(0)
	return func(ev nexmark.Event) record.Record {
		data, err := ev.Encode()
		if err != nil {
			t.Fatal(err)
		}
		seq++
		return record.Record{Kind: record.Data, ID: ev.ID, Key: []byte(ev.Key), Time: ev.Time(), Value: data,
			At: record.Coordinate{Stream: "NEXMARK", Subject: "nexmark.events.0", Seq: seq}}
	}
}

func ms(d time.Duration) int64 { return t0.Add(d).UnixMilli() }

// events is a small auction corpus: A is won by the highest bid above its
// reserve (a bid after its expiry does not count); B's best bid stays under
// its reserve; C's first bid comes before the auction event; a bid on A
// after A closed goes to the side output.
func events(t *testing.T) (recs []record.Record, late record.Record) {
	t.Helper()
	rec := recorder(t)
	auction := func(id, reserve int64, expires time.Duration) record.Record {
		return rec(nexmark.Event{ID: fmt.Sprintf("a-%d", id), Kind: nexmark.KindAuction, Key: fmt.Sprint(id), TS: ms(0),
			Auction: &nexmark.Auction{ID: id, Seller: 7, InitialBid: 10, Reserve: reserve, DateTime: ms(0), Expires: ms(expires)}})
	}
	bidOn := func(id, bidder, price int64, at time.Duration) record.Record {
		return rec(nexmark.Event{ID: fmt.Sprintf("b-%d-%d-%d", id, bidder, price), Kind: nexmark.KindBid, Key: fmt.Sprint(id), TS: ms(at),
			Bid: &nexmark.Bid{Auction: id, Bidder: bidder, Price: price, DateTime: ms(at)}})
	}
	recs = []record.Record{
		bidOn(3, 31, 900, time.Second), // before its auction's event
		auction(1, 100, 10*time.Second),
		auction(2, 500, 10*time.Second),
		auction(3, 100, 10*time.Second),
		bidOn(1, 11, 50, 2*time.Second),
		bidOn(1, 12, 150, 3*time.Second),
		bidOn(1, 13, 150, 4*time.Second), // as high, but later
		bidOn(1, 14, 120, 5*time.Second),
		bidOn(1, 15, 999, 11*time.Second), // after the expiry
		bidOn(2, 21, 300, 2*time.Second),
		bidOn(3, 32, 800, 2*time.Second),
	}
	return recs, bidOn(1, 16, 5000, 9*time.Second)
}

func charges(t *testing.T, recs []record.Record, late record.Record) (*operatortest.Harness, map[int64]auctions.Charge, map[int64]string) {
	t.Helper()
	h := operatortest.New(t, auctions.New("nexmark-auctions"), operatortest.Options{
		Families: []state.Family{{Name: auctions.Family, Kind: state.KindValue, MaxKeys: 1 << 20}}})
	t.Cleanup(func() { _ = h.Close() })
	for _, r := range recs {
		h.MustProcess(r)
	}
	if err := h.Advance(t0.Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	h.MustProcess(late)
	out, keys := map[int64]auctions.Charge{}, map[int64]string{}
	for _, r := range h.Out {
		in, err := outbox.Decode(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		var c auctions.Charge
		if err := json.Unmarshal(in.Payload, &c); err != nil {
			t.Fatal(err)
		}
		if _, dup := out[c.Auction]; dup {
			t.Fatalf("auction %d charged twice", c.Auction)
		}
		out[c.Auction], keys[c.Auction] = c, in.Key
	}
	return h, out, keys
}

// TestCloseChargesTheWinner closes the auctions at their expiry: A charges
// its highest bid above the reserve (the earlier of two equal ones, not the
// one after expiry), B charges nothing, C counts the bid that came before
// its auction event; late bids go to the side output with their
// coordinates; the same input again yields the same idempotency keys.
func TestCloseChargesTheWinner(t *testing.T) {
	recs, late := events(t)
	h, out, keys := charges(t, recs, late)
	want := map[int64]auctions.Charge{
		1: {Auction: 1, Seller: 7, Bidder: 12, Amount: 150, Bid: "b-1-12-150"},
		3: {Auction: 3, Seller: 7, Bidder: 31, Amount: 900, Bid: "b-3-31-900"},
	}
	if len(out) != len(want) {
		t.Fatalf("charges %+v, want %+v", out, want)
	}
	for id, w := range want {
		if out[id] != w {
			t.Errorf("auction %d: charge %+v, want %+v", id, out[id], w)
		}
	}
	if len(h.Side) != 2 {
		t.Fatalf("side output %+v, want the bid after A's expiry and the bid after A closed", h.Side)
	}
	for _, s := range h.Side {
		if s.Record.At == (record.Coordinate{}) || s.Reason == "" {
			t.Errorf("side output without coordinate or reason: %+v", s)
		}
	}
	_, _, again := charges(t, recs, late)
	for id, k := range keys {
		if again[id] != k {
			t.Errorf("auction %d: key %s, then %s on the same input", id, k, again[id])
		}
	}
}

// TestEarlyBidsStayBounded sends bids on an auction whose event has not
// come: a bid that an earlier, higher one beats is not kept, since it
// cannot win whatever the expiry; rising bids are all candidates, and
// beyond auctions.MaxEarly of them a bid goes to the side output. The
// auction then charges the best candidate placed by its expiry.
func TestEarlyBidsStayBounded(t *testing.T) {
	h := operatortest.New(t, auctions.New("nexmark-auctions"), operatortest.Options{
		Families: []state.Family{{Name: auctions.Family, Kind: state.KindValue, MaxKeys: 1 << 20}}})
	defer h.Close()
	rec := recorder(t)
	bid := func(n int, price int64, at time.Duration) record.Record {
		return rec(nexmark.Event{ID: fmt.Sprintf("b-%d", n), Kind: nexmark.KindBid, Key: "9", TS: ms(at),
			Bid: &nexmark.Bid{Auction: 9, Bidder: int64(100 + n), Price: price, DateTime: ms(at)}})
	}
	h.MustProcess(bid(0, 5000, time.Millisecond)) // beats every later bid below it
	for i := 1; i <= 50; i++ {
		h.MustProcess(bid(i, int64(100+i), time.Duration(i+1)*time.Millisecond))
	}
	if len(h.Side) != 0 {
		t.Fatalf("%d bids to the side output; the dominated ones should just lose", len(h.Side))
	}
	for i := 51; i < 51+auctions.MaxEarly+5; i++ {
		h.MustProcess(bid(i, int64(10000+i), time.Duration(i+1)*time.Millisecond))
	}
	if want := 6; len(h.Side) != want { // 64 kept: the first bid and 63 rising ones
		t.Fatalf("%d bids to the side output, want %d beyond the %d candidates", len(h.Side), want, auctions.MaxEarly)
	}
	expires := ms(60 * time.Millisecond) // bid i is placed at i+1 ms: 0..59 by then
	h.MustProcess(rec(nexmark.Event{ID: "a-9", Kind: nexmark.KindAuction, Key: "9", TS: ms(0),
		Auction: &nexmark.Auction{ID: 9, Seller: 7, Reserve: 10, DateTime: ms(0), Expires: expires}}))
	if err := h.Advance(time.UnixMilli(expires).Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if len(h.Out) != 1 {
		t.Fatalf("%d charges, want 1", len(h.Out))
	}
	in, _ := outbox.Decode(h.Out[0].Value)
	var c auctions.Charge
	_ = json.Unmarshal(in.Payload, &c)
	if c.Bid != "b-59" || c.Amount != 10059 {
		t.Fatalf("charge %+v, want bid b-59 at 10059 (the best placed by the expiry)", c)
	}
}
