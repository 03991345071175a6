package test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/catalog"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/coordinator"
	"github.com/weirflow/weir/services/dedup"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
)

// BenchmarkNexmark measures each pipeline end to end on embedded JetStream
// (every write synced): b.N generated events are published first, then the
// pipeline's operators run until every operator has consumed what its
// upstream produced. The figure is ingress events per second through the
// whole pipeline.
//
//	go test ./test -run '^$' -bench Nexmark -benchtime 20000x
func BenchmarkNexmark(b *testing.B) {
	cat := catalog.Shipped()
	for _, name := range []string{"dedup", "q5", "q7", "q8", "q11"} {
		p, _ := cat.Lookup(name)
		b.Run(p.Name, func(b *testing.B) {
			srv := natstest.Run(b)
			js, _ := jetstream.New(srv.Connect(b))
			c, err := p.LoadContract()
			if err != nil {
				b.Fatal(err)
			}
			gen := nexmarkgen.Config{
				Stream: c.Ingress.Stream, SubjectPrefix: c.Ingress.SubjectPrefix, Retention: c.Ingress.Retention.D(),
				Producer: "bench",
				Gen: nexmark.Config{Seed: 1, FirstEventTime: time.Now().Add(-time.Hour), EventsPerSecond: 1000,
					Partitions: c.Ingress.Partitions, KeyGroups: c.State.KeyGroups, OutOfOrder: time.Second,
					Events: uint64(b.N), Hard: nexmark.HardCases{IdlePartition: -1}},
			}
			publish(b, js, gen)
			rts, err := stream.Runtimes(stream.Config{NATSURL: srv.ClientURL(), Contract: c, DataDir: b.TempDir(), Instance: "0"}, "", p.Factories, nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			b.ResetTimer()
			go func() { done <- stream.RunGroup(ctx, rts...) }()
			streamtest.CheckFor(b, 10*time.Minute, func() error {
				if s := rts[0].Stats(); s.In+s.DeadLettered+s.SideOutput < int64(b.N) {
					return fmt.Errorf("first operator at %d of %d", s.In, b.N)
				}
				for i := 1; i < len(rts); i++ {
					up, s := rts[i-1].Stats(), rts[i].Stats()
					if s.In+s.DeadLettered+s.SideOutput < up.Out {
						return fmt.Errorf("%s at %d of %d", s.Operator, s.In, up.Out)
					}
				}
				return nil
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkCheckpointUnderBackpressure runs the dedup pipeline over a
// backlog of b.N events with a coordinator checkpointing every 500 ms. The
// publish operator writes one synced message per event and falls behind
// dedup, so the deduped edge holds a growing backlog: aligned barriers
// queue behind it, unaligned checkpoints snapshot every operator at the
// trigger. Reported per mode: checkpoints completed and aborted, their
// mean and longest duration (trigger to commit), the longest alignment and
// start delay of any instance, and the pipeline's throughput.
//
//	go test ./test -run '^$' -bench CheckpointUnderBackpressure -benchtime 40000x
func BenchmarkCheckpointUnderBackpressure(b *testing.B) {
	for _, mode := range []string{contracts.CheckpointAligned, contracts.CheckpointUnaligned} {
		b.Run(mode, func(b *testing.B) {
			srv := natstest.Run(b)
			js, _ := jetstream.New(srv.Connect(b))
			c, err := contracts.Shipped("nexmark-dedup")
			if err != nil {
				b.Fatal(err)
			}
			c.Recovery.Mode = mode
			gen := nexmarkgen.Config{
				Stream: c.Ingress.Stream, SubjectPrefix: c.Ingress.SubjectPrefix, Retention: c.Ingress.Retention.D(),
				Producer: "bench",
				Gen: nexmark.Config{Seed: 1, FirstEventTime: time.Now().Add(-time.Hour), EventsPerSecond: 1000,
					Partitions: c.Ingress.Partitions, KeyGroups: c.State.KeyGroups, OutOfOrder: time.Second,
					Events: uint64(b.N), Hard: nexmark.HardCases{IdlePartition: -1}},
			}
			publish(b, js, gen)
			var rts []*stream.Runtime
			dir := b.TempDir()
			for _, op := range c.Operators {
				o, _ := dedup.Factories()[op.ID](c)
				rt, err := stream.New(stream.Config{NATSURL: srv.ClientURL(), Contract: c, DataDir: filepath.Join(dir, op.ID),
					Operator: op.ID, Instance: "0", Logger: testLogger(b)}, o)
				if err != nil {
					b.Fatal(err)
				}
				rts = append(rts, rt)
			}
			co, err := coordinator.New(coordinator.Config{NATSURL: srv.ClientURL(), Contract: c, Holder: "bench",
				Interval: 500 * time.Millisecond, Timeout: time.Minute, Lease: 5 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 2)
			b.ResetTimer()
			go func() { done <- stream.RunGroup(ctx, rts...) }()
			go func() { done <- co.Run(ctx) }()
			streamtest.CheckFor(b, 20*time.Minute, func() error {
				if s := rts[0].Stats(); s.In+s.DeadLettered < int64(b.N) {
					return fmt.Errorf("dedup at %d of %d", s.In, b.N)
				}
				if up, s := rts[0].Stats(), rts[1].Stats(); s.In < up.Out {
					return fmt.Errorf("publish at %d of %d", s.In, up.Out)
				}
				return nil
			})
			b.StopTimer()
			elapsed := b.Elapsed()
			cancel()
			for range 2 {
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
			store, err := checkpoint.Open(context.Background(), js, c.Pipeline, 1)
			if err != nil {
				b.Fatal(err)
			}
			recs, err := store.Records(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			var complete, aborted int
			var total, longest, align, delay time.Duration
			for _, r := range recs {
				for k, a := range r.Acks {
					b.Logf("checkpoint %d %s %s: %s: start delay %s alignment %s snapshot %s upload %s", r.Checkpoint, r.Status, r.Reason, k, a.StartDelay, a.Alignment, a.Snapshot, a.Upload)
				}
				if r.Status != checkpoint.Complete {
					aborted++
					continue
				}
				complete++
				total += r.Duration()
				longest = max(longest, r.Duration())
				align = max(align, r.Max(func(a checkpoint.Ack) time.Duration { return a.Alignment }))
				delay = max(delay, r.Max(func(a checkpoint.Ack) time.Duration { return a.StartDelay }))
			}
			if complete == 0 {
				if b.N < 10_000 {
					return // the framework's first, tiny run: too short for a checkpoint
				}
				b.Fatalf("no checkpoint completed in %s (%d aborted)", elapsed, aborted)
			}
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			b.ReportMetric(float64(complete), "completed")
			b.ReportMetric(float64(aborted), "aborted")
			b.ReportMetric(ms(total)/float64(complete), "mean-ms")
			b.ReportMetric(ms(longest), "max-ms")
			b.ReportMetric(ms(align), "max-align-ms")
			b.ReportMetric(ms(delay), "max-start-delay-ms")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
