package telemetry

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirflow/weir/pkg/natstest"
)

// sampledContext returns a context with a real, sampled span and trace
// state.
func sampledContext(t *testing.T) (context.Context, trace.SpanContext) {
	t.Helper()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "produce")
	t.Cleanup(func() { span.End() })
	ts, err := trace.ParseTraceState("weir=abc,other=1")
	if err != nil {
		t.Fatal(err)
	}
	sc := span.SpanContext().WithTraceState(ts)
	return trace.ContextWithSpanContext(ctx, sc), sc
}

func TestInjectExtractLowerCase(t *testing.T) {
	ctx, sc := sampledContext(t)
	h := nats.Header{}
	Inject(ctx, h)
	if len(h["traceparent"]) != 1 || len(h["tracestate"]) != 1 {
		t.Fatalf("headers %v; want lower-case traceparent and tracestate", h)
	}
	if _, ok := h["Traceparent"]; ok {
		t.Fatalf("headers %v hold a canonicalized key", h)
	}
	if h.Get("traceparent") == "" {
		t.Fatal("nats.Header.Get(\"traceparent\") is empty")
	}
	got := trace.SpanContextFromContext(Extract(context.Background(), h))
	if !got.IsRemote() || got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() ||
		!got.IsSampled() || got.TraceState().String() != sc.TraceState().String() {
		t.Fatalf("extracted %+v, want %+v", got, sc)
	}
}

func TestExtractCanonicalAndMissing(t *testing.T) {
	ctx, sc := sampledContext(t)
	h := nats.Header{}
	Inject(ctx, h)
	canon := nats.Header{"Traceparent": h["traceparent"]}
	if got := trace.SpanContextFromContext(Extract(context.Background(), canon)); got.TraceID() != sc.TraceID() {
		t.Fatalf("canonical Traceparent not read: %+v", got)
	}
	for _, h := range []nats.Header{nil, {}, {"traceparent": {"garbage"}}} {
		if got := trace.SpanContextFromContext(Extract(context.Background(), h)); got.IsValid() {
			t.Fatalf("Extract(%v) gave %+v", h, got)
		}
	}
	Inject(context.Background(), nil) // no panic
	empty := nats.Header{}
	Inject(context.Background(), empty)
	if len(empty) != 0 {
		t.Fatalf("Inject without a span wrote %v", empty)
	}
}

// TestPropagationOverNATS sends the headers through a real server: what
// arrives is read with the same lower-case keys.
func TestPropagationOverNATS(t *testing.T) {
	srv := natstest.Run(t)
	nc := srv.Connect(t)
	sub, err := nc.SubscribeSync("weir.test.trace")
	if err != nil {
		t.Fatal(err)
	}
	ctx, sc := sampledContext(t)
	msg := nats.NewMsg("weir.test.trace")
	msg.Data = []byte("x")
	Inject(ctx, msg.Header)
	if err := nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	got, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Header["traceparent"]; !ok {
		t.Fatalf("received headers %v lack lower-case traceparent", got.Header)
	}
	rsc := trace.SpanContextFromContext(Extract(context.Background(), got.Header))
	if rsc.TraceID() != sc.TraceID() || rsc.SpanID() != sc.SpanID() || !rsc.IsSampled() {
		t.Fatalf("extracted %+v over NATS, want %+v", rsc, sc)
	}
}

func TestSpanContextString(t *testing.T) {
	if s := SpanContextString(context.Background()); s != "" {
		t.Fatalf("no span gave %q", s)
	}
	ctx, sc := sampledContext(t)
	s := SpanContextString(ctx)
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	if s != want {
		t.Fatalf("SpanContextString = %q, want %q", s, want)
	}
	got := trace.SpanContextFromContext(ContextFromString(context.Background(), s))
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsSampled() || !got.IsRemote() {
		t.Fatalf("ContextFromString gave %+v", got)
	}
	parent := context.WithValue(context.Background(), struct{}{}, 1)
	if ContextFromString(parent, "") != parent {
		t.Fatal("empty string did not return the parent")
	}
	if trace.SpanContextFromContext(ContextFromString(parent, "00-bad")).IsValid() {
		t.Fatal("malformed string gave a span context")
	}
}
