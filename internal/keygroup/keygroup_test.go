package keygroup

import (
	"bytes"
	"fmt"
	"testing"
)

func TestOfIsStable(t *testing.T) {
	// These values pin the hash: changing it would move every key's state.
	for _, c := range []struct {
		key  string
		want int
	}{
		{"", 37}, {"a", 140}, {"auction-1001", 143}, {"person-7", 32},
	} {
		got := Of([]byte(c.key), 256)
		if got != c.want {
			t.Errorf("Of(%q) = %d, want %d", c.key, got, c.want)
		}
		if got2 := Of([]byte(c.key), 256); got2 != got {
			t.Errorf("Of(%q) not deterministic: %d then %d", c.key, got, got2)
		}
	}
}

func TestPartitionsOwnContiguousRanges(t *testing.T) {
	for _, l := range []Layout{{256, 1}, {256, 3}, {256, 4}, {256, 7}, {10, 10}, {128, 5}} {
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
		next := 0
		for p := 0; p < l.Partitions; p++ {
			lo, hi := l.GroupRange(p)
			if lo != next {
				t.Fatalf("%+v: partition %d starts at %d, want %d", l, p, lo, next)
			}
			if hi <= lo {
				t.Fatalf("%+v: partition %d owns no groups", l, p)
			}
			for g := lo; g < hi; g++ {
				if got := l.PartitionOf(g); got != p {
					t.Fatalf("%+v: group %d maps to partition %d, range says %d", l, g, got, p)
				}
			}
			next = hi
		}
		if next != l.Groups {
			t.Fatalf("%+v: ranges cover %d groups, want %d", l, next, l.Groups)
		}
	}
}

func TestKeysSpreadOverGroups(t *testing.T) {
	l := Layout{Groups: 256, Partitions: 4}
	counts := make([]int, l.Partitions)
	for i := 0; i < 40000; i++ {
		counts[l.Partition([]byte(fmt.Sprintf("key-%d", i)))]++
	}
	for p, n := range counts {
		if n < 8000 || n > 12000 {
			t.Errorf("partition %d got %d of 40000 keys; hash is badly skewed", p, n)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, l := range []Layout{{0, 1}, {256, 0}, {4, 8}, {MaxGroups + 1, 1}} {
		if l.Validate() == nil {
			t.Errorf("%+v: want error", l)
		}
	}
}

func TestSplitSpreadsAKeyAndUnsplitRestoresIt(t *testing.T) {
	key := []byte("hot\x1fauction") // a key may hold the mark itself
	groups := map[int]int{}
	for i := range 1000 {
		id := fmt.Sprintf("event-%d", i)
		s := Split(key, id, 8)
		if !bytes.Equal(Split(key, id, 8), s) {
			t.Fatalf("Split(%q, %q) differs between calls", key, id)
		}
		if got := Unsplit(s); !bytes.Equal(got, key) {
			t.Fatalf("Unsplit(%q) = %q, want %q", s, got, key)
		}
		groups[Of(s, 256)]++
	}
	if len(groups) != 8 {
		t.Fatalf("a key split 8 ways fell in %d key groups: %v", len(groups), groups)
	}
	for g, n := range groups {
		if n > 250 {
			t.Errorf("key group %d holds %d of 1000 records", g, n)
		}
	}
	if s := Split(key, "x", 1); !bytes.Equal(s, key) {
		t.Errorf("Split with 1 way = %q, want the key", s)
	}
}
