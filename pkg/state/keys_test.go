package state

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

func TestTimeEncodingOrder(t *testing.T) {
	times := []int64{math.MinInt64, math.MinInt64 + 1, -1e18, -2, -1, 0, 1, 2, 1e18, math.MaxInt64 - 1, math.MaxInt64}
	var enc [][]byte
	for _, n := range times {
		b := appendTime(nil, n)
		if got := readTime(b); got != n {
			t.Fatalf("readTime(appendTime(%d)) = %d", n, got)
		}
		enc = append(enc, b)
	}
	if !slices.IsSortedFunc(enc, bytes.Compare) {
		t.Fatal("encoded times do not sort in time order")
	}
}

func TestNanosRange(t *testing.T) {
	for _, c := range []struct {
		t  time.Time
		ok bool
	}{
		{time.Unix(0, 0), true},
		{time.Unix(-1, 0), true},
		{time.Unix(0, math.MinInt64), true},
		{time.Unix(0, math.MaxInt64), true},
		{time.Unix(0, math.MaxInt64).Add(1), false},
		{time.Unix(0, math.MinInt64).Add(-1), false},
		{time.Time{}, false},
	} {
		if _, err := nanos(c.t); (err == nil) != c.ok {
			t.Errorf("nanos(%v) err = %v, want ok %v", c.t, err, c.ok)
		}
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, c := range []struct{ in, want []byte }{
		{[]byte{1}, []byte{2}},
		{[]byte{1, 0xff}, []byte{2}},
		{[]byte{1, 2, 0xff, 0xff}, []byte{1, 3}},
		{[]byte{0xff}, nil},
	} {
		if got := prefixEnd(c.in); !bytes.Equal(got, c.want) {
			t.Errorf("prefixEnd(%x) = %x, want %x", c.in, got, c.want)
		}
	}
}

func TestKeyRoundTrips(t *testing.T) {
	p := statePrefix(513, "fam", []byte("key\x00\xff"))
	for _, k := range [][]byte{p, mapEntryKey(p, []byte("sub")), mapEntryKey(p, nil), listElemKey(p, 7)} {
		sk, err := parseStateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		if sk.kg != 513 || sk.family != "fam" || !bytes.Equal(sk.prefix, p) || !bytes.Equal(sk.sub, k[len(p):]) {
			t.Errorf("parseStateKey(%x) = %+v", k, sk)
		}
	}
	for _, bad := range [][]byte{nil, {kindState}, {kindTimer, 0, 0, 3, 'f', 'a', 'm'}, {kindState, 0, 0, 9, 'f'}, append(bytes.Clone(p), 0x07)} {
		if _, err := parseStateKey(bad); err == nil {
			t.Errorf("parseStateKey(%x) accepted", bad)
		}
	}
	tm := Timer{Domain: ProcessingTime, Time: time.Unix(-5, 7).UTC(), KeyGroup: 300, Key: []byte("k"), Name: "n\x00"}
	got, err := parseTimerKey(timerKey(tm.KeyGroup, tm.Domain, tm.Time.UnixNano(), tm.Key, tm.Name))
	if err != nil || compareTimers(got, tm) != 0 || got.Domain != tm.Domain {
		t.Errorf("timer round trip = %+v, %v; want %+v", got, err, tm)
	}
	kg, exp, sk, err := parseExpiryKey(expiryKey(7, -3, p))
	if err != nil || kg != 7 || exp != -3 || !bytes.Equal(sk, p) {
		t.Errorf("expiry round trip = %d %d %x %v", kg, exp, sk, err)
	}
}

func TestKeyGroupSpanBounds(t *testing.T) {
	for _, kg := range []int{0, 1, 255, 256, 1<<15 - 1, math.MaxUint16} {
		spans := KeyGroupSpan(kg)
		if len(spans) != int(kindLimit-kindState) {
			t.Fatalf("KeyGroupSpan(%d) has %d spans", kg, len(spans))
		}
		for _, sp := range spans {
			if bytes.Compare(sp.Start, sp.End) >= 0 {
				t.Fatalf("KeyGroupSpan(%d): empty span %x..%x", kg, sp.Start, sp.End)
			}
			// Nothing of the neighbouring groups is inside.
			if kg > 0 && sp.Contains(appendGroup(nil, sp.Start[0], kg-1)) {
				t.Errorf("KeyGroupSpan(%d) contains group %d", kg, kg-1)
			}
			if kg < math.MaxUint16 && sp.Contains(appendGroup(nil, sp.Start[0], kg+1)) {
				t.Errorf("KeyGroupSpan(%d) contains group %d", kg, kg+1)
			}
		}
	}
}

// TestKeyGroupContiguity writes every kind of record for several key groups
// and checks that iterating a key group's spans finds exactly its records,
// and that the spans of all groups plus the operator-level range cover the
// whole store.
func TestKeyGroupContiguity(t *testing.T) {
	s := openTest(t, testOptions(nil))
	groups := []int{0, 1, 2, 7, 15}
	for round := range 2 {
		commit(t, s, func(b *Batch) {
			for _, kg := range groups {
				for _, key := range []string{"", "a", "zz\xff\xff"} {
					sc := b.Scope(kg, []byte(key), t0)
					v := []byte(fmt.Sprint(round))
					must(t, sc.Value("v").Set(v))
					must(t, sc.Value("vt").Set(v))
					must(t, sc.Map("m").Put(v, v))
					must(t, sc.Map("mt").Put(v, v))
					must(t, sc.List("l").Append(v))
					must(t, sc.List("lt").Append(v))
					for _, d := range []Domain{EventTime, ProcessingTime} {
						for _, tm := range []time.Time{time.Unix(0, math.MinInt64), time.Unix(-1, 0), t0} {
							must(t, b.SetTimer(Timer{Domain: d, Time: tm, KeyGroup: kg, Key: []byte(key), Name: "t" + fmt.Sprint(round)}))
						}
					}
				}
			}
			must(t, b.SetPosition("in/0", Position{Seq: 1}))
			must(t, b.PutMeta("gen", []byte{1}))
			must(t, b.StageOutput("0001", []byte("frame")))
		})
	}

	// groupOf recovers a record's key group from the record itself.
	groupOf := func(k, v []byte) int {
		t.Helper()
		switch k[0] {
		case kindState:
			sk, err := parseStateKey(k)
			must(t, err)
			return sk.kg
		case kindTimer:
			tm, err := parseTimerKey(k)
			must(t, err)
			return tm.KeyGroup
		case kindExpiry:
			kg, _, sk, err := parseExpiryKey(k)
			must(t, err)
			if sk2, err := parseStateKey(sk); err != nil || sk2.kg != kg {
				t.Fatalf("expiry record %x in group %d names state of group %d", k, kg, sk2.kg)
			}
			return kg
		case kindCount:
			return int(k[1])<<8 | int(k[2])
		}
		t.Fatalf("record %x of unknown kind", k)
		return -1
	}

	seen := map[string]int{}
	kinds := map[int]map[byte]int{}
	for kg := range 16 {
		kinds[kg] = map[byte]int{}
		for _, sp := range KeyGroupSpan(kg) {
			must(t, s.scan(sp.Start, sp.End, func(k, v []byte) error {
				if got := groupOf(k, v); got != kg {
					t.Errorf("span of group %d holds %x of group %d", kg, k, got)
				}
				seen[string(k)]++
				kinds[kg][k[0]]++
				return nil
			}))
		}
	}
	for _, kg := range groups {
		for _, kind := range []byte{kindState, kindTimer, kindExpiry, kindCount} {
			if kinds[kg][kind] == 0 {
				t.Errorf("group %d: no records of kind %x found in its spans", kg, kind)
			}
		}
	}
	if kinds[3][kindState] != 0 {
		t.Errorf("group 3 has records: %v", kinds[3])
	}
	// Every record is in exactly one group's spans, or operator-level.
	total := 0
	must(t, s.scan(nil, nil, func(k, _ []byte) error {
		total++
		if k[0] == kindMeta {
			return nil
		}
		if seen[string(k)] != 1 {
			t.Errorf("record %x found in %d key-group spans", k, seen[string(k)])
		}
		return nil
	}))
	if total == 0 {
		t.Fatal("empty store")
	}

	// The spans are what a rescale moves: copying one group's spans into
	// an empty store moves its state and its timers.
	dst := openTest(t, testOptions(nil))
	var keys []string
	for _, sp := range KeyGroupSpan(7) {
		must(t, s.scan(sp.Start, sp.End, func(k, v []byte) error {
			keys = append(keys, string(k))
			return dst.db.Set(k, v, pebble.NoSync)
		}))
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		t.Fatal("group 7 is empty")
	}
	b := dst.NewBatch()
	defer b.Close()
	must(t, wantL("l", "0", "1").fn(b.Scope(7, []byte("a"), t0)))
	must(t, wantM("mt", "0=0", "1=1").fn(b.Scope(7, []byte("a"), t0)))
	timers, err := dst.DueTimers(EventTime, t0, 100)
	must(t, err)
	if len(timers) != 3*3*2 {
		t.Errorf("moved group has %d event-time timers, want %d", len(timers), 3*3*2)
	}
	for _, tm := range timers {
		if tm.KeyGroup != 7 {
			t.Errorf("moved timer of group %d", tm.KeyGroup)
		}
	}
}
