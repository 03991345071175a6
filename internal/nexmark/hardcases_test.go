package nexmark

import (
	"bytes"
	"math"
	"testing"
	"time"
)

func TestOrdinaryJitterIsBounded(t *testing.T) {
	c := Config{Seed: 2, OutOfOrder: 40 * time.Millisecond}
	g := mustGenerator(t, c)
	spread := map[int64]bool{}
	for i := range uint64(5000) {
		e := g.Event(i)
		back := g.Nominal(i) - e.TS
		if back < 0 || back > 40 {
			t.Fatalf("event %d is %dms behind nominal, want [0, 40]", i, back)
		}
		spread[back] = true
	}
	if len(spread) < 30 {
		t.Errorf("only %d distinct jitters in 5000 events", len(spread))
	}
	if g.Nominal(1000)-g.Nominal(0) != 1000 {
		t.Errorf("default spacing: nominal(1000)-nominal(0) = %d ms, want 1000", g.Nominal(1000)-g.Nominal(0))
	}
}

// TestLateEvents checks that a late event is behind a bounded
// out-of-orderness watermark (max time seen minus OutOfOrder) when it is
// published, while no ordinary event is.
func TestLateEvents(t *testing.T) {
	c := hardConfig(4)
	c.Hard.FutureEvery, c.Hard.IdleTo = 0, 0 // keep the watermark honest
	g := mustGenerator(t, c)
	bound := c.OutOfOrder.Milliseconds()
	maxTS := int64(math.MinInt64)
	late := 0
	for _, m := range take(t, g, 10000) {
		behind := maxTS != math.MinInt64 && m.Event.TS < maxTS-bound
		switch {
		case g.Late(m.Index):
			if !behind {
				t.Fatalf("late event %d (ts %d) is not behind watermark %d", m.Index, m.Event.TS, maxTS-bound)
			}
			if got := g.Nominal(m.Index) - m.Event.TS; got != c.Hard.LateBy.Milliseconds() {
				t.Fatalf("late event %d is %dms behind nominal, want %v", m.Index, got, c.Hard.LateBy)
			}
			if !m.Duplicate {
				late++
			}
		case behind:
			t.Fatalf("ordinary event %d (ts %d) is behind watermark %d", m.Index, m.Event.TS, maxTS-bound)
		}
		maxTS = max(maxTS, m.Event.TS)
	}
	if want := 10000 * 31 / 32 / 97; late < want-2 || late > want+2 {
		t.Errorf("%d late events, want about %d", late, want)
	}
}

func TestFutureEvents(t *testing.T) {
	c := hardConfig(6)
	g := mustGenerator(t, c)
	future := 0
	for i := range uint64(5000) {
		ahead := g.Event(i).TS - g.Nominal(i)
		switch {
		case g.Late(i):
			continue
		case g.Future(i):
			future++
			if ahead != c.Hard.FutureBy.Milliseconds() {
				t.Fatalf("future event %d is %dms ahead, want %v", i, ahead, c.Hard.FutureBy)
			}
		case ahead > 0:
			t.Fatalf("ordinary event %d is %dms ahead of nominal", i, ahead)
		}
	}
	if future != 5000/89 {
		t.Errorf("%d future events, want %d", future, 5000/89)
	}
}

func TestDuplicates(t *testing.T) {
	g := mustGenerator(t, hardConfig(8))
	ms := take(t, g, 6000)
	dups := 0
	for k, m := range ms {
		if !m.Duplicate {
			if g.Duplicated(m.Index) && k+1 < len(ms) && !ms[k+1].Duplicate {
				t.Fatalf("event %d should be followed by a duplicate", m.Index)
			}
			continue
		}
		dups++
		prev := ms[k-1]
		if prev.Duplicate || prev.Event.ID != m.Event.ID || !bytes.Equal(prev.Payload, m.Payload) || prev.Partition != m.Partition {
			t.Fatalf("duplicate at %d does not repeat message %d: %s vs %s", k, k-1, m.Payload, prev.Payload)
		}
		if (m.Index+1)%31 != 0 {
			t.Fatalf("event %d duplicated, cadence is 31", m.Index)
		}
	}
	if dups < 6000/32-2 || dups > 6000/32+2 {
		t.Errorf("%d duplicates in 6000 messages, want about %d", dups, 6000/32)
	}
}

func TestIdlePartition(t *testing.T) {
	c := hardConfig(10)
	h := c.Hard
	g := mustGenerator(t, c)
	ms := take(t, g, 4000)
	// Locate the flush: the first message of the idle partition with an
	// index in the idle range.
	flush := -1
	for k, m := range ms {
		if m.Partition == h.IdlePartition && m.Index >= h.IdleFrom && m.Index < h.IdleTo {
			flush = k
			break
		}
	}
	if flush < 0 {
		t.Fatal("no held-back event was published")
	}
	held := 0
	seen := map[uint64]bool{}
	for k, m := range ms {
		if !m.Duplicate {
			if seen[m.Index] {
				t.Fatalf("event %d published twice", m.Index)
			}
			seen[m.Index] = true
		}
		inRange := m.Index >= h.IdleFrom && m.Index < h.IdleTo
		switch {
		case k < flush && m.Partition == h.IdlePartition && m.Index >= h.IdleFrom:
			t.Fatalf("message %d: idle partition got event %d during the idle range", k, m.Index)
		case k < flush && m.Index >= h.IdleTo:
			t.Fatalf("message %d: event %d published before the held-back events", k, m.Index)
		case k >= flush && inRange && m.Partition != h.IdlePartition:
			t.Fatalf("message %d: event %d of partition %d after the flush", k, m.Index, m.Partition)
		case k >= flush && inRange && !m.Duplicate:
			held++
			if !g.HeldBack(m.Index) {
				t.Fatalf("event %d flushed but not held back", m.Index)
			}
		}
	}
	for i := range uint64(3500) {
		if !seen[i] {
			t.Fatalf("event %d lost", i)
		}
	}
	want := 0
	for i := h.IdleFrom; i < h.IdleTo; i++ {
		if g.Partition(i) == h.IdlePartition {
			want++
		}
	}
	if held != want || held < 200 {
		t.Errorf("%d held-back events flushed, want %d (about a quarter of the range)", held, want)
	}
	// The held events are old: the idle partition resumes behind the others.
	if ms[flush].Event.TS >= ms[flush-1].Event.TS {
		t.Errorf("first held event ts %d is not older than the message before it (%d)", ms[flush].Event.TS, ms[flush-1].Event.TS)
	}
}

func TestHotKey(t *testing.T) {
	for _, ratio := range []float64{0, 0.05, 0.3, 0.9} {
		g := mustGenerator(t, Config{Seed: 12, Hard: HardCases{HotKeyRatio: ratio}})
		bids, hot := 0, 0
		// Skip the first auctions, where the hot auction is also in flight.
		for i := uint64(10000); i < 60000; i++ {
			e := g.Event(i)
			if e.Kind != KindBid {
				continue
			}
			bids++
			if e.Bid.Auction == HotAuctionID {
				hot++
				if e.Key != "1000" {
					t.Fatalf("hot bid keyed %q", e.Key)
				}
			}
		}
		if share := float64(hot) / float64(bids); math.Abs(share-ratio) > 0.01 {
			t.Errorf("ratio %v: hot auction has %.4f of %d bids", ratio, share, bids)
		}
	}
}
