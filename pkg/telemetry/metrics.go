package telemetry

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Attribute keys of the runtime's measurements.
const (
	// AttrPartition names an input or output partition, e.g. "ingress/3".
	AttrPartition = attribute.Key("partition")
	// AttrFamily names a state family.
	AttrFamily = attribute.Key("family")
)

// Histogram bucket bounds, in seconds.
var (
	stepBuckets       = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	checkpointBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
)

// maxCachedSets bounds the per-partition and per-family attribute sets kept.
const maxCachedSets = 4096

// RuntimeMetrics are the instruments of one operator instance; the doc.go
// table lists them. Counters and histograms are recorded by calling its
// methods; gauges are read at collection time from the function given to
// Observe. Its methods are safe for concurrent use, and a nil
// *RuntimeMetrics records nothing.
type RuntimeMetrics struct {
	base attribute.Set
	opt  metric.MeasurementOption // base attributes

	recordsIn, recordsOut, bytesIn, bytesOut metric.Int64Counter
	deadLettered, sideOutput, shed           metric.Int64Counter
	onTime, lateAccepted, lateDropped        metric.Int64Counter
	timersFired, retries                     metric.Int64Counter
	busy, idle, backpressured                metric.Float64Counter
	step                                     metric.Float64Histogram

	ckptTotal, ckptStartDelay, ckptAlignment metric.Float64Histogram
	ckptSnapshot, ckptUpload                 metric.Float64Histogram
	ckptSize                                 metric.Int64Gauge
	ckptFailures                             metric.Int64Counter
	restore                                  metric.Float64Histogram
	replayed                                 metric.Int64Counter
	sinkCommit                               metric.Float64Histogram

	eventTimeLag, inputWatermark, watermark metric.Float64ObservableGauge
	sourceLag                               metric.Float64ObservableGauge
	keyGroupSkew                            metric.Float64ObservableGauge
	stateKeys, stateSize                    metric.Int64ObservableGauge
	pendingEpochs, partitionLag             metric.Int64ObservableGauge
	memoryBudget, inputBuffered             metric.Int64ObservableGauge
	timers                                  metric.Int64ObservableGauge

	reg      metric.Registration
	observer atomic.Pointer[func(Observation)]

	mu struct {
		sync.Mutex
		sets map[label]metric.MeasurementOption
	}
}

type label struct {
	key   attribute.Key
	value string
}

// NewRuntimeMetrics creates the runtime's instruments on m. attrs are added
// to every measurement; give each runtime sharing a meter its own (the
// operator and instance, say), so their series stay apart.
func NewRuntimeMetrics(m metric.Meter, attrs ...attribute.KeyValue) (*RuntimeMetrics, error) {
	rm := &RuntimeMetrics{base: attribute.NewSet(attrs...)}
	rm.opt = metric.WithAttributeSet(rm.base)
	rm.mu.sets = make(map[label]metric.MeasurementOption)

	var errs []error
	i64 := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	secs := func(name, desc string) metric.Float64Counter {
		c, err := m.Float64Counter(name, metric.WithUnit("s"), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	hist := func(name, desc string, bounds []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(bounds...))
		errs = append(errs, err)
		return h
	}
	fgauge := func(name, unit, desc string) metric.Float64ObservableGauge {
		g, err := m.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	igauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}

	rm.recordsIn = i64("weir.records.in", "{record}", "Data records read, per input partition.")
	rm.recordsOut = i64("weir.records.out", "{record}", "Data records emitted, per output partition.")
	rm.bytesIn = i64("weir.bytes.in", "By", "Message bytes read, per input partition.")
	rm.bytesOut = i64("weir.bytes.out", "By", "Frame bytes published, per output partition.")
	rm.deadLettered = i64("weir.records.dead_lettered", "{record}", "Records filed on the dead-letter stream.")
	rm.sideOutput = i64("weir.records.side_output", "{record}", "Records filed on the side output (late data).")
	rm.shed = i64("weir.records.shed", "{record}", "Optional ingress records dropped by overload policy shed, each filed by its coordinate.")
	rm.onTime = i64("weir.records.on_time", "{record}", "Records that arrived before the watermark passed their window.")
	rm.lateAccepted = i64("weir.records.late_accepted", "{record}", "Late records still within allowed lateness, accepted.")
	rm.lateDropped = i64("weir.records.late_dropped", "{record}", "Late records past allowed lateness, dropped or side-output.")
	rm.timersFired = i64("weir.timers.fired", "{timer}", "Timers fired.")
	rm.retries = i64("weir.step.retries", "{step}", "Steps discarded and retried in place (the operator or a sink asked for it, or the dead-letter stream refused).")
	rm.busy = secs("weir.busy.time", "Time spent running steps.")
	rm.idle = secs("weir.idle.time", "Time spent waiting for input.")
	rm.backpressured = secs("weir.backpressured.time", "Time spent waiting for downstream acks or flow control.")
	rm.step = hist("weir.step.duration", "Duration of a step, from first delivery to input ack.", stepBuckets)

	rm.ckptTotal = hist("weir.checkpoint.duration", "Duration of a checkpoint, from trigger to acknowledgement.", checkpointBuckets)
	rm.ckptStartDelay = hist("weir.checkpoint.start_delay", "Delay from checkpoint trigger to the barrier reaching the operator.", checkpointBuckets)
	rm.ckptAlignment = hist("weir.checkpoint.alignment.duration", "Time spent aligning barriers across inputs.", checkpointBuckets)
	rm.ckptSnapshot = hist("weir.checkpoint.snapshot.duration", "Time taken to snapshot the state.", checkpointBuckets)
	rm.ckptUpload = hist("weir.checkpoint.upload.duration", "Time taken to upload the snapshot.", checkpointBuckets)
	g, err := m.Int64Gauge("weir.checkpoint.size", metric.WithUnit("By"), metric.WithDescription("Size of the last completed checkpoint."))
	errs = append(errs, err)
	rm.ckptSize = g
	rm.ckptFailures = i64("weir.checkpoint.failures", "{checkpoint}", "Checkpoints that failed or were aborted.")
	rm.restore = hist("weir.restore.duration", "Duration of a restore from a checkpoint.", checkpointBuckets)
	rm.replayed = i64("weir.replay.records", "{record}", "Records an instance's consumers had to deliver when it started: the replay a recovery begins with.")
	rm.sinkCommit = hist("weir.sink.commit.duration", "Latency of a sink epoch, from checkpoint completion to commit.", checkpointBuckets)

	rm.eventTimeLag = fgauge("weir.event_time.lag", "s", "Wall clock minus the latest event time reflected in output.")
	rm.keyGroupSkew = fgauge("weir.keygroup.skew", "", "Records of the busiest key group over the mean of the instance's key groups, over the last 10-20 s (1: even; a hot key shows far above).")
	rm.sourceLag = fgauge("weir.source.lag", "s", "When the broker stored an input partition's newest message, less when it stored the last one a committed step took: how far behind the source processing is, in its own time (0 when caught up).")
	rm.inputWatermark = fgauge("weir.input.watermark", "s", "Watermark of an input partition, Unix seconds.")
	rm.watermark = fgauge("weir.operator.watermark", "s", "The operator's watermark, Unix seconds.")
	rm.stateKeys = igauge("weir.state.keys", "{key}", "Live keys in state, per family.")
	rm.stateSize = igauge("weir.state.size", "By", "Bytes of state: per family, its live keys and values as of the last complete sweep; no family, the store on disk.")
	rm.pendingEpochs = igauge("weir.sink.pending_epochs", "{epoch}", "Sink epochs checkpointed but not yet committed.")
	rm.partitionLag = igauge("weir.partition.lag", "{message}", "Messages in an input partition not yet processed.")
	rm.timers = igauge("weir.timers.registered", "{timer}", "Timers registered and not yet fired, event and processing time.")
	rm.memoryBudget = igauge("weir.memory.budget", "By", "Resident memory the instance declares it stays under (stream.Memory).")
	rm.inputBuffered = igauge("weir.input.buffered", "By", "Bytes of input delivered to the instance and not yet acknowledged, out of the reader's byte budget.")

	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// Counters without a partition exist at zero from the start, so a
	// scrape shows them and rate() has a first point.
	ctx := context.Background()
	for _, c := range []metric.Int64Counter{
		rm.deadLettered, rm.sideOutput, rm.shed, rm.onTime, rm.lateAccepted, rm.lateDropped,
		rm.timersFired, rm.retries, rm.ckptFailures, rm.replayed,
	} {
		c.Add(ctx, 0, rm.opt)
	}
	for _, c := range []metric.Float64Counter{rm.busy, rm.idle, rm.backpressured} {
		c.Add(ctx, 0, rm.opt)
	}
	reg, err := m.RegisterCallback(rm.collect,
		rm.eventTimeLag, rm.sourceLag, rm.inputWatermark, rm.watermark, rm.keyGroupSkew,
		rm.stateKeys, rm.stateSize, rm.pendingEpochs, rm.partitionLag, rm.memoryBudget, rm.inputBuffered, rm.timers)
	if err != nil {
		return nil, err
	}
	rm.reg = reg
	return rm, nil
}

// Close unregisters the gauges' callback; the observer is not called again.
func (m *RuntimeMetrics) Close() error {
	if m == nil {
		return nil
	}
	m.observer.Store(nil)
	return m.reg.Unregister()
}

// Observe sets the function that reports the gauges. It is called at each
// collection (a scrape of /metrics), on the collector's goroutine, so it
// must only read what is safe to read concurrently — atomics the runtime
// updates. A later call replaces the function; nil removes it.
func (m *RuntimeMetrics) Observe(fn func(Observation)) {
	if m == nil {
		return
	}
	if fn == nil {
		m.observer.Store(nil)
		return
	}
	m.observer.Store(&fn)
}

func (m *RuntimeMetrics) collect(_ context.Context, o metric.Observer) error {
	if fn := m.observer.Load(); fn != nil {
		(*fn)(Observation{o: o, m: m})
	}
	return nil
}

// with returns the measurement option of the base attributes plus one.
func (m *RuntimeMetrics) with(key attribute.Key, value string) metric.MeasurementOption {
	if value == "" {
		return m.opt
	}
	l := label{key, value}
	m.mu.Lock()
	defer m.mu.Unlock()
	if opt, ok := m.mu.sets[l]; ok {
		return opt
	}
	kvs := append(m.base.ToSlice(), key.String(value))
	opt := metric.WithAttributeSet(attribute.NewSet(kvs...))
	if len(m.mu.sets) < maxCachedSets {
		m.mu.sets[l] = opt
	}
	return opt
}

// In counts records and bytes read from an input partition. In(ctx, p, 0,
// 0) at start makes the partition's series exist before its first record.
func (m *RuntimeMetrics) In(ctx context.Context, partition string, records, bytes int64) {
	if m == nil {
		return
	}
	opt := m.with(AttrPartition, partition)
	m.recordsIn.Add(ctx, records, opt)
	m.bytesIn.Add(ctx, bytes, opt)
}

// Out counts records and bytes written to an output partition.
func (m *RuntimeMetrics) Out(ctx context.Context, partition string, records, bytes int64) {
	if m == nil {
		return
	}
	opt := m.with(AttrPartition, partition)
	m.recordsOut.Add(ctx, records, opt)
	m.bytesOut.Add(ctx, bytes, opt)
}

// DeadLettered counts records filed on the dead-letter stream.
func (m *RuntimeMetrics) DeadLettered(ctx context.Context, n int64) {
	if m != nil {
		m.deadLettered.Add(ctx, n, m.opt)
	}
}

// SideOutput counts records filed on the side output.
func (m *RuntimeMetrics) SideOutput(ctx context.Context, n int64) {
	if m != nil {
		m.sideOutput.Add(ctx, n, m.opt)
	}
}

// OnTime counts records that arrived before the watermark passed them.
func (m *RuntimeMetrics) OnTime(ctx context.Context, n int64) {
	if m != nil {
		m.onTime.Add(ctx, n, m.opt)
	}
}

// LateAccepted counts late records accepted within the allowed lateness.
func (m *RuntimeMetrics) LateAccepted(ctx context.Context, n int64) {
	if m != nil {
		m.lateAccepted.Add(ctx, n, m.opt)
	}
}

// LateDropped counts late records past the allowed lateness.
func (m *RuntimeMetrics) LateDropped(ctx context.Context, n int64) {
	if m != nil {
		m.lateDropped.Add(ctx, n, m.opt)
	}
}

// TimersFired counts fired timers.
func (m *RuntimeMetrics) TimersFired(ctx context.Context, n int64) {
	if m != nil {
		m.timersFired.Add(ctx, n, m.opt)
	}
}

// Retried counts a step discarded to be retried.
func (m *RuntimeMetrics) Retried(ctx context.Context) {
	if m != nil {
		m.retries.Add(ctx, 1, m.opt)
	}
}

// Step records one step's duration.
func (m *RuntimeMetrics) Step(ctx context.Context, d time.Duration) {
	if m != nil {
		m.step.Record(ctx, d.Seconds(), m.opt)
	}
}

// Busy adds time spent running steps.
func (m *RuntimeMetrics) Busy(ctx context.Context, d time.Duration) {
	if m != nil && d > 0 {
		m.busy.Add(ctx, d.Seconds(), m.opt)
	}
}

// Idle adds time spent waiting for input.
func (m *RuntimeMetrics) Idle(ctx context.Context, d time.Duration) {
	if m != nil && d > 0 {
		m.idle.Add(ctx, d.Seconds(), m.opt)
	}
}

// Backpressured adds time spent waiting on downstream.
func (m *RuntimeMetrics) Backpressured(ctx context.Context, d time.Duration) {
	if m != nil && d > 0 {
		m.backpressured.Add(ctx, d.Seconds(), m.opt)
	}
}

// CheckpointStats describe one completed checkpoint of an instance.
type CheckpointStats struct {
	// StartDelay: from the trigger to the barrier reaching the operator.
	StartDelay time.Duration
	// Alignment: from the first input's barrier to the last one's.
	Alignment time.Duration
	// Snapshot: taking the state snapshot.
	Snapshot time.Duration
	// Upload: storing the snapshot.
	Upload time.Duration
	// Total: from trigger to acknowledgement; the phases' sum when zero.
	Total time.Duration
	// Size of the checkpoint in bytes.
	Size int64
}

// Checkpoint records a completed checkpoint.
func (m *RuntimeMetrics) Checkpoint(ctx context.Context, c CheckpointStats) {
	if m == nil {
		return
	}
	if c.Total == 0 {
		c.Total = c.StartDelay + c.Alignment + c.Snapshot + c.Upload
	}
	m.ckptStartDelay.Record(ctx, c.StartDelay.Seconds(), m.opt)
	m.ckptAlignment.Record(ctx, c.Alignment.Seconds(), m.opt)
	m.ckptSnapshot.Record(ctx, c.Snapshot.Seconds(), m.opt)
	m.ckptUpload.Record(ctx, c.Upload.Seconds(), m.opt)
	m.ckptTotal.Record(ctx, c.Total.Seconds(), m.opt)
	m.ckptSize.Record(ctx, c.Size, m.opt)
}

// CheckpointFailed counts a failed or aborted checkpoint.
func (m *RuntimeMetrics) CheckpointFailed(ctx context.Context) {
	if m != nil {
		m.ckptFailures.Add(ctx, 1, m.opt)
	}
}

// Restored records the duration of a restore.
func (m *RuntimeMetrics) Restored(ctx context.Context, d time.Duration) {
	if m != nil {
		m.restore.Record(ctx, d.Seconds(), m.opt)
	}
}

// Shed counts ingress records dropped by overload policy shed.
func (m *RuntimeMetrics) Shed(ctx context.Context, n int64) {
	if m != nil && n > 0 {
		m.shed.Add(ctx, n, m.opt)
	}
}

// Replayed counts the records an instance had to read when it started:
// after a restore, those past the checkpoint's positions, plus any backlog.
func (m *RuntimeMetrics) Replayed(ctx context.Context, n int64) {
	if m != nil {
		m.replayed.Add(ctx, n, m.opt)
	}
}

// SinkCommitted records the latency of one sink epoch's commit.
func (m *RuntimeMetrics) SinkCommitted(ctx context.Context, d time.Duration) {
	if m != nil {
		m.sinkCommit.Record(ctx, d.Seconds(), m.opt)
	}
}

// Observation reports the gauges during one collection. It is valid only
// inside the function given to Observe. A value not reported in a
// collection is absent from it.
type Observation struct {
	o metric.Observer
	m *RuntimeMetrics
}

// EventTimeLag reports now minus the latest event time reflected in the
// operator's output, in seconds. Nothing is reported for a zero latest.
func (o Observation) EventTimeLag(now, latest time.Time) {
	if latest.IsZero() {
		return
	}
	o.o.ObserveFloat64(o.m.eventTimeLag, now.Sub(latest).Seconds(), o.m.opt)
}

// SourceLag reports how far an input partition's processing is behind its
// newest message, in broker time.
func (o Observation) SourceLag(partition string, lag time.Duration) {
	o.o.ObserveFloat64(o.m.sourceLag, lag.Seconds(), o.m.with(AttrPartition, partition))
}

// InputWatermark reports an input partition's watermark. Nothing is
// reported for the zero time.
func (o Observation) InputWatermark(partition string, wm time.Time) {
	if wm.IsZero() {
		return
	}
	o.o.ObserveFloat64(o.m.inputWatermark, unixSeconds(wm), o.m.with(AttrPartition, partition))
}

// Watermark reports the operator's watermark. Nothing is reported for the
// zero time.
func (o Observation) Watermark(wm time.Time) {
	if wm.IsZero() {
		return
	}
	o.o.ObserveFloat64(o.m.watermark, unixSeconds(wm), o.m.opt)
}

// KeyGroupSkew reports the busiest key group's records over the mean of
// the instance's key groups.
func (o Observation) KeyGroupSkew(skew float64) {
	o.o.ObserveFloat64(o.m.keyGroupSkew, skew, o.m.opt)
}

// StateKeys reports the live keys of a state family ("" for all).
func (o Observation) StateKeys(family string, n int64) {
	o.o.ObserveInt64(o.m.stateKeys, n, o.m.with(AttrFamily, family))
}

// StateSize reports the bytes of a state family ("" for the whole store).
func (o Observation) StateSize(family string, bytes int64) {
	o.o.ObserveInt64(o.m.stateSize, bytes, o.m.with(AttrFamily, family))
}

// PendingSinkEpochs reports the sink epochs not yet committed.
func (o Observation) PendingSinkEpochs(n int64) {
	o.o.ObserveInt64(o.m.pendingEpochs, n, o.m.opt)
}

// PartitionLag reports the messages of an input partition not yet
// processed (the consumer's pending count).
func (o Observation) PartitionLag(partition string, messages int64) {
	o.o.ObserveInt64(o.m.partitionLag, messages, o.m.with(AttrPartition, partition))
}

// Timers reports the timers registered and not yet fired.
func (o Observation) Timers(n int64) {
	o.o.ObserveInt64(o.m.timers, n, o.m.opt)
}

// MemoryBudget reports the resident memory the instance declares it stays
// under.
func (o Observation) MemoryBudget(bytes int64) {
	o.o.ObserveInt64(o.m.memoryBudget, bytes, o.m.opt)
}

// InputBuffered reports the bytes of input held in the instance and not
// yet acknowledged.
func (o Observation) InputBuffered(bytes int64) {
	o.o.ObserveInt64(o.m.inputBuffered, bytes, o.m.opt)
}

func unixSeconds(t time.Time) float64 {
	return float64(t.UnixNano()) / 1e9
}
