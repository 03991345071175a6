package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/pkg/natstest"
)

// TestScaleAssignsPartitions scales a fresh pipeline's service and prints
// which input partitions each instance owns; it refuses more instances
// than partitions and a pipeline that ran without a checkpoint.
func TestScaleAssignsPartitions(t *testing.T) {
	srv := natstest.Run(t)
	url := srv.ClientURL()
	out, err := weir(t, "scale", "-nats", url, "-contract", "nexmark-q11", "-service", "nexmark-q11", "-instances", "a,b,c")
	if err != nil {
		t.Fatalf("weir scale: %v\n%s", err, out)
	}
	for _, want := range []string{
		"assignment version 1", "no checkpoint",
		"q11-key       a         0-1", "q11-key       b         2-2", "q11-key       c         3-3",
		"q11-sessions  a         0-1", "q11-sessions  c         3-3",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("weir scale output lacks %q:\n%s", want, out)
		}
	}
	out, err = weir(t, "scale", "-nats", url, "-contract", "nexmark-q11", "-operator", "q11-sessions", "-instances", "a,b,c,d,e")
	if err == nil || !strings.Contains(err.Error(), "1 to 4 instances, not 5") {
		t.Fatalf("scaling to 5 instances over 4 partitions: %v\n%s", err, out)
	}
	out, err = weir(t, "scale", "-nats", url, "-contract", "nexmark-q11", "-operator", "q11-sessions", "-instances", "a,a")
	if err == nil || !strings.Contains(err.Error(), `instance "a" is empty, repeated`) {
		t.Fatalf("scaling to a repeated instance: %v\n%s", err, out)
	}

	// An operator with operators chained into its step runs as one
	// instance.
	out, err = weir(t, "scale", "-nats", url, "-contract", "nexmark-q7", "-operator", "q7-max", "-instances", "a,b")
	if err == nil || !strings.Contains(err.Error(), "runs q7-key in its step") || !strings.Contains(err.Error(), "runs as one instance") {
		t.Fatalf("scaling q7-max, with q7-key chained, to two: %v\n%s", err, out)
	}

	// A pipeline whose edges carry frames but that never checkpointed has
	// no cut to restart from.
	c, err := contracts.Shipped("nexmark-q8")
	if err != nil {
		t.Fatal(err)
	}
	js := srv.JetStream(t)
	ctx := context.Background()
	spec := edge.Spec{Pipeline: c.Pipeline, Edge: c.Edges[0].Name, Partitions: c.Edges[0].Partitions, Retention: time.Hour}
	if _, err := edge.Ensure(ctx, js, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, spec.Subject(0), []byte("frame")); err != nil {
		t.Fatal(err)
	}
	out, err = weir(t, "scale", "-nats", url, "-contract", "nexmark-q8", "-service", c.Operators[0].Service, "-instances", "a,b")
	if err == nil || !strings.Contains(err.Error(), "completed no checkpoint to restart from") {
		t.Fatalf("scaling a pipeline that ran without checkpoints: %v\n%s", err, out)
	}
}
