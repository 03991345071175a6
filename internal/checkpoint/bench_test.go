package checkpoint_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/state"
)

// BenchmarkCheckpoint measures a checkpoint of an instance whose state
// holds `keys` keys of ~200 bytes, after 1% of them changed: the snapshot
// (flush and Pebble checkpoint), the incremental upload to the Object Store,
// and a restore (download into an empty directory and open).
//
//	go test ./internal/checkpoint -run '^$' -bench Checkpoint -benchtime 5x
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

// BenchmarkRestore1GiB restores an instance's state of about 1 GiB on disk
// (WEIR_BENCH_RESTORE_MIB overrides the size) from the Object Store: its
// own snapshot downloaded whole and opened (a new host), and the same
// snapshot rebuilt key group by key group into a fresh store, as a rescale
// does when one instance takes over every key group. Values are random, so
// the size on disk is the size moved.
//
//	go test ./internal/checkpoint -run '^$' -bench Restore1GiB -benchtime 1x
func BenchmarkRestore1GiB(b *testing.B) {
	mib := int64(1024)
	if v := os.Getenv("WEIR_BENCH_RESTORE_MIB"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatalf("WEIR_BENCH_RESTORE_MIB=%q: %v", v, err)
		}
		mib = n
	}
	ctx := context.Background()
	srv := natstest.Run(b)
	js, _ := jetstream.New(srv.Connect(b))
	cs, err := checkpoint.Open(ctx, js, "bench", 1)
	if err != nil {
		b.Fatal(err)
	}
	fams := []state.Family{{Name: "v", Kind: state.KindValue, MaxKeys: 1 << 24}}
	dir := b.TempDir()
	st, err := state.Open(filepath.Join(dir, "state"), state.Options{Families: fams, KeyGroups: 256, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewChaCha8([32]byte{1}))
	value := make([]byte, 4096)
	keys := 0
	for int64(keys)*int64(len(value)) < mib<<20 {
		batch := st.NewBatch()
		for range 4096 {
			for i := range value {
				value[i] = byte(rng.Uint32())
			}
			k := []byte(fmt.Sprintf("key-%09d", keys))
			if err := batch.Scope(keys%256, k, time.Time{}).Value("v").Set(value); err != nil {
				b.Fatal(err)
			}
			keys++
		}
		if err := batch.Commit(); err != nil {
			b.Fatal(err)
		}
		if err := st.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	snap := filepath.Join(dir, "snap")
	if err := st.Snapshot(snap); err != nil {
		b.Fatal(err)
	}
	st.Close()
	up := time.Now()
	m, err := cs.Upload(ctx, snap, checkpoint.Manifest{Operator: "op", Instance: "0", Checkpoint: 1})
	if err != nil {
		b.Fatal(err)
	}
	upload := time.Since(up)
	var restore, rebuild time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		rdir := filepath.Join(b.TempDir(), "state")
		if err := cs.Download(ctx, m, rdir); err != nil {
			b.Fatal(err)
		}
		rs, err := state.Open(rdir, state.Options{Families: fams, KeyGroups: 256})
		if err != nil {
			b.Fatal(err)
		}
		restore += time.Since(t0)
		ns, err := state.Open(filepath.Join(b.TempDir(), "rebuilt"), state.Options{Families: fams, KeyGroups: 256})
		if err != nil {
			b.Fatal(err)
		}
		n, err := ns.Import(rs, func(int) bool { return true })
		if err != nil {
			b.Fatal(err)
		}
		rebuild += time.Since(t0) // download and open, then import
		if got := ns.Stats().Keys["v"]; got != int64(keys) || n < int64(keys) {
			b.Fatalf("rebuilt %d keys (%d copied), want %d", got, n, keys)
		}
		ns.Close()
		rs.Close()
	}
	b.StopTimer()
	sec := func(d time.Duration) float64 { return d.Seconds() / float64(b.N) }
	b.ReportMetric(float64(m.FullBytes)/(1<<20), "state-MiB")
	b.ReportMetric(upload.Seconds(), "upload-s")
	b.ReportMetric(sec(restore), "restore-s")
	b.ReportMetric(float64(m.FullBytes)/(1<<20)/sec(restore), "restore-MiB/s")
	b.ReportMetric(sec(rebuild), "rebuild-s")
	b.ReportMetric(0, "ns/op")
}
