package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/producer"
)

// TestReadAndWriteStoresEveryMessageAgain: c-read-write's floor is real
// work — each ingress message read, stored again with its headers in a
// synced stream, the ingress acknowledged — and a stream shorter than asked
// for is an error, not a fast run.
func TestReadAndWriteStoresEveryMessageAgain(t *testing.T) {
	ctx := context.Background()
	js := natstest.Run(t).JetStream(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}, AllowAtomicPublish: true}); err != nil {
		t.Fatal(err)
	}
	const n = 1234 // two full batches and a partial one
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		msgs[i] = &nats.Msg{Subject: fmt.Sprintf("in.%d", i%3), Header: nats.Header{jetstream.MsgIDHeader: {fmt.Sprint("e-", i)}}, Data: []byte(fmt.Sprint(i))}
	}
	if _, err := producer.Publish(ctx, js, msgs, 0, 0); err != nil {
		t.Fatal(err)
	}
	d, err := ReadAndWrite(ctx, js, "IN", "OUT", n)
	if err != nil || d <= 0 {
		t.Fatalf("ReadAndWrite: %s, %v", d, err)
	}
	c, err := js.OrderedConsumer(ctx, "OUT", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		m, err := c.Next()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if id, want := m.Headers().Get(jetstream.MsgIDHeader), fmt.Sprint("e-", i); id != want || string(m.Data()) != fmt.Sprint(i) {
			t.Fatalf("message %d: id %q data %q", i, id, m.Data())
		}
	}
	short, cancel := context.WithTimeout(ctx, 3e9)
	defer cancel()
	if _, err := ReadAndWrite(short, js, "IN", "OUT2", n+1); err == nil {
		t.Fatal("no error reading more messages than the stream holds")
	}
}
