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

func (rn *run) startObserver() error {
	tel := rn.cfg.Telemetry
	rn.obs.mu.watermarks = map[string]time.Time{}
	rn.obs.mu.lag = map[string]int64{}
	if tel == nil {
		return nil
	}
	m, err := telemetry.NewRuntimeMetrics(tel.Meter("github.com/weirflow/weir/pkg/stream"),
		attribute.String("pipeline", rn.plan.pipeline),
		attribute.String("operator", rn.cfg.Operator),
		attribute.String("instance", rn.cfg.Instance))
	if err != nil {
		return err
	}
	rn.obs.metrics = m
	m.Observe(rn.observe)
	for _, in := range rn.plan.inputs {
		m.In(context.Background(), in.Name, 0, 0)
	}
	if tel.Tracing() {
		rn.obs.tracer = tel.Tracer("github.com/weirflow/weir/pkg/stream")
	}
	return nil
}

func (rn *run) stopObserver() {
	if rn.obs.metrics != nil {
		_ = rn.obs.metrics.Close()
	}
}

// observe reports the gauges at scrape time from what the step loop left.
func (rn *run) observe(o telemetry.Observation) {
	if ms := rn.stats.watermark.Load(); ms != 0 {
		wm := time.UnixMilli(ms)
		o.Watermark(wm)
		// Event-time lag: wall clock minus the latest event time the
		// operator's results reflect, its watermark.
		o.EventTimeLag(time.Now(), wm)
	}
	rn.obs.mu.Lock()
	for in, wm := range rn.obs.mu.watermarks {
		if !wm.IsZero() {
			o.InputWatermark(in, wm)
		}
	}
	for in, n := range rn.obs.mu.lag {
		o.PartitionLag(in, n)
	}
	rn.obs.mu.Unlock()
	if rn.txn != nil {
		o.PendingSinkEpochs(rn.stats.heldEpochs.Load())
	}
	if _, _, skew, n := rn.groups.hot(rn.lay.groupLo, rn.lay.groupHi); n > 0 {
		o.KeyGroupSkew(skew)
	}
	if m := rn.stats.memory.Load(); m != nil {
		o.MemoryBudget(m.Total)
	}
	if r := rn.reader.Load(); r != nil {
		held, _ := r.Held()
		o.InputBuffered(held)
	}
	if st := rn.store; st != nil {
		s := st.Stats()
		for f, n := range s.Keys {
			o.StateKeys(f, n)
		}
		o.StateSize("", s.DiskBytes)
	}
}

// noteInput records an input's watermark and consumer lag for the gauges.
func (rn *run) noteInput(input string, wm time.Time, lag int64, hasLag bool) {
	rn.obs.mu.Lock()
	defer rn.obs.mu.Unlock()
	if !wm.IsZero() {
		rn.obs.mu.watermarks[input] = wm
	}
	if hasLag {
		rn.obs.mu.lag[input] = lag
	}
}

// span starts the process span of a traced record; the returned trace
// context is what the operator's output of this record carries. Records
// without a trace, or a runtime not tracing, get no span.
func (rn *run) span(r record.Record) (trace.Span, string) {
	if rn.obs.tracer == nil || r.Trace == "" {
		return nil, ""
	}
	ctx := telemetry.ContextFromString(context.Background(), r.Trace)
	ctx, span := rn.obs.tracer.Start(ctx, "process "+rn.cfg.Operator,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("weir.pipeline", rn.plan.pipeline),
			attribute.String("weir.operator", rn.cfg.Operator),
			attribute.String("weir.instance", rn.cfg.Instance),
			attribute.String("weir.record.id", r.ID),
			attribute.String("weir.source", r.At.String()),
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
func (rn *run) sinkSpan(r record.Record) string {
	if rn.obs.tracer == nil || r.Trace == "" || rn.plan.output == nil {
		return r.Trace
	}
	ctx := telemetry.ContextFromString(context.Background(), r.Trace)
	ctx, span := rn.obs.tracer.Start(ctx, "sink "+rn.plan.output.Edge,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("weir.pipeline", rn.plan.pipeline),
			attribute.String("weir.operator", rn.cfg.Operator),
			attribute.String("weir.record.id", r.ID),
			attribute.String("messaging.destination.name", rn.plan.output.Subjects()),
		))
	span.End()
	return telemetry.SpanContextString(ctx)
}
