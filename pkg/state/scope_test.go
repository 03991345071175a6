package state

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// op is one step of a scripted state test: it acts on the scope and
// reports an error. Reads are checked again after the commit. A nil fn
// marks a commit.
type op struct {
	fn   func(sc Scope) error
	read bool
}

func write(fn func(sc Scope) error) op { return op{fn: fn} }
func read(fn func(sc Scope) error) op  { return op{fn: fn, read: true} }

// commitStep marks a batch boundary in a script.
var commitStep = op{}

func setV(fam, v string) op {
	return write(func(sc Scope) error { return sc.Value(fam).Set([]byte(v)) })
}

func clearV(fam string) op { return write(func(sc Scope) error { return sc.Value(fam).Clear() }) }

func wantV(fam, want string, present bool) op {
	return read(func(sc Scope) error {
		got, ok, err := sc.Value(fam).Get()
		if err != nil {
			return err
		}
		if ok != present || string(got) != want {
			return fmt.Errorf("Value(%s).Get = %q, %v; want %q, %v", fam, got, ok, want, present)
		}
		return nil
	})
}

func put(fam, k, v string) op {
	return write(func(sc Scope) error { return sc.Map(fam).Put([]byte(k), []byte(v)) })
}

func del(fam, k string) op {
	return write(func(sc Scope) error { return sc.Map(fam).Delete([]byte(k)) })
}

func clearM(fam string) op { return write(func(sc Scope) error { return sc.Map(fam).Clear() }) }

// wantM checks the map's entries in order, given as "k=v" strings, and Get
// of each.
func wantM(fam string, want ...string) op {
	return read(func(sc Scope) error {
		m := sc.Map(fam)
		var got []string
		if err := m.Range(func(k, v []byte) bool {
			got = append(got, string(k)+"="+string(v))
			return true
		}); err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("Map(%s) = %q, want %q", fam, got, want)
		}
		for _, kv := range want {
			k, v, _ := strings.Cut(kv, "=")
			if got, ok, err := m.Get([]byte(k)); err != nil || !ok || string(got) != v {
				return fmt.Errorf("Map(%s).Get(%s) = %q, %v, %v; want %q", fam, k, got, ok, err, v)
			}
		}
		return nil
	})
}

func wantNoEntry(fam, k string) op {
	return read(func(sc Scope) error {
		if got, ok, err := sc.Map(fam).Get([]byte(k)); err != nil || ok {
			return fmt.Errorf("Map(%s).Get(%s) = %q, %v, %v; want absent", fam, k, got, ok, err)
		}
		return nil
	})
}

func app(fam string, vs ...string) op {
	return write(func(sc Scope) error {
		for _, v := range vs {
			if err := sc.List(fam).Append([]byte(v)); err != nil {
				return err
			}
		}
		return nil
	})
}

func clearL(fam string) op { return write(func(sc Scope) error { return sc.List(fam).Clear() }) }

func wantL(fam string, want ...string) op {
	return read(func(sc Scope) error {
		all, err := sc.List(fam).All()
		if err != nil {
			return err
		}
		var got []string
		for _, v := range all {
			got = append(got, string(v))
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("List(%s) = %q, want %q", fam, got, want)
		}
		return nil
	})
}

func TestStateKinds(t *testing.T) {
	for _, c := range []struct {
		name string
		ops  []op
		keys map[string]int64 // live keys after the script
	}{
		{"value absent", []op{wantV("v", "", false)}, map[string]int64{"v": 0}},
		{"value set get", []op{setV("v", "a"), wantV("v", "a", true)}, map[string]int64{"v": 1}},
		{"value overwrite", []op{setV("v", "a"), commitStep, setV("v", "b"), wantV("v", "b", true)}, map[string]int64{"v": 1}},
		{"value empty", []op{setV("v", ""), wantV("v", "", true)}, map[string]int64{"v": 1}},
		{"value clear", []op{setV("v", "a"), commitStep, clearV("v"), wantV("v", "", false)}, map[string]int64{"v": 0}},
		{"value clear absent", []op{clearV("v"), clearV("v")}, map[string]int64{"v": 0}},
		{"value set clear one batch", []op{setV("v", "a"), clearV("v"), wantV("v", "", false)}, map[string]int64{"v": 0}},
		{"value clear set one batch", []op{setV("v", "a"), commitStep, clearV("v"), setV("v", "b"), wantV("v", "b", true)}, map[string]int64{"v": 1}},
		{"value set clear set", []op{setV("v", "a"), clearV("v"), setV("v", "b"), commitStep, wantV("v", "b", true)}, map[string]int64{"v": 1}},

		{"map empty", []op{wantM("m"), wantNoEntry("m", "a")}, map[string]int64{"m": 0}},
		{"map put", []op{put("m", "b", "2"), put("m", "a", "1"), wantM("m", "a=1", "b=2")}, map[string]int64{"m": 1}},
		{"map overwrite", []op{put("m", "a", "1"), commitStep, put("m", "a", "9"), wantM("m", "a=9")}, map[string]int64{"m": 1}},
		{"map delete", []op{put("m", "a", "1"), put("m", "b", "2"), commitStep, del("m", "a"), wantM("m", "b=2")}, map[string]int64{"m": 1}},
		{"map delete last", []op{put("m", "a", "1"), commitStep, del("m", "a"), wantM("m")}, map[string]int64{"m": 0}},
		{"map delete absent", []op{del("m", "a"), put("m", "a", "1"), del("m", "zz"), wantM("m", "a=1")}, map[string]int64{"m": 1}},
		{"map clear", []op{put("m", "a", "1"), put("m", "b", "2"), commitStep, clearM("m"), wantM("m"), wantNoEntry("m", "a")}, map[string]int64{"m": 0}},
		{"map put clear one batch", []op{put("m", "a", "1"), clearM("m"), wantM("m")}, map[string]int64{"m": 0}},
		{"map clear put", []op{put("m", "a", "1"), commitStep, clearM("m"), put("m", "c", "3"), wantM("m", "c=3")}, map[string]int64{"m": 1}},
		{"map delete all then put", []op{put("m", "a", "1"), put("m", "b", "2"), del("m", "a"), del("m", "b"), put("m", "c", "3"), commitStep, wantM("m", "c=3")}, map[string]int64{"m": 1}},

		{"list empty", []op{wantL("l")}, map[string]int64{"l": 0}},
		{"list append", []op{app("l", "x", "y"), commitStep, app("l", "z"), wantL("l", "x", "y", "z")}, map[string]int64{"l": 1}},
		{"list order beyond 255", []op{app("l", manyStrings(300)...), wantL("l", manyStrings(300)...)}, map[string]int64{"l": 1}},
		{"list clear", []op{app("l", "x"), commitStep, clearL("l"), wantL("l")}, map[string]int64{"l": 0}},
		{"list clear append", []op{app("l", "x"), commitStep, clearL("l"), app("l", "y"), wantL("l", "y")}, map[string]int64{"l": 1}},
		{"list append clear one batch", []op{app("l", "x"), clearL("l"), clearL("l"), wantL("l")}, map[string]int64{"l": 0}},

		{"families independent", []op{setV("v", "a"), put("m", "a", "1"), app("l", "a"), clearV("v"), wantM("m", "a=1"), wantL("l", "a")},
			map[string]int64{"v": 0, "m": 1, "l": 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openTest(t, testOptions(nil))
			b := s.NewBatch()
			defer func() { b.Close() }()
			for i, o := range c.ops {
				if o.fn == nil {
					must(t, b.Commit())
					b = s.NewBatch()
					continue
				}
				if err := o.fn(b.Scope(3, []byte("key"), t0)); err != nil {
					t.Fatalf("op %d: %v", i, err)
				}
			}
			must(t, b.Commit())
			// The trailing reads hold for the committed state too.
			b = s.NewBatch()
			for i := len(c.ops) - 1; i >= 0 && c.ops[i].read; i-- {
				if err := c.ops[i].fn(b.Scope(3, []byte("key"), t0)); err != nil {
					t.Fatalf("after commit, op %d: %v", i, err)
				}
			}
			keys := s.Stats().Keys
			for fam, want := range c.keys {
				if keys[fam] != want {
					t.Errorf("Stats().Keys[%s] = %d, want %d", fam, keys[fam], want)
				}
			}
		})
	}
}

func manyStrings(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(i)
	}
	return out
}

func TestKeysAreSeparate(t *testing.T) {
	s := openTest(t, testOptions(nil))
	// Keys that are prefixes of each other, and equal keys in other groups.
	keys := []struct {
		kg  int
		key string
	}{{0, ""}, {0, "a"}, {0, "ab"}, {0, "a\x01"}, {1, "a"}, {15, "a"}}
	commit(t, s, func(b *Batch) {
		for i, k := range keys {
			sc := b.Scope(k.kg, []byte(k.key), t0)
			must(t, sc.Value("v").Set([]byte(fmt.Sprint(i))))
			must(t, sc.Map("m").Put([]byte("x"), []byte(fmt.Sprint(i))))
			must(t, sc.List("l").Append([]byte(fmt.Sprint(i))))
		}
	})
	b := s.NewBatch()
	defer b.Close()
	for i, k := range keys {
		sc := b.Scope(k.kg, []byte(k.key), t0)
		want := fmt.Sprint(i)
		for _, o := range []op{wantV("v", want, true), wantM("m", "x="+want), wantL("l", want)} {
			if err := o.fn(sc); err != nil {
				t.Errorf("key %d/%q: %v", k.kg, k.key, err)
			}
		}
	}
	// Clearing one key's list leaves the others.
	must(t, b.Scope(0, []byte("a"), t0).List("l").Clear())
	must(t, wantL("l", "2").fn(b.Scope(0, []byte("ab"), t0)))
	must(t, wantL("l", "3").fn(b.Scope(0, []byte("a\x01"), t0)))
	must(t, wantL("l", "0").fn(b.Scope(0, nil, t0)))
}

func TestScopeErrors(t *testing.T) {
	s := openTest(t, testOptions(nil))
	b := s.NewBatch()
	defer b.Close()
	sc := b.Scope(0, []byte("k"), t0)
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"unknown value", sc.Value("nope").Set(nil), ErrUnknownFamily},
		{"unknown map", sc.Map("nope").Put(nil, nil), ErrUnknownFamily},
		{"unknown list", sc.List("nope").Append(nil), ErrUnknownFamily},
		{"map as value", sc.Value("m").Set(nil), ErrWrongKind},
		{"value as map", func() error { _, _, err := sc.Map("v").Get(nil); return err }(), ErrWrongKind},
		{"value as list", func() error { _, err := sc.List("v").All(); return err }(), ErrWrongKind},
		{"negative key group", b.Scope(-1, nil, t0).Value("v").Set(nil), ErrKeyGroup},
		{"key group too big", b.Scope(16, nil, t0).Map("m").Clear(), ErrKeyGroup},
		{"ttl without time", b.Scope(0, nil, time.Time{}).Value("vt").Set(nil), ErrTimeRange},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, c.err, c.want)
		}
	}
	// A family without TTL needs no processing time.
	must(t, b.Scope(0, nil, time.Time{}).Value("v").Set([]byte("x")))
	must(t, wantV("v", "x", true).fn(b.Scope(0, nil, time.Time{})))
}

func TestMapRangeStopsAndMayWrite(t *testing.T) {
	s := openTest(t, testOptions(nil))
	b := s.NewBatch()
	defer b.Close()
	m := b.Scope(0, []byte("k"), t0).Map("m")
	for _, k := range []string{"a", "b", "c", "d"} {
		must(t, m.Put([]byte(k), []byte(k)))
	}
	var seen []string
	must(t, m.Range(func(k, _ []byte) bool {
		seen = append(seen, string(k))
		// Writing while ranging is allowed; the range does not see it.
		if err := m.Put([]byte("zz"+string(k)), nil); err != nil {
			t.Error(err)
		}
		return string(k) != "c"
	}))
	if !slices.Equal(seen, []string{"a", "b", "c"}) {
		t.Fatalf("Range saw %q", seen)
	}
	must(t, wantM("m", "a=a", "b=b", "c=c", "d=d", "zza=", "zzb=", "zzc=").fn(b.Scope(0, []byte("k"), t0)))
}

func TestBatchDiscarded(t *testing.T) {
	s := openTest(t, testOptions(nil))
	b := s.NewBatch()
	sc := b.Scope(2, []byte("k"), t0)
	must(t, sc.Value("v").Set([]byte("x")))
	must(t, sc.List("l").Append([]byte("x")))
	must(t, b.SetTimer(Timer{Time: t0, KeyGroup: 2, Key: []byte("k")}))
	must(t, b.PutMeta("gen", []byte("1")))
	b.Close()

	b = s.NewBatch()
	defer b.Close()
	must(t, wantV("v", "", false).fn(b.Scope(2, []byte("k"), t0)))
	if _, ok, _ := s.Meta("gen"); ok {
		t.Fatal("meta of a discarded batch is visible")
	}
	st := s.Stats()
	if st.Keys["v"] != 0 || st.Keys["l"] != 0 || st.Timers != 0 {
		t.Fatalf("counts after discard: %+v", st)
	}
}
