package telemetry

import (
	"context"
	"net/http"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
)

// W3C trace context header keys, lower-case as the specification writes
// them. NATS header lookup is case-sensitive, so these exact keys are what
// weir writes and reads.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// propagator is stateless; a value, not a registry.
var propagator propagation.TextMapPropagator = propagation.TraceContext{}

// HeaderCarrier adapts nats.Header to propagation.TextMapCarrier. It writes
// keys exactly as given — the W3C propagator gives them lower-case — and
// reads the exact key first, then its canonical MIME form ("Traceparent"),
// which a producer that went through http.Header may have written.
type HeaderCarrier nats.Header

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the first value of key.
func (c HeaderCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	if v := c[http.CanonicalHeaderKey(key)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the values of key with value.
func (c HeaderCarrier) Set(key, value string) { c[key] = []string{value} }

// Keys lists the keys present.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Inject writes the span context of ctx into h as W3C traceparent and
// tracestate headers. It writes nothing when ctx has no valid span context
// or h is nil (nats.NewMsg gives a message non-nil headers).
func Inject(ctx context.Context, h nats.Header) {
	if h == nil {
		return
	}
	propagator.Inject(ctx, HeaderCarrier(h))
}

// Extract returns ctx carrying the remote span context found in h, or ctx
// itself when h carries none (or a malformed one).
func Extract(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return propagator.Extract(ctx, HeaderCarrier(h))
}

// SpanContextString is the traceparent form of the span context of ctx
// ("00-<trace id>-<span id>-<flags>"), for storing a record's trace
// context inside a frame; empty when ctx has no valid span context.
// Trace state is not kept.
func SpanContextString(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c[HeaderTraceparent]
}

// ContextFromString returns parent carrying the remote span context that
// SpanContextString encoded in s; parent itself when s is empty or
// malformed.
func ContextFromString(parent context.Context, s string) context.Context {
	if s == "" {
		return parent
	}
	return propagator.Extract(parent, propagation.MapCarrier{HeaderTraceparent: s})
}

// ValidTraceparent returns s in canonical form if it is a valid W3C
// traceparent (a known version, lower-case hex, a trace and a span ID that
// are not all zeros), and "" otherwise. A traceparent from outside weir is
// continued only through this: a producer's header is not copied verbatim.
func ValidTraceparent(s string) string {
	if s == "" || len(s) > 512 {
		return ""
	}
	return SpanContextString(ContextFromString(context.Background(), s))
}
