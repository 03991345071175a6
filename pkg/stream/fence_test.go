package stream

import (
	"context"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/pkg/natstest"
)

// TestAFenceThatCannotBeReadIsNotNone: a restored instance waits for each
// writer's fence before reading its frames, and reads a writer that never
// fences after a bounded wait. A fence that cannot be read is not one
// that was never written: reading on would take the writer's older
// generation's frames past the cut for current ones. The frame is
// refused.
func TestAFenceThatCannotBeReadIsNotNone(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Run(t)
	js, err := jetstream.New(srv.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	st, err := checkpoint.Open(ctx, js, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, checkpoint.BucketName("p"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "fence.up.0", []byte(`{"generation":`)); err != nil {
		t.Fatal(err)
	}
	rn := &run{rt: &Runtime{log: slog.New(slog.DiscardHandler)}}
	rn.in.fencing.store, rn.in.fencing.log, rn.in.fencing.restoredFrom = st, rn.rt.log, 3
	rn.in.fencing.confirmed = map[string]bool{}
	rn.in.fencing.fences.m = map[string]checkpoint.Fence{}
	if err := rn.in.fencing.awaitFence(ctx, "up/0", 0); err == nil {
		t.Fatal("the frames of a writer whose fence cannot be read were read unfenced")
	} else {
		t.Logf("refused: %v", err)
	}
}
