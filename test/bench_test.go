package test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/nexmark"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/services/dedup"
	"github.com/weirflow/weir/services/nexmark-gen"
	"github.com/weirflow/weir/services/nexmark-q11"
	"github.com/weirflow/weir/services/nexmark-q5"
	"github.com/weirflow/weir/services/nexmark-q7"
	"github.com/weirflow/weir/services/nexmark-q8"
)

// BenchmarkNexmark measures each pipeline end to end on embedded JetStream
// (every write synced): b.N generated events are published first, then the
// pipeline's operators run until every operator has consumed what its
// upstream produced. The figure is ingress events per second through the
// whole pipeline.
//
//	go test ./test -run '^$' -bench Nexmark -benchtime 20000x
func BenchmarkNexmark(b *testing.B) {
	pipelines := []struct {
		name, contract, service string
		factories               map[string]stream.Factory
	}{
		{"dedup", "nexmark-dedup", "dedup", dedup.Factories()},
		{"q5", "nexmark-q5", q5.Service, q5.Factories()},
		{"q7", "nexmark-q7", q7.Service, q7.Factories()},
		{"q8", "nexmark-q8", q8.Service, q8.Factories()},
		{"q11", "nexmark-q11", q11.Service, q11.Factories()},
	}
	for _, p := range pipelines {
		b.Run(p.name, func(b *testing.B) {
			srv := natstest.Run(b)
			js, _ := jetstream.New(srv.Connect(b))
			c, err := contracts.Shipped(p.contract)
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
			var rts []*stream.Runtime
			dir := b.TempDir()
			for _, op := range c.Operators {
				o, err := p.factories[op.ID](c)
				if err != nil {
					b.Fatal(err)
				}
				rt, err := stream.New(stream.Config{NATSURL: srv.ClientURL(), Contract: c, DataDir: filepath.Join(dir, op.ID),
					Operator: op.ID, Instance: "0"}, o)
				if err != nil {
					b.Fatal(err)
				}
				rts = append(rts, rt)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			b.ResetTimer()
			go func() { done <- stream.RunGroup(ctx, rts...) }()
			checkFor(b, 10*time.Minute, func() error {
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
