package state

import (
	"encoding/binary"
	"testing"

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
