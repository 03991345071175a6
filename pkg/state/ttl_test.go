package state

import (
	"fmt"
	"math"
	"testing"
	"time"
)

func TestTTLHidesExpired(t *testing.T) {
	s := openTest(t, testOptions(nil))
	commit(t, s, func(b *Batch) {
		sc := b.Scope(4, []byte("k"), t0)
		must(t, sc.Value("vt").Set([]byte("v")))
		must(t, sc.Map("mt").Put([]byte("a"), []byte("1")))
		must(t, sc.List("lt").Append([]byte("x")))
		must(t, sc.Value("v").Set([]byte("forever")))
	})
	for _, c := range []struct {
		name string
		now  time.Time
		ops  []op
	}{
		{"just written", t0, []op{wantV("vt", "v", true), wantM("mt", "a=1"), wantL("lt", "x")}},
		{"before expiry", t0.Add(time.Minute - 1), []op{wantV("vt", "v", true), wantM("mt", "a=1"), wantL("lt", "x")}},
		{"at expiry", t0.Add(time.Minute), []op{wantV("vt", "", false), wantM("mt"), wantNoEntry("mt", "a"), wantL("lt")}},
		{"long after", t0.Add(time.Hour), []op{wantV("vt", "", false), wantM("mt"), wantL("lt"), wantV("v", "forever", true)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := s.NewBatch()
			defer b.Close()
			for _, o := range c.ops {
				must(t, o.fn(b.Scope(4, []byte("k"), c.now)))
			}
		})
	}
	// Hidden entries still count until Expire deletes them.
	if got := s.Stats().Keys; got["vt"] != 1 || got["mt"] != 1 || got["lt"] != 1 {
		t.Fatalf("Keys before Expire = %v", got)
	}
}

func TestTTLRefreshOnWrite(t *testing.T) {
	s := openTest(t, testOptions(nil))
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	commit(t, s, func(b *Batch) {
		sc := b.Scope(4, []byte("k"), at(0))
		must(t, sc.Value("vt").Set([]byte("v1")))
		must(t, sc.Map("mt").Put([]byte("a"), []byte("1")))
		must(t, sc.Map("mt").Put([]byte("b"), []byte("1")))
		must(t, sc.List("lt").Append([]byte("x")))
	})
	commit(t, s, func(b *Batch) {
		sc := b.Scope(4, []byte("k"), at(50*time.Second))
		must(t, sc.Value("vt").Set([]byte("v2")))
		must(t, sc.Map("mt").Put([]byte("b"), []byte("2")))
		must(t, sc.List("lt").Append([]byte("y")))
	})
	b := s.NewBatch()
	defer b.Close()
	sc := b.Scope(4, []byte("k"), at(70*time.Second))
	for _, o := range []op{wantV("vt", "v2", true), wantM("mt", "b=2"), wantL("lt", "x", "y")} {
		must(t, o.fn(sc))
	}
}

func TestExpire(t *testing.T) {
	s := openTest(t, testOptions(nil))
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	// Ten keys in each TTL family, written at t0+i seconds, spread over groups.
	commit(t, s, func(b *Batch) {
		for i := range 10 {
			sc := b.Scope(i%16, []byte(fmt.Sprint("k", i)), at(time.Duration(i)*time.Second))
			must(t, sc.Value("vt").Set([]byte("v")))
			must(t, sc.Map("mt").Put([]byte("a"), []byte("1")))
			must(t, sc.Map("mt").Put([]byte("b"), []byte("2")))
			must(t, sc.List("lt").Append([]byte("x")))
			must(t, sc.List("lt").Append([]byte("y")))
			must(t, sc.Value("v").Set([]byte("keep")))
		}
	})
	keys := func() map[string]int64 { return s.Stats().Keys }
	if k := keys(); k["vt"] != 10 || k["mt"] != 10 || k["lt"] != 10 {
		t.Fatalf("Keys = %v", k)
	}

	// Nothing is due before the first expiry.
	if n, err := s.Expire(at(time.Minute-1), 100); err != nil || n != 0 {
		t.Fatalf("Expire early = %d, %v", n, err)
	}
	// Keys 0..4 expire at t0+60s..64s: 5 keys x (value + 2 map entries + list).
	n, err := s.Expire(at(time.Minute+4*time.Second), 100)
	must(t, err)
	if n != 5*4 {
		t.Fatalf("Expire = %d, want 20", n)
	}
	if k := keys(); k["vt"] != 5 || k["mt"] != 5 || k["lt"] != 5 || k["v"] != 10 {
		t.Fatalf("Keys after Expire = %v", k)
	}
	// Bounded work: a limit below what is due leaves the rest for later.
	n, err = s.Expire(at(time.Hour), 7)
	must(t, err)
	if n != 7 {
		t.Fatalf("Expire with limit 7 = %d", n)
	}
	for {
		n, err := s.Expire(at(time.Hour), 3)
		must(t, err)
		if n < 3 {
			break
		}
	}
	if k := keys(); k["vt"] != 0 || k["mt"] != 0 || k["lt"] != 0 || k["v"] != 10 {
		t.Fatalf("Keys after expiring everything = %v", k)
	}
	// The records are gone, not just hidden: only the non-TTL family and
	// its counters remain in the store.
	must(t, s.scan([]byte{kindState}, []byte{kindLimit}, func(k, _ []byte) error {
		switch k[0] {
		case kindState:
			if sk, _ := parseStateKey(k); sk.family != "v" {
				t.Errorf("record %x of family %q survived", k, sk.family)
			}
		case kindExpiry:
			t.Errorf("expiry record %x survived", k)
		case kindCount:
			if string(k[4:]) != "v" {
				t.Errorf("counter %q survived", k[4:])
			}
		}
		return nil
	}))
	if n, err := s.Expire(at(time.Hour), 0); n != 0 || err != nil {
		t.Fatalf("Expire limit 0 = %d, %v", n, err)
	}
}

func TestExpireMapEntriesIndividually(t *testing.T) {
	s := openTest(t, testOptions(nil))
	commit(t, s, func(b *Batch) {
		must(t, b.Scope(0, []byte("k"), t0).Map("mt").Put([]byte("old"), []byte("1")))
	})
	commit(t, s, func(b *Batch) {
		must(t, b.Scope(0, []byte("k"), t0.Add(30*time.Second)).Map("mt").Put([]byte("new"), []byte("2")))
	})
	n, err := s.Expire(t0.Add(time.Minute), 10)
	must(t, err)
	if n != 1 || s.Stats().Keys["mt"] != 1 {
		t.Fatalf("Expire = %d, keys %d; want 1, 1", n, s.Stats().Keys["mt"])
	}
	b := s.NewBatch()
	must(t, wantM("mt", "new=2").fn(b.Scope(0, []byte("k"), t0.Add(time.Minute))))
	b.Close()
	n, err = s.Expire(t0.Add(2*time.Minute), 10)
	must(t, err)
	if n != 1 || s.Stats().Keys["mt"] != 0 {
		t.Fatalf("second Expire = %d, keys %d; want 1, 0", n, s.Stats().Keys["mt"])
	}
}

// TestExpireAfterOverwrite: a value rewritten after its TTL was refreshed
// must survive the time its first write would have expired.
func TestExpireAfterOverwrite(t *testing.T) {
	for _, fam := range []string{"vt", "mt", "lt"} {
		t.Run(fam, func(t *testing.T) {
			s := openTest(t, testOptions(nil))
			write := func(now time.Time, v string) {
				commit(t, s, func(b *Batch) {
					sc := b.Scope(1, []byte("k"), now)
					switch fam {
					case "vt":
						must(t, sc.Value(fam).Set([]byte(v)))
					case "mt":
						must(t, sc.Map(fam).Put([]byte("a"), []byte(v)))
					case "lt":
						must(t, sc.List(fam).Append([]byte(v)))
					}
				})
			}
			write(t0, "1")
			write(t0.Add(40*time.Second), "2") // now expires at t0+100s
			if n, err := s.Expire(t0.Add(70*time.Second), 10); err != nil || n != 0 {
				t.Fatalf("Expire at first expiry = %d, %v; want 0 (old index record removed by the overwrite)", n, err)
			}
			b := s.NewBatch()
			sc := b.Scope(1, []byte("k"), t0.Add(70*time.Second))
			want := map[string]op{"vt": wantV("vt", "2", true), "mt": wantM("mt", "a=2"), "lt": wantL("lt", "1", "2")}[fam]
			must(t, want.fn(sc))
			b.Close()
			if n, err := s.Expire(t0.Add(100*time.Second), 10); err != nil || n != 1 {
				t.Fatalf("Expire at second expiry = %d, %v; want 1", n, err)
			}
			if got := s.Stats().Keys[fam]; got != 0 {
				t.Fatalf("keys = %d after expiry", got)
			}
		})
	}
}

// TestExpireStaleRecord: an expiry record that no longer matches its entry
// (the entry was rewritten with another expiry) is dropped without
// deleting the entry.
func TestExpireStaleRecord(t *testing.T) {
	s := openTest(t, testOptions(nil))
	commit(t, s, func(b *Batch) {
		sc := b.Scope(2, []byte("k"), t0)
		must(t, sc.Value("vt").Set([]byte("v")))
		must(t, sc.Map("mt").Put([]byte("a"), []byte("1")))
		must(t, sc.List("lt").Append([]byte("x")))
	})
	// Forge records as an older write would have left them, plus one for
	// an entry that no longer exists.
	early := t0.Add(-time.Hour).UnixNano()
	p := func(fam string) []byte { return statePrefix(2, fam, []byte("k")) }
	commit(t, s, func(b *Batch) {
		must(t, b.pb.Set(expiryKey(2, early, p("vt")), nil, nil))
		must(t, b.pb.Set(expiryKey(2, early, mapEntryKey(p("mt"), []byte("a"))), nil, nil))
		must(t, b.pb.Set(expiryKey(2, early, p("lt")), nil, nil))
		must(t, b.pb.Set(expiryKey(2, early, mapEntryKey(p("mt"), []byte("gone"))), nil, nil))
	})
	n, err := s.Expire(t0, 100)
	must(t, err)
	if n != 4 {
		t.Fatalf("Expire = %d, want 4 stale records processed", n)
	}
	b := s.NewBatch()
	for _, o := range []op{wantV("vt", "v", true), wantM("mt", "a=1"), wantL("lt", "x")} {
		must(t, o.fn(b.Scope(2, []byte("k"), t0)))
	}
	b.Close()
	if k := s.Stats().Keys; k["vt"] != 1 || k["mt"] != 1 || k["lt"] != 1 {
		t.Fatalf("Keys = %v", k)
	}
	// The real records still expire the entries.
	n, err = s.Expire(t0.Add(time.Minute), 100)
	must(t, err)
	if k := s.Stats().Keys; n != 3 || k["vt"] != 0 || k["mt"] != 0 || k["lt"] != 0 {
		t.Fatalf("Expire = %d, Keys = %v", n, k)
	}
}

func TestAppendToExpiredList(t *testing.T) {
	s := openTest(t, testOptions(nil))
	commit(t, s, func(b *Batch) { must(t, app("lt", "old1", "old2").fn(b.Scope(0, []byte("k"), t0))) })
	later := t0.Add(2 * time.Minute)
	commit(t, s, func(b *Batch) { must(t, app("lt", "new").fn(b.Scope(0, []byte("k"), later))) })
	b := s.NewBatch()
	must(t, wantL("lt", "new").fn(b.Scope(0, []byte("k"), later)))
	b.Close()
	if got := s.Stats().Keys["lt"]; got != 1 {
		t.Fatalf("keys = %d", got)
	}
	// Only the new list's record is due, and only at its own expiry.
	if n, err := s.Expire(later.Add(time.Minute-1), 10); err != nil || n != 0 {
		t.Fatalf("Expire = %d, %v", n, err)
	}
	if n, err := s.Expire(later.Add(time.Minute), 10); err != nil || n != 1 || s.Stats().Keys["lt"] != 0 {
		t.Fatalf("Expire = %d, %v, keys %d", n, err, s.Stats().Keys["lt"])
	}
}

func TestExpirySaturates(t *testing.T) {
	o := testOptions(nil)
	o.Families = append(o.Families, Family{Name: "long", Kind: KindValue, TTL: math.MaxInt64, MaxKeys: 1})
	s := openTest(t, o)
	late := time.Unix(0, math.MaxInt64-10)
	commit(t, s, func(b *Batch) { must(t, b.Scope(0, nil, late).Value("long").Set([]byte("x"))) })
	b := s.NewBatch()
	must(t, wantV("long", "x", true).fn(b.Scope(0, nil, late)))
	b.Close()
}
