package state

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The model mirrors the store's semantics in plain maps: entries are
// physically present until cleared or expired by Expire, hidden from reads
// once past their expiry, and count as live keys while present.

type mCell struct {
	v        string
	expiring bool
	exp      int64
}

func (c mCell) live(now int64) bool { return !c.expiring || now < c.exp }

type mList struct {
	items []string
	hdr   mCell
}

type mKey struct {
	fam string
	kg  int
	key string
}

type model struct {
	fams   map[string]Family
	values map[mKey]mCell
	maps   map[mKey]map[string]mCell
	lists  map[mKey]mList
}

func (m *model) clone() *model {
	c := &model{fams: m.fams, values: maps.Clone(m.values), maps: map[mKey]map[string]mCell{}, lists: map[mKey]mList{}}
	for k, v := range m.maps {
		c.maps[k] = maps.Clone(v)
	}
	for k, v := range m.lists {
		c.lists[k] = mList{items: slices.Clone(v.items), hdr: v.hdr}
	}
	return c
}

func (m *model) count(fam string) int64 {
	n := 0
	for k := range m.values {
		if k.fam == fam {
			n++
		}
	}
	for k := range m.maps {
		if k.fam == fam {
			n++
		}
	}
	for k := range m.lists {
		if k.fam == fam {
			n++
		}
	}
	return int64(n)
}

func (m *model) cell(fam string, now int64, v string) mCell {
	f := m.fams[fam]
	if f.TTL == 0 {
		return mCell{v: v}
	}
	return mCell{v: v, expiring: true, exp: now + int64(f.TTL)}
}

// create reports whether a new key of fam fits under MaxKeys.
func (m *model) create(fam string) bool { return m.count(fam) < m.fams[fam].MaxKeys }

// expire deletes everything expired at now and returns how many entries
// (values, map entries, lists) it deleted.
func (m *model) expire(now int64) int {
	n := 0
	for k, c := range m.values {
		if !c.live(now) {
			delete(m.values, k)
			n++
		}
	}
	for k, mp := range m.maps {
		for sub, c := range mp {
			if !c.live(now) {
				delete(mp, sub)
				n++
			}
		}
		if len(mp) == 0 {
			delete(m.maps, k)
		}
	}
	for k, l := range m.lists {
		if !l.hdr.live(now) {
			delete(m.lists, k)
			n++
		}
	}
	return n
}

func TestModelRandomHistory(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runModel(t, seed) })
	}
}

func runModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	fams := []Family{
		{Name: "v", Kind: KindValue, MaxKeys: 6},
		{Name: "m", Kind: KindMap, MaxKeys: 6},
		{Name: "l", Kind: KindList, MaxKeys: 6},
		{Name: "vt", Kind: KindValue, TTL: time.Minute, MaxKeys: 6},
		{Name: "mt", Kind: KindMap, TTL: time.Minute, MaxKeys: 6},
		{Name: "lt", Kind: KindList, TTL: time.Minute, MaxKeys: 6},
	}
	fs := vfs.NewMem()
	o := Options{FS: fs, Families: fams, KeyGroups: 4}
	s, err := Open("db", o)
	must(t, err)
	defer func() { s.Close() }()

	committed := &model{fams: map[string]Family{}, values: map[mKey]mCell{}, maps: map[mKey]map[string]mCell{}, lists: map[mKey]mList{}}
	for _, f := range fams {
		committed.fams[f.Name] = f
	}
	now := t0
	checkCounts := func(step int) {
		t.Helper()
		keys := s.Stats().Keys
		for _, f := range fams {
			if got, want := keys[f.Name], committed.count(f.Name); got != want {
				t.Fatalf("step %d: Keys[%s] = %d, model %d", step, f.Name, got, want)
			}
		}
	}
	subs := []string{"a", "b", "c"}
	expired, limits := 0, 0

	for step := range 600 {
		now = now.Add(time.Duration(rng.IntN(20)) * time.Second)
		switch r := rng.IntN(20); {
		case r == 0:
			want := committed.expire(now.UnixNano())
			got, err := s.Expire(now, 1000)
			must(t, err)
			if got != want {
				t.Fatalf("step %d: Expire = %d, model %d", step, got, want)
			}
			expired += got
			checkCounts(step)
			continue
		case r == 1:
			must(t, s.Close())
			s, err = Open("db", o)
			must(t, err)
			checkCounts(step)
			continue
		}

		bm := committed.clone()
		b := s.NewBatch()
		for range 1 + rng.IntN(6) {
			f := fams[rng.IntN(len(fams))]
			k := mKey{fam: f.Name, kg: rng.IntN(4), key: fmt.Sprint(rng.IntN(3))}
			n := now.UnixNano()
			sc := b.Scope(k.kg, []byte(k.key), now)
			v := fmt.Sprint(step)
			sub := subs[rng.IntN(len(subs))]
			where := fmt.Sprintf("step %d %s %+v", step, f.Name, k)
			limited := func(err error, fits bool) bool {
				t.Helper()
				if !fits {
					if !errors.Is(err, ErrLimit) {
						t.Fatalf("%s: err = %v, model expects ErrLimit", where, err)
					}
					limits++
					return true
				}
				must(t, err)
				return false
			}
			switch f.Kind {
			case KindValue:
				switch rng.IntN(3) {
				case 0:
					_, present := bm.values[k]
					if !limited(sc.Value(f.Name).Set([]byte(v)), present || bm.create(f.Name)) {
						bm.values[k] = bm.cell(f.Name, n, v)
					}
				case 1:
					must(t, sc.Value(f.Name).Clear())
					delete(bm.values, k)
				default:
					got, ok, err := sc.Value(f.Name).Get()
					must(t, err)
					c, present := bm.values[k]
					if wantOK := present && c.live(n); ok != wantOK || (ok && string(got) != c.v) {
						t.Fatalf("%s: Get = %q, %v; model %+v present %v", where, got, ok, c, present)
					}
				}
			case KindMap:
				mp := sc.Map(f.Name)
				switch rng.IntN(5) {
				case 0, 1:
					_, present := bm.maps[k][sub]
					if !limited(mp.Put([]byte(sub), []byte(v)), present || len(bm.maps[k]) > 0 || bm.create(f.Name)) {
						if bm.maps[k] == nil {
							bm.maps[k] = map[string]mCell{}
						}
						bm.maps[k][sub] = bm.cell(f.Name, n, v)
					}
				case 2:
					must(t, mp.Delete([]byte(sub)))
					delete(bm.maps[k], sub)
					if len(bm.maps[k]) == 0 {
						delete(bm.maps, k)
					}
				case 3:
					must(t, mp.Clear())
					delete(bm.maps, k)
				default:
					var got, want []string
					must(t, mp.Range(func(k, v []byte) bool {
						got = append(got, string(k)+"="+string(v))
						return true
					}))
					for _, sub := range slices.Sorted(maps.Keys(bm.maps[k])) {
						if c := bm.maps[k][sub]; c.live(n) {
							want = append(want, sub+"="+c.v)
						}
					}
					if !slices.Equal(got, want) {
						t.Fatalf("%s: Range = %q, model %q", where, got, want)
					}
				}
			case KindList:
				l := sc.List(f.Name)
				switch rng.IntN(4) {
				case 0, 1:
					ml, present := bm.lists[k]
					if !limited(l.Append([]byte(v)), present || bm.create(f.Name)) {
						if present && !ml.hdr.live(n) {
							ml.items = nil
						}
						ml.items = append(slices.Clone(ml.items), v)
						ml.hdr = bm.cell(f.Name, n, "")
						bm.lists[k] = ml
					}
				case 2:
					must(t, l.Clear())
					delete(bm.lists, k)
				default:
					all, err := l.All()
					must(t, err)
					var got []string
					for _, x := range all {
						got = append(got, string(x))
					}
					var want []string
					if ml, ok := bm.lists[k]; ok && ml.hdr.live(n) {
						want = ml.items
					}
					if !slices.Equal(got, want) {
						t.Fatalf("%s: All = %q, model %q", where, got, want)
					}
				}
			}
		}
		if rng.IntN(5) == 0 {
			b.Close()
		} else {
			must(t, b.Commit())
			committed = bm
		}
		checkCounts(step)
	}
	if expired == 0 || limits == 0 {
		t.Fatalf("history exercised too little: %d expired, %d limit errors", expired, limits)
	}
}
