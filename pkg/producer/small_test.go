package producer

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/pkg/natstest"
)

// BenchmarkSmallBatch compares, under SyncAlways, a small batch on
// distinct subjects (a step's frames, one per partition) stored as an
// atomic batch and as plain messages (PlainBelow): on a one-replica file
// stream, and on three replicas (r3), where the server stages a batch in
// memory. CPU counts the brokers': they run in this process.
//
//	go test ./pkg/producer -run '^$' -bench SmallBatch -benchtime 2000x
func BenchmarkSmallBatch(b *testing.B) {
	for _, replicas := range []int{1, 3} {
		for _, size := range []int{4, 8} {
			for _, plain := range []bool{false, true} {
				mode := map[bool]string{false: "atomic", true: "plain"}[plain]
				b.Run(fmt.Sprintf("r%d/%d/%s", replicas, size, mode), func(b *testing.B) {
					benchSmallBatch(b, replicas, size, plain)
				})
			}
		}
	}
}

func benchSmallBatch(b *testing.B, replicas, size int, plain bool) {
	var js jetstream.JetStream
	if replicas == 1 {
		js = natstest.Run(b).JetStream(b)
	} else {
		var err error
		if js, err = jetstream.New(natstest.RunCluster(b, replicas).Connect(b)); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	name := "SMALL"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, AllowAtomicPublish: true, Replicas: replicas}); err != nil {
		b.Fatal(err)
	}
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := range b.N {
		msgs := make([]*nats.Msg, size)
		for k := range msgs {
			msgs[k] = nats.NewMsg(fmt.Sprintf("%s.%d", name, k))
			msgs[k].Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%d.%d", i, k))
			msgs[k].Data = make([]byte, 200)
		}
		p := NewPipeline(js, 0, 0)
		if !plain {
			p.plainBelow = 0
		}
		if _, err := p.Send(ctx, msgs); err != nil {
			b.Fatal(err)
		}
		if _, err := p.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/batch")
}

// cpuTime is the process's CPU time, the embedded broker's included.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestABatchWithAnIDInProcessIsNotBrokenUp: a batch the stream refuses
// because one of its message IDs is in process (10158: a cluster's
// proposal not yet applied, or lost and held for the duplicate window) is
// not stored message by message, where the messages behind that one would
// land before it; refused for a duplicate already stored (10201), or by a
// stream without atomic batches (10174), it is.
func TestABatchWithAnIDInProcessIsNotBrokenUp(t *testing.T) {
	p := &Pipeline{}
	for code, want := range map[jetstream.ErrorCode]bool{
		errDuplicateInProcess: false, errBatchDuplicate: true, errAtomicDisabled: true, errBatchTooLarge: false,
	} {
		err := fmt.Errorf("producer: batch: %w", &jetstream.APIError{Code: 400, ErrorCode: code})
		if got := p.fallBack(err); got != want {
			t.Errorf("refused with %d: stored one by one %t, want %t", code, got, want)
		}
	}
}
