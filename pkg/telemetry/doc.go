// Package telemetry gives weir services OpenTelemetry traces and metrics
// without global state.
//
// A main builds a Config with FromEnv (the standard OTEL_* variables plus
// WEIR_METRICS_ADDR), calls Start, hands the *Telemetry (or its Tracer and
// Meter) to the runtime, and calls Shutdown last. Traces go over OTLP/HTTP
// to a collector or Jaeger, and only when the environment asks: with no
// OTLP endpoint and no OTEL_TRACES_EXPORTER=otlp every tracer is a no-op,
// which is what tests get. Metrics go to a private Prometheus registry,
// served at /metrics on MetricsAddr by the Telemetry's own HTTP server, or
// mounted elsewhere with Handler. Nothing is registered globally;
// SetGlobalPropagator exists for a main that runs third-party
// instrumentation reading otel's global propagator.
//
// Trace context crosses NATS in W3C headers with the lower-case keys
// "traceparent" and "tracestate" (Inject, Extract; NATS header lookup is
// case-sensitive). Inside a frame, a record carries its trace context as a
// traceparent string (SpanContextString, ContextFromString).
//
// # Runtime metrics
//
// NewRuntimeMetrics creates the instruments an operator instance records.
// Every series carries the attributes given to it (operator, instance)
// plus otel_scope_name; the resource is exposed as target_info. Names as
// Prometheus shows them: dots become underscores, the unit is a suffix
// (s → _seconds, By → _bytes, unless the name already says it; {…}
// annotations are dropped) and counters end in _total.
//
//	instrument (unit)                   kind       Prometheus name                              attrs      fed by
//	weir.records.in ({record})          counter    weir_records_in_total                        partition  In
//	weir.records.out ({record})         counter    weir_records_out_total                       partition  Out
//	weir.bytes.in (By)                  counter    weir_bytes_in_total                          partition  In
//	weir.bytes.out (By)                 counter    weir_bytes_out_total                         partition  Out
//	weir.records.dead_lettered          counter    weir_records_dead_lettered_total                        DeadLettered
//	weir.records.side_output            counter    weir_records_side_output_total                          SideOutput
//	weir.records.shed                   counter    weir_records_shed_total                                 Shed
//	weir.records.on_time                counter    weir_records_on_time_total                              OnTime
//	weir.records.late_accepted          counter    weir_records_late_accepted_total                        LateAccepted
//	weir.records.late_dropped           counter    weir_records_late_dropped_total                         LateDropped
//	weir.timers.fired ({timer})         counter    weir_timers_fired_total                                 TimersFired
//	weir.step.duration (s)              histogram  weir_step_duration_seconds                              Step
//	weir.step.retries ({step})          counter    weir_step_retries_total                                 Retried
//	weir.busy.time (s)                  counter    weir_busy_time_seconds_total                            Busy
//	weir.idle.time (s)                  counter    weir_idle_time_seconds_total                            Idle
//	weir.backpressured.time (s)         counter    weir_backpressured_time_seconds_total                   Backpressured
//	weir.checkpoint.duration (s)        histogram  weir_checkpoint_duration_seconds                        Checkpoint (Total)
//	weir.checkpoint.start_delay (s)     histogram  weir_checkpoint_start_delay_seconds                     Checkpoint
//	weir.checkpoint.alignment.duration  histogram  weir_checkpoint_alignment_duration_seconds              Checkpoint
//	weir.checkpoint.snapshot.duration   histogram  weir_checkpoint_snapshot_duration_seconds               Checkpoint
//	weir.checkpoint.upload.duration     histogram  weir_checkpoint_upload_duration_seconds                 Checkpoint
//	weir.checkpoint.size (By)           gauge      weir_checkpoint_size_bytes                              Checkpoint (Size)
//	weir.checkpoint.failures            counter    weir_checkpoint_failures_total                          CheckpointFailed
//	weir.restore.duration (s)           histogram  weir_restore_duration_seconds                           Restored
//	weir.replay.records ({record})      counter    weir_replay_records_total                               Replayed (at each start)
//	weir.sink.commit.duration (s)       histogram  weir_sink_commit_duration_seconds                       SinkCommitted (transactional, outbox)
//	weir.event_time.lag (s)             gauge*     weir_event_time_lag_seconds                             Observation.EventTimeLag
//	weir.source.lag (s)                 gauge*     weir_source_lag_seconds                      partition  Observation.SourceLag
//	weir.input.watermark (s)            gauge*     weir_input_watermark_seconds                 partition  Observation.InputWatermark
//	weir.operator.watermark (s)         gauge*     weir_operator_watermark_seconds                         Observation.Watermark
//	weir.keygroup.skew                  gauge*     weir_keygroup_skew                                      Observation.KeyGroupSkew
//	weir.state.keys ({key})             gauge*     weir_state_keys                              family     Observation.StateKeys
//	weir.state.size (By)                gauge*     weir_state_size_bytes                        family     Observation.StateSize
//	weir.sink.pending_epochs ({epoch})  gauge*     weir_sink_pending_epochs                                Observation.PendingSinkEpochs
//	weir.partition.lag ({message})      gauge*     weir_partition_lag                           partition  Observation.PartitionLag
//	weir.timers.registered ({timer})    gauge*     weir_timers_registered                                  Observation.Timers
//	weir.memory.budget (By)             gauge*     weir_memory_budget_bytes                                Observation.MemoryBudget
//	weir.input.buffered (By)            gauge*     weir_input_buffered_bytes                               Observation.InputBuffered
//
// gauge* is an observable gauge: read at each collection from the function
// given to RuntimeMetrics.Observe, which reads atomics the runtime keeps.
// Event-time lag is wall clock minus the latest event time reflected in
// output (positive when behind); watermarks are Unix seconds. The
// partition attribute is an input's or output's name ("ingress/3"); family
// is a state family, absent for the whole store. Durations are histograms
// with second buckets from 0.5 ms (steps) or 5 ms (checkpoints, restore,
// sink commits) up to 10 s and 300 s. Counters without a partition are
// exported at zero from creation; a partition's series appear with its
// first In or Out (In(ctx, p, 0, 0) declares one); histograms appear with
// their first observation.
//
// The process's Go runtime and process collectors (go_*, process_*) are
// served on the same endpoint.
//
// # What the runtime traces and measures
//
// pkg/telemetry reads the standard OTEL_* variables (tracing is off unless
// they ask for it) and WEIR_METRICS_ADDR. stream.Main starts it for every
// service. An ingress message's traceparent header (lower case: NATS header
// lookup is case-sensitive) becomes the record's Trace; every traced record
// gets a process <operator> span per operator, its trace context travels
// inside frames with the record, and a record written to a json result edge
// gets a sink <edge> span and carries traceparent in its message header. So
// one event is one trace from nexmark-gen publish to the sink. Window panes
// and join results come from timers, not from one record, and start no trace
// yet. The runtime's metrics (records and bytes per partition, watermarks per
// input and per operator, event-time lag, state keys and bytes, step, busy,
// idle and backpressured time, dead letters, side output, timers, checkpoint
// durations and sizes, restore duration, consumer lag) are on each service's
// Prometheus endpoint; pkg/telemetry/doc.go lists them.
package telemetry
