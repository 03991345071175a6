package stream

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
	"github.com/weirflow/weir/pkg/telemetry"
)

// observer is a run's observation: what it reports to OpenTelemetry
// (metrics, spans), what the gauges and Stats read of the inputs under its
// lock, the memory budget and the state families' measured bytes. Without
// telemetry configured its metrics and tracer are nil, and record nothing.
type observer struct {
	metrics *telemetry.RuntimeMetrics // nil-safe
	tracer  trace.Tracer              // nil: not tracing
	cfg     *Config
	plan    *plan
	log     *slog.Logger
	// memory is the instance's budget (Memory).
	memory Memory
	// sweep measures each state family's bytes, a slice per tick;
	// familyBytes is its last complete measure.
	sweep       state.Sweep
	familyBytes atomic.Pointer[map[string]int64]

	mu struct {
		sync.Mutex
		watermarks map[string]time.Time // per input, as of the last step
		lag        map[string]int64     // per input: messages the consumer has not delivered yet
		// processed is, per input, when the broker stored the last message
		// a committed step took; head when it stored the input's newest
		// (refreshHeads).
		processed, head map[string]time.Time
		headsAt         time.Time
		headsWarned     time.Time
	}
}

// observe reports the gauges at scrape time from what the step loop left.
func (rn *run) observe(o telemetry.Observation) {
	if ms := rn.rt.stats.watermark.Load(); ms != 0 {
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
	for in, head := range rn.obs.mu.head {
		if done, ok := rn.obs.mu.processed[in]; ok {
			o.SourceLag(in, max(head.Sub(done), 0))
		}
	}
	rn.obs.mu.Unlock()
	if rn.out.txn != nil {
		o.PendingSinkEpochs(rn.rt.stats.heldEpochs.Load())
	}
	if _, _, skew, n := rn.rt.groups.hot(rn.lay.groupLo, rn.lay.groupHi); n > 0 {
		o.KeyGroupSkew(skew)
	}
	if m := rn.rt.stats.memory.Load(); m != nil {
		o.MemoryBudget(m.Total)
	}
	if r := rn.in.reader.Load(); r != nil {
		held, _ := r.Held()
		o.InputBuffered(held)
	}
	if st := rn.store; st != nil {
		s := st.Stats()
		for f, n := range s.Keys {
			o.StateKeys(f, n)
		}
		o.StateSize("", s.DiskBytes)
		if fb := rn.obs.familyBytes.Load(); fb != nil {
			for f, n := range *fb {
				o.StateSize(f, n)
			}
		}
		o.Timers(s.Timers)
	}
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

// start readies the observer for a run, and has the metrics report the
// gauges at scrape time through observe.
func (o *observer) start(observe func(telemetry.Observation)) error {
	tel := o.cfg.Telemetry
	o.mu.Lock() // Stats reads them from other goroutines
	o.mu.watermarks = map[string]time.Time{}
	o.mu.lag = map[string]int64{}
	o.mu.processed, o.mu.head = map[string]time.Time{}, map[string]time.Time{}
	o.mu.Unlock()
	if tel == nil {
		return nil
	}
	m, err := telemetry.NewRuntimeMetrics(tel.Meter("github.com/weirflow/weir/pkg/stream"),
		attribute.String("pipeline", o.plan.pipeline),
		attribute.String("operator", o.cfg.Operator),
		attribute.String("instance", o.cfg.Instance))
	if err != nil {
		return err
	}
	o.metrics = m
	m.Observe(observe)
	for _, in := range o.plan.inputs {
		m.In(context.Background(), in.Name, 0, 0)
	}
	if tel.Tracing() {
		o.tracer = tel.Tracer("github.com/weirflow/weir/pkg/stream")
	}
	return nil
}

func (o *observer) stop() {
	if o.metrics != nil {
		if err := o.metrics.Close(); err != nil {
			o.log.Warn("closing the metrics", "err", err)
		}
	}
}

// noteProcessed records, per input, the broker time of the last message
// a committed step took.
func (o *observer) noteProcessed(stored map[string]time.Time) {
	if len(stored) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for in, t := range stored {
		o.mu.processed[in] = t
	}
}

// headsFailed says, at most once a minute, that a tick could not watch
// retention or measure source lag: clear marks then stay where they are.
func (o *observer) headsFailed(why string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if time.Since(o.mu.headsWarned) < time.Minute {
		return
	}
	o.mu.headsWarned = time.Now()
	o.log.Warn("could not watch the input streams this tick: retention is not watched and source lag not measured until it can", "why", why)
}

// noteInput records an input's watermark and consumer lag for the gauges.
func (o *observer) noteInput(input string, wm time.Time, lag int64, hasLag bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !wm.IsZero() {
		o.mu.watermarks[input] = wm
	}
	if hasLag {
		o.mu.lag[input] = lag
	}
}

// span starts the process span of a traced record; the returned trace
// context is what the operator's output of this record carries. Records
// without a trace, or a runtime not tracing, get no span.
func (o *observer) span(r record.Record) (trace.Span, string) {
	if o.tracer == nil || r.Trace == "" {
		return nil, ""
	}
	ctx := telemetry.ContextFromString(context.Background(), r.Trace)
	ctx, span := o.tracer.Start(ctx, "process "+o.cfg.Operator,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("weir.pipeline", o.plan.pipeline),
			attribute.String("weir.operator", o.cfg.Operator),
			attribute.String("weir.instance", o.cfg.Instance),
			attribute.String("weir.record.id", r.ID),
			attribute.String("weir.source", r.At.String()),
		))
	return span, telemetry.SpanContextString(ctx)
}

// redacted is err with r's sensitive values and key scrubbed from its
// text (redact.Policy.Text), for where it leaves the pipeline: a span.
func (o *observer) redacted(r record.Record, err error) error {
	if err == nil || o.plan.redact == nil {
		return err
	}
	_, secrets := o.plan.redact.Payload(r.Value, r.Key)
	return errors.New(o.plan.redact.Text(err.Error(), secrets))
}

// sinkSpan marks a traced record leaving the pipeline on a json result
// edge: the end of its trace.
func (o *observer) sinkSpan(r record.Record) string {
	if o.tracer == nil || r.Trace == "" || o.plan.output == nil {
		return r.Trace
	}
	ctx := telemetry.ContextFromString(context.Background(), r.Trace)
	ctx, span := o.tracer.Start(ctx, "sink "+o.plan.output.Edge,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("weir.pipeline", o.plan.pipeline),
			attribute.String("weir.operator", o.cfg.Operator),
			attribute.String("weir.record.id", r.ID),
			attribute.String("messaging.destination.name", o.plan.output.Subjects()),
		))
	span.End()
	return telemetry.SpanContextString(ctx)
}

// sweepBudget is how many state keys a tick reads to measure the
// families' bytes: a store of N keys is measured every N/sweepBudget
// ticks.
const sweepBudget = 10000

// sweepState goes on measuring the state families' bytes.
func (o *observer) sweepState(store *state.Store) {
	done, err := store.SweepFamilies(&o.sweep, sweepBudget)
	if err != nil {
		o.log.Warn("measuring state", "err", err)
		return
	}
	if done {
		b := o.sweep.Bytes()
		o.familyBytes.Store(&b)
	}
}
