package checkpoint_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/pkg/checkpoint"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/state"
)

// BenchmarkCheckpoint measures a checkpoint of an instance whose state
// holds `keys` keys of ~200 bytes, after 1% of them changed: the snapshot
// (flush and Pebble checkpoint), the incremental upload to the Object Store,
// and a restore (download into an empty directory and open).
//
//	go test ./pkg/checkpoint -run '^$' -bench Checkpoint -benchtime 5x
func BenchmarkCheckpoint(b *testing.B) {
	for _, keys := range []int{10_000, 100_000, 500_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			ctx := context.Background()
			srv := natstest.Run(b)
			js, _ := jetstream.New(srv.Connect(b))
			cs, err := checkpoint.Open(ctx, js, "bench", 1)
			if err != nil {
				b.Fatal(err)
			}
			dir := b.TempDir()
			st, err := state.Open(filepath.Join(dir, "state"), state.Options{Families: families, KeyGroups: 256, NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			for i := 0; i < keys; i += 10_000 {
				write(b, st, i, min(i+10_000, keys))
			}
			var snap, upload, restore time.Duration
			var full, inc int64
			n := uint64(0)
			b.ResetTimer()
			for b.Loop() {
				n++
				write(b, st, keys+int(n)*keys/100, keys+int(n+1)*keys/100)
				d := filepath.Join(dir, fmt.Sprintf("snap-%d", n))
				t0 := time.Now()
				if err := st.Snapshot(d); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				m, err := cs.Upload(ctx, d, checkpoint.Manifest{Operator: "op", Instance: "0", Checkpoint: n})
				if err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				rdir := filepath.Join(b.TempDir(), "state")
				if err := cs.Download(ctx, m, rdir); err != nil {
					b.Fatal(err)
				}
				rs, err := state.Open(rdir, state.Options{Families: families, KeyGroups: 256})
				if err != nil {
					b.Fatal(err)
				}
				rs.Close()
				restore += time.Since(t2)
				snap += t1.Sub(t0)
				upload += t2.Sub(t1)
				full, inc = m.FullBytes, m.NewBytes
			}
			b.StopTimer()
			per := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(n) }
			b.ReportMetric(per(snap), "snapshot-ms")
			b.ReportMetric(per(upload), "upload-ms")
			b.ReportMetric(per(restore), "restore-ms")
			b.ReportMetric(float64(full)/(1<<20), "full-MiB")
			b.ReportMetric(float64(inc)/(1<<20), "incremental-MiB")
		})
	}
}
