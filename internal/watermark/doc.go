// Package watermark tracks event-time progress.
//
// A watermark W on an input asserts that no later record on that input has
// an event time at or before W. A Generator derives a partition's watermark
// from the event times it has seen: with bounded out-of-orderness B, after
// the largest event time M it is M - B - 1ms, so an event up to B older than
// the newest one seen is still on time. A source can also provide the
// watermark itself.
//
// A Tracker combines the watermarks of an operator's inputs. The operator's
// watermark is the minimum over its active inputs; an input silent for
// longer than the idle timeout is idle and excluded from the minimum until
// its next record, so one quiet partition cannot stall the pipeline. An
// input whose watermark runs more than the alignment drift ahead of the
// slowest active input is paused — the reader stops taking its records —
// so memory does not fill with records of a partition far ahead in time.
// Watermarks never go backwards: a smaller value is ignored, and the
// Tracker's state is saved with every step and restored after a restart.
//
// # The operator's watermark in the runtime
//
// The runtime keeps a watermark.Tracker over the operator's inputs (ingress
// partitions or edge partitions). On ingress, the contract's
// watermark.Policy applies: each decoded record's event time raises its
// partition's maximum, and with bounded out-of-orderness B the partition's
// watermark is max − B − 1ms (source-provided watermarks come in the
// Weir-Watermark header, checked like an event time). On an edge, Watermark control records in the
// frames set the partition's watermark, Idle records idle it and data
// records make it active. The operator's watermark is the minimum over active
// inputs. An ingress partition silent for progress.idle_timeout (processing
// time, checked on every tick, and never while the broker is out of reach:
// after its return, or a reopened reader, every input's silence starts
// again) is idle until its next record — once a look at the broker begun
// after its silence passed the timeout finds that the subject holds nothing
// past what the partition has read (refreshHeads: the heads alone, not
// retention, sooner than every five seconds while a partition waits for
// it): a broker stalled — paused,
// stuck on its disk — keeps its connections and looks like silence, and the
// records it then delivers would be late. An edge partition is never idled
// for its silence — its writer may be restarting, restoring, or held by its
// own inputs, and the records it has yet to write would be late behind a
// watermark the other partitions carried on — only by its writer's Idle
// marker. If every input is idle the operator's watermark is
// the minimum its inputs reached before (their last watermarks may arrive in
// the same step as their idle markers), and the operator is idle and
// forwards one Idle marker after it; an instance that owns no partition
// is idle from its start. At the end of every step,
// if the minimum rose: event-time timers up to it fire inside the same step
// (Batch.DueTimers, so timers the step itself set are seen), then the
// watermark is broadcast to every output partition after the step's data.
// A timer set at or behind the watermark already forwarded (a late record
// an operator accepts) fires at the end of the step that set it, and at
// start, before any input, if a stopped predecessor left one: no later
// watermark may come to fire it. The
// tracker is saved in the step's batch: watermarks never go backwards, across
// restarts too. Inputs whose watermark runs more than progress.alignment_drift
// ahead of the slowest active input are paused in the reader (its pump stops
// taking messages; at most one message plus the pull buffer wait in memory)
// and resumed when the others catch up.
//
// Operators see the watermark as Env.Watermark() and file late records
// with Env.SideOutput, which goes to weir.<pipeline>.side.<operator>
// with the source coordinate and reason.
package watermark
