package state

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// BenchmarkValueSet measures state updates: batches of 500 value sets over a
// working set of 10,000 keys, one synced commit per batch (on vfs.NewMem,
// so the sync costs nothing).
func BenchmarkValueSet(b *testing.B) {
	for _, bc := range []struct {
		name string
		fam  Family
	}{
		{"plain", Family{Name: "f", Kind: KindValue, MaxKeys: 1 << 20}},
		{"ttl", Family{Name: "f", Kind: KindValue, MaxKeys: 1 << 20, TTL: 3600e9}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := openTest(b, Options{FS: vfs.NewMem(), Families: []Family{bc.fam}, KeyGroups: 256})
			const perBatch, keys = 500, 10_000
			key := make([]byte, 8)
			val := make([]byte, 64)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				batch := s.NewBatch()
				for range perBatch {
					binary.BigEndian.PutUint64(key, uint64(i%keys))
					binary.BigEndian.PutUint64(val, uint64(i))
					if err := batch.Scope(i%256, key, t0).Value("f").Set(val); err != nil {
						b.Fatal(err)
					}
					i++
				}
				if err := batch.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i), "ns/set")
		})
	}
}

// BenchmarkFireBurst measures firing a window's timers the way the runtime
// does when the watermark passes a window's end: timers of 7,000 keys at
// one time over 256 key groups (q5's burst), fetched with DueTimers in
// chunks and deleted in the batch that fires them. The store holds the
// timers committed, as after the steps that set them.
func BenchmarkFireBurst(b *testing.B) {
	const keys, groups = 7000, 256
	for _, chunk := range []int{256, 2048} {
		b.Run(fmt.Sprintf("chunk=%d", chunk), func(b *testing.B) {
			s := openTest(b, Options{FS: vfs.NewMem(), KeyGroups: groups})
			fired := 0
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				set := s.NewBatch()
				at := t0.Add(time.Duration(fired+1) * time.Hour) // later than every earlier round's
				for i := range keys {
					key := binary.BigEndian.AppendUint64(nil, uint64(i))
					if err := set.AddTimer(Timer{Domain: EventTime, Time: at, KeyGroup: i % groups, Key: key, Name: "w"}); err != nil {
						b.Fatal(err)
					}
				}
				if err := set.Commit(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				batch := s.NewBatch()
				n := 0
				for {
					due, err := batch.DueTimers(EventTime, at, chunk)
					if err != nil {
						b.Fatal(err)
					}
					if len(due) == 0 {
						break
					}
					for _, t := range due {
						if err := batch.DeleteTimer(t); err != nil {
							b.Fatal(err)
						}
					}
					n += len(due)
				}
				if n != keys {
					b.Fatalf("fired %d timers, want %d", n, keys)
				}
				if err := batch.Commit(); err != nil {
					b.Fatal(err)
				}
				fired += n
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(fired), "ns/timer")
		})
	}
}

// BenchmarkFireChain fires 2,048 timers a second apart, each of whose
// firing sets a follow-up half a second later — before every timer left
// in the list — as a window's cleanup after its end does when a watermark
// catches up many windows at once. The follow-ups are merged into the
// list (Merge), as the runtime fires, rather than fetched again.
func BenchmarkFireChain(b *testing.B) {
	const timers, groups = 2048, 128
	s := openTest(b, Options{FS: vfs.NewMem(), KeyGroups: groups})
	round := 0
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		set := s.NewBatch()
		base := t0.Add(time.Duration(round) * 10 * time.Hour)
		for i := range timers {
			key := binary.BigEndian.AppendUint64(nil, uint64(i))
			if err := set.AddTimer(Timer{Domain: EventTime, Time: base.Add(time.Duration(i) * time.Second), KeyGroup: i % groups, Key: key, Name: "end"}); err != nil {
				b.Fatal(err)
			}
		}
		if err := set.Commit(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		upTo := base.Add(5 * time.Hour)
		batch := s.NewBatch()
		batch.Note(EventTime, true)
		n := 0
		for {
			due, err := batch.DueTimers(EventTime, upTo, 4*timers)
			if err != nil {
				b.Fatal(err)
			}
			if len(due) == 0 {
				break
			}
			for len(due) > 0 {
				t := due[0]
				due = due[1:]
				if ok, err := batch.TakeTimer(t); err != nil || !ok {
					b.Fatal(ok, err)
				}
				if t.Name == "end" {
					if err := batch.AddTimer(Timer{Domain: EventTime, Time: t.Time.Add(time.Second / 2), KeyGroup: t.KeyGroup, Key: t.Key, Name: "gc"}); err != nil {
						b.Fatal(err)
					}
				}
				n++
				due = batch.Merge(EventTime, due, upTo, nil)
			}
		}
		if n != 2*timers {
			b.Fatalf("fired %d timers, want %d", n, 2*timers)
		}
		if err := batch.Commit(); err != nil {
			b.Fatal(err)
		}
		round++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(round*2*timers), "ns/timer")
}

// BenchmarkNewKeys measures dedup's state work: every key new (an event
// ID), read first and found absent, then set in a TTL family, 900 to a
// batch, each batch committed and synced on the machine's disk — so the
// memtable flushes and the compactions that new random keys cost are in
// the figure, as in the running operator.
func BenchmarkNewKeys(b *testing.B) {
	s, err := Open(b.TempDir(), Options{Families: []Family{{Name: "seen", Kind: KindValue, MaxKeys: 1 << 30, TTL: 26 * time.Hour}}, KeyGroups: 256})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const perBatch = 900
	val := []byte("2026-12-07T08:00:00.123Z nexmark.events.1:12345")
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		batch := s.NewBatch()
		for range perBatch {
			key := fmt.Appendf(nil, "b-%d-%x", i, uint64(i)*0x9e3779b97f4a7c15)
			v := batch.Scope(i%256, key, t0).Value("seen")
			if _, ok, err := v.Get(); err != nil || ok {
				b.Fatalf("get: %v, %v", ok, err)
			}
			if err := v.Set(val); err != nil {
				b.Fatal(err)
			}
			i++
		}
		if err := batch.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i), "ns/key")
}
