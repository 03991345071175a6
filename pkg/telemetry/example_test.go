package telemetry_test

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirflow/weir/pkg/telemetry"
)

// A producer injects its span's context into a NATS message; a consumer
// extracts it and continues the trace.
func ExampleInject() {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)

	msg := nats.NewMsg("weir.nexmark.deduped.0")
	telemetry.Inject(ctx, msg.Header)
	fmt.Println(msg.Header.Get("traceparent"))

	remote := trace.SpanContextFromContext(telemetry.Extract(context.Background(), msg.Header))
	fmt.Println(remote.TraceID(), remote.IsRemote())
	// Output:
	// 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
	// 4bf92f3577b34da6a3ce929d0e0e4736 true
}

// A record's trace context travels inside a frame as a string.
func ExampleSpanContextString() {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1},
		SpanID:     trace.SpanID{2},
		TraceFlags: trace.FlagsSampled,
	})
	s := telemetry.SpanContextString(trace.ContextWithSpanContext(context.Background(), sc))
	fmt.Println(s)
	back := trace.SpanContextFromContext(telemetry.ContextFromString(context.Background(), s))
	fmt.Println(back.SpanID())
	// Output:
	// 00-01000000000000000000000000000000-0200000000000000-01
	// 0200000000000000
}

// A main starts telemetry from the environment and shuts it down last.
func ExampleStart() {
	getenv := func(string) string { return "" } // os.Getenv in a main
	tel, err := telemetry.Start(context.Background(), telemetry.FromEnv(getenv, "weir-dedup"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tel.Shutdown(context.Background())
	fmt.Println("tracing:", tel.Tracing(), "metrics endpoint:", tel.MetricsURL() != "")
	// Output:
	// tracing: false metrics endpoint: false
}
