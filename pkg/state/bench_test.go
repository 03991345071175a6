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
