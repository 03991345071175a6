package natsconn_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/pkg/natstest"
)

// TestPublishedTellsAConsumersDelivery: a message published to a control
// subject is Published; one a push consumer of a stream delivers there —
// which any process that may make consumers of a stream holding a message
// of its own could do, a deliver subject being checked against no
// permission — is not (it keeps the subject it was stored under).
func TestPublishedTellsAConsumersDelivery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := natstest.Run(t)
	nc := srv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := nc.SubscribeSync("weir.ctl.p.trigger")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("weir.ctl.p.trigger", []byte(`{"checkpoint":1}`)); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil || !natsconn.Published(m) {
		t.Fatalf("a published trigger (%v): Published %t", err, err == nil && natsconn.Published(m))
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"mine.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "mine.x", []byte(`{"checkpoint":1000000000000}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, "S", jetstream.ConsumerConfig{Name: "forger", DeliverSubject: "weir.ctl.p.trigger", AckPolicy: jetstream.AckNonePolicy}); err != nil {
		t.Fatal(err)
	}
	m, err = sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("the push consumer's delivery: %v", err)
	}
	if natsconn.Published(m) {
		t.Errorf("a message a consumer delivered to the trigger subject (stored under %s) counts as published", m.Subject)
	}
}
