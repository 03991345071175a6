package nexmark

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// hardConfig turns every hard case on.
func hardConfig(seed int64) Config {
	return Config{
		Seed:       seed,
		Partitions: 4,
		KeyGroups:  64,
		OutOfOrder: 50 * time.Millisecond,
		Hard: HardCases{
			LateEvery: 97, LateBy: 5 * time.Second,
			DuplicateEvery: 31,
			FutureEvery:    89, FutureBy: 10 * time.Second,
			IdlePartition: 2, IdleFrom: 1000, IdleTo: 2500,
			HotKeyRatio: 0.25,
		},
	}
}

func mustGenerator(t *testing.T, c Config) *Generator {
	t.Helper()
	g, err := NewGenerator(c)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// take reads n messages with Next.
func take(t *testing.T, g *Generator, n int) []Message {
	t.Helper()
	ms := make([]Message, 0, n)
	for range n {
		m, ok := g.Next()
		if !ok {
			t.Fatalf("stream ended after %d messages, want %d", len(ms), n)
		}
		ms = append(ms, m)
	}
	return ms
}

func TestDeterminism(t *testing.T) {
	for _, c := range []Config{{Seed: 1}, hardConfig(1), hardConfig(-42)} {
		a := take(t, mustGenerator(t, c), 3000)
		b := take(t, mustGenerator(t, c), 3000)
		for k := range a {
			if !bytes.Equal(a[k].Payload, b[k].Payload) || a[k].Partition != b[k].Partition || a[k].Index != b[k].Index {
				t.Fatalf("seed %d: message %d differs:\n%s\n%s", c.Seed, k, a[k].Payload, b[k].Payload)
			}
		}
		other := c
		other.Seed++
		d := take(t, mustGenerator(t, other), 3000)
		same := 0
		for k := range a {
			if bytes.Equal(a[k].Payload, d[k].Payload) {
				same++
			}
		}
		if same > 0 {
			t.Errorf("seeds %d and %d share %d of 3000 payloads", c.Seed, other.Seed, same)
		}
	}
}

func TestEventMatchesSequentialOutput(t *testing.T) {
	g := mustGenerator(t, hardConfig(3))
	pure := mustGenerator(t, hardConfig(3))
	for k, m := range take(t, g, 5000) {
		if m.Seq != uint64(k) {
			t.Fatalf("message %d has Seq %d", k, m.Seq)
		}
		want, err := pure.Event(m.Index).Encode()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.Payload, want) {
			t.Fatalf("message %d (event %d): Next gave\n%s\nEvent gave\n%s", k, m.Index, m.Payload, want)
		}
		if m.Partition != pure.Partition(m.Index) || m.Partition != pure.layout.Partition([]byte(m.Event.ID)) {
			t.Fatalf("message %d: partition %d is not the key group partition of its ID", k, m.Partition)
		}
	}
}

func TestSeekResumesAnywhere(t *testing.T) {
	for _, c := range []Config{{Seed: 5}, hardConfig(5), func() Config { c := hardConfig(5); c.Events = 2000; return c }()} {
		all := take(t, mustGenerator(t, c), 1900)
		g := mustGenerator(t, c)
		for _, pos := range []int{0, 1, 29, 30, 31, 32, 500, 1000, 1031, 1032, 1033, 1200, 1500, 1800, 1899} {
			g.Seek(uint64(pos))
			if g.Pos() != uint64(pos) {
				t.Fatalf("after Seek(%d) Pos() = %d", pos, g.Pos())
			}
			for k, m := range take(t, g, min(60, len(all)-pos)) {
				w := all[pos+k]
				if m.Seq != w.Seq || m.Index != w.Index || m.Duplicate != w.Duplicate || !bytes.Equal(m.Payload, w.Payload) {
					t.Fatalf("%+v: Seek(%d) message %d = (seq %d, event %d, dup %v), want (seq %d, event %d, dup %v)",
						c.Hard, pos, k, m.Seq, m.Index, m.Duplicate, w.Seq, w.Index, w.Duplicate)
				}
			}
		}
	}
}

func TestBoundedStreamEnds(t *testing.T) {
	c := hardConfig(9)
	c.Events = 2000 // ends inside the idle range: held events come at the end
	g := mustGenerator(t, c)
	seen := map[uint64]int{}
	n := 0
	for {
		m, ok := g.Next()
		if !ok {
			break
		}
		n++
		if !m.Duplicate {
			seen[m.Index]++
		}
	}
	if len(seen) != 2000 {
		t.Fatalf("saw %d distinct events, want 2000", len(seen))
	}
	for i, k := range seen {
		if k != 1 {
			t.Fatalf("event %d published %d times", i, k)
		}
	}
	if want := 2000 + 2000/31; n != want {
		t.Errorf("%d messages, want %d", n, want)
	}
	g.Seek(uint64(n) + 5)
	if _, ok := g.Next(); ok {
		t.Error("Seek past the end: Next still yields")
	}
}

func TestMix(t *testing.T) {
	g := mustGenerator(t, Config{Seed: 11})
	counts := map[string]int{}
	for i := range uint64(5000) {
		counts[g.Event(i).Kind]++
	}
	want := map[string]int{KindPerson: 100, KindAuction: 300, KindBid: 4600}
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("%s: %d of 5000, want %d", k, counts[k], n)
		}
	}
}

func TestReferencesPointBackwards(t *testing.T) {
	g := mustGenerator(t, Config{Seed: 13, Hard: HardCases{HotKeyRatio: 0.1}})
	var maxPerson, maxAuction int64 = -1, -1
	persons, auctions := map[int64]bool{}, map[int64]int64{}
	for i := range uint64(20000) {
		e := g.Event(i)
		switch e.Kind {
		case KindPerson:
			if e.Person.ID != maxPerson+1 && maxPerson >= 0 {
				t.Fatalf("event %d: person id %d after %d", i, e.Person.ID, maxPerson)
			}
			maxPerson = e.Person.ID
			persons[e.Person.ID] = true
		case KindAuction:
			if !persons[e.Auction.Seller] {
				t.Fatalf("event %d: seller %d not yet registered", i, e.Auction.Seller)
			}
			if e.Auction.Expires <= e.Auction.DateTime || e.Auction.Reserve <= e.Auction.InitialBid {
				t.Fatalf("event %d: bad auction %+v", i, e.Auction)
			}
			maxAuction = max(maxAuction, e.Auction.ID)
			auctions[e.Auction.ID] = e.Auction.Expires
		case KindBid:
			if _, ok := auctions[e.Bid.Auction]; !ok {
				t.Fatalf("event %d: bid on unknown auction %d", i, e.Bid.Auction)
			}
			if !persons[e.Bid.Bidder] {
				t.Fatalf("event %d: bidder %d not yet registered", i, e.Bid.Bidder)
			}
			if e.Bid.Auction != HotAuctionID && e.Bid.Auction < maxAuction-InFlightAuctions {
				t.Fatalf("event %d: bid on auction %d, newest is %d", i, e.Bid.Auction, maxAuction)
			}
		}
		if e.ID != fmt.Sprintf("13-%d", i) {
			t.Fatalf("event %d has ID %q", i, e.ID)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		want string // "" = valid
	}{
		{"zero", Config{}, ""},
		{"all hard cases", hardConfig(1), ""},
		{"idle none", Config{Hard: HardCases{IdlePartition: -1, IdleFrom: 1, IdleTo: 5}}, ""},
		{"negative eps", Config{EventsPerSecond: -1}, "events_per_second"},
		{"too many partitions", Config{Partitions: 8, KeyGroups: 4}, "partitions"},
		{"negative jitter", Config{OutOfOrder: -time.Second}, "out_of_order"},
		{"late without by", Config{Hard: HardCases{LateEvery: 3}}, "late_by"},
		{"future without by", Config{Hard: HardCases{FutureEvery: 3, FutureBy: time.Microsecond}}, "future_by"},
		{"negative dup", Config{Hard: HardCases{DuplicateEvery: -1}}, "duplicate_every"},
		{"idle partition out of range", Config{Partitions: 2, Hard: HardCases{IdlePartition: 2, IdleTo: 9}}, "idle_partition"},
		{"idle range reversed", Config{Hard: HardCases{IdleFrom: 9, IdleTo: 3}}, "idle_to"},
		{"hot ratio", Config{Hard: HardCases{HotKeyRatio: 1.5}}, "hot_key_ratio"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case c.want != "" && err == nil:
				t.Fatalf("want error mentioning %q", c.want)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Fatalf("error %q does not mention %q", err, c.want)
			}
			if _, nerr := NewGenerator(c.cfg); (nerr == nil) != (err == nil) {
				t.Fatalf("NewGenerator error %v, Validate error %v", nerr, err)
			}
		})
	}
}

func ExampleGenerator() {
	g, err := NewGenerator(Config{Seed: 1, Partitions: 4, Events: 3})
	if err != nil {
		panic(err)
	}
	for m, ok := g.Next(); ok; m, ok = g.Next() {
		fmt.Println(m.Seq, m.Partition, m.Event.Kind, m.Event.Key, m.Event.Time().Format(time.RFC3339Nano))
	}
	// Output:
	// 0 1 person 1000 2024-01-01T00:00:00Z
	// 1 2 auction 1000 2024-01-01T00:00:00.001Z
	// 2 3 auction 1001 2024-01-01T00:00:00.002Z
}
