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
package watermark
