package catalog

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/bench"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/natstest"
)

// TestHandWrittenQ7: the hand-written q7 publishes, for every window the
// watermark has passed, the highest bid an offline pass over the same
// events finds, and nothing for windows still open.
func TestHandWrittenQ7(t *testing.T) {
	srv := natstest.Run(t)
	nc := srv.Connect(t)
	js := srv.JetStream(t)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}}); err != nil {
		t.Fatal(err)
	}
	g, err := nexmark.NewGenerator(nexmark.Config{Seed: 7, FirstEventTime: time.UnixMilli(1_000_000_000_000),
		EventsPerSecond: 100, Partitions: 1, KeyGroups: 16, Events: 3000, Hard: nexmark.HardCases{IdlePartition: -1}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]int64{} // window start → highest price
	var last int64
	for m, ok := g.Next(); ok; m, ok = g.Next() {
		if _, err := js.Publish(ctx, "in.0", m.Payload); err != nil {
			t.Fatal(err)
		}
		ev := m.Event
		last = max(last, ev.TS)
		if ev.Bid != nil {
			s := ev.TS - ev.TS%tumble
			want[s] = max(want[s], ev.Bid.Price)
		}
	}
	for s := range want {
		if s+tumble > last-2000 {
			delete(want, s) // not closed by the watermark
		}
	}
	sub, err := nc.SubscribeSync("out")
	if err != nil {
		t.Fatal(err)
	}
	_, n, err := bench.HandWritten(ctx, nc, js, "IN", &handQ7{max: map[int64]nexmark.Bid{}}, "out", 3000, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(want) || n == 0 {
		t.Fatalf("%d results, want %d", n, len(want))
	}
	for range n {
		msg, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Start int64       `json:"window_start"`
			Bid   nexmark.Bid `json:"bid"`
		}
		if err := json.Unmarshal(msg.Data, &got); err != nil {
			t.Fatal(err)
		}
		if want[got.Start] != got.Bid.Price {
			t.Errorf("window %d: price %d, want %d", got.Start, got.Bid.Price, want[got.Start])
		}
	}
}
