package stream

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/telemetry"
)

// observer holds what the runtime reports to OpenTelemetry. Its zero value
// (no telemetry configured) records nothing.
type observer struct {
	metrics *telemetry.RuntimeMetrics // nil-safe
	tracer  trace.Tracer              // nil: not tracing

	mu struct {
		sync.Mutex
		watermarks map[string]time.Time // per input, as of the last step
		lag        map[string]int64     // per input: messages the consumer has not delivered yet
	}
}

func (rt *Runtime) startObserver() error {
	tel := rt.cfg.Telemetry
	rt.obs.mu.watermarks = map[string]time.Time{}
	rt.obs.mu.lag = map[string]int64{}
	if tel == nil {
		return nil
	}
	m, err := telemetry.NewRuntimeMetrics(tel.Meter("github.com/weirflow/weir/pkg/stream"),
		attribute.String("pipeline", rt.plan.pipeline),
		attribute.String("operator", rt.cfg.Operator),
		attribute.String("instance", rt.cfg.Instance))
	if err != nil {
		return err
	}
	rt.obs.metrics = m
	m.Observe(rt.observe)
	for _, in := range rt.plan.inputs {
		m.In(context.Background(), in.Name, 0, 0)
	}
	if tel.Tracing() {
		rt.obs.tracer = tel.Tracer("github.com/weirflow/weir/pkg/stream")
	}
	return nil
}

func (rt *Runtime) stopObserver() {
	if rt.obs.metrics != nil {
		_ = rt.obs.metrics.Close()
	}
}

// observe reports the gauges at scrape time from what the step loop left.
func (rt *Runtime) observe(o telemetry.Observation) {
	if ms := rt.stats.watermark.Load(); ms != 0 {
		wm := time.UnixMilli(ms)
		o.Watermark(wm)
		// Event-time lag: wall clock minus the latest event time the
		// operator's results reflect, its watermark.
		o.EventTimeLag(time.Now(), wm)
	}
	rt.obs.mu.Lock()
	for in, wm := range rt.obs.mu.watermarks {
		if !wm.IsZero() {
			o.InputWatermark(in, wm)
		}
	}
	for in, n := range rt.obs.mu.lag {
		o.PartitionLag(in, n)
	}
	rt.obs.mu.Unlock()
	if st := rt.storeRef.Load(); st != nil {
		s := st.Stats()
		for f, n := range s.Keys {
			o.StateKeys(f, n)
		}
		o.StateSize("", s.DiskBytes)
	}
}

// noteInput records an input's watermark and consumer lag for the gauges.
func (rt *Runtime) noteInput(input string, wm time.Time, lag int64, hasLag bool) {
	rt.obs.mu.Lock()
	defer rt.obs.mu.Unlock()
	if !wm.IsZero() {
		rt.obs.mu.watermarks[input] = wm
	}
	if hasLag {
		rt.obs.mu.lag[input] = lag
	}
}

// span starts the process span of a traced record; the returned trace
// context is what the operator's output of this record carries. Records
// without a trace, or a runtime not tracing, get no span.
func (rt *Runtime) span(r record.Record) (trace.Span, string) {
	if rt.obs.tracer == nil || r.Trace == "" {
		return nil, ""
	}
	ctx := telemetry.ContextFromString(context.Background(), r.Trace)
	ctx, span := rt.obs.tracer.Start(ctx, "process "+rt.cfg.Operator,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("weir.pipeline", rt.plan.pipeline),
			attribute.String("weir.operator", rt.cfg.Operator),
			attribute.String("weir.instance", rt.cfg.Instance),
			attribute.String("weir.record.id", r.ID),
			attribute.String("weir.source", r.Source.String()),
		))
	return span, telemetry.SpanContextString(ctx)
}

func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// sinkSpan marks a traced record leaving the pipeline on a json result
// edge: the end of its trace.
func (rt *Runtime) sinkSpan(r record.Record) string {
	if rt.obs.tracer == nil || r.Trace == "" || rt.plan.output == nil {
		return r.Trace
	}
	ctx := telemetry.ContextFromString(context.Background(), r.Trace)
	ctx, span := rt.obs.tracer.Start(ctx, "sink "+rt.plan.output.Edge,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("weir.pipeline", rt.plan.pipeline),
			attribute.String("weir.operator", rt.cfg.Operator),
			attribute.String("weir.record.id", r.ID),
			attribute.String("messaging.destination.name", rt.plan.output.Subjects()),
		))
	span.End()
	return telemetry.SpanContextString(ctx)
}
