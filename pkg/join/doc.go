// Package join is weir's event-time join of two record streams that share a
// key: a tumbling-window join (Windowed) and an interval join (Interval).
// Both are business logic only: they are operator.Operators, seeing only
// their operator.Env (clock, watermark, keyed state, timers, emitter, side
// output), which the runtime provides, and keep their state in one map
// family of pkg/state, named by the caller.
//
// # Inputs
//
// Both inputs arrive on one operator input, keyed by the join key, and a
// SideFunc tells a left record from a right one. A record the SideFunc
// assigns to neither side is not silently dropped: Process returns it as
// poison (operator.Poison) around a *RecordError wrapping ErrSide (Field
// "side") and changes nothing, so the runtime dead-letters the record with
// its source coordinate. A record without a usable event time is rejected
// the same way (ErrEventTime, Field "time").
//
// # Time and the watermark
//
// Event time is taken at millisecond precision, truncated toward the past,
// as in pkg/window; sizes and bounds are whole milliseconds. A watermark W
// says no record still to come has an event time at or before W, and an
// event-time timer fires once W reaches its time. The zero watermark means
// none yet.
//
// # Windowed join
//
// Windows are [start, start+size), aligned to the Unix epoch; a window's
// maximum timestamp is start+size-1ms. Every left and right record of a
// key in the same window is buffered under the window; when W reaches the
// maximum timestamp an event-time timer emits every left×right pair once,
// ordered by (left time, left ID, right time, right ID), and deletes the
// window's records. A record arriving when W is at or past its window's
// maximum timestamp finds its window fired and goes to the side output,
// with a reason naming the window and the watermark. This is Nexmark q8:
// persons joined with the auctions they opened in the same window.
//
// State bound: per key, the records of the windows W has not reached,
// which is about one window's records when input is in order.
//
// # Interval join
//
// A left record l and a right record r match when
//
//	l.Time+lower <= r.Time <= l.Time+upper
//
// with both bounds inclusive (Flink's semantics); a record one millisecond
// beyond either bound does not match. Matches are emitted eagerly: an
// arriving record is matched against the buffered records of the other
// side, in their (time, ID) order, and then buffered itself if a record to
// come could still match it. So each match is emitted once, by its second
// record, with the later of the two event times.
//
// A record's last partner time is the latest event time of a record it can
// match: l.Time+upper for a left record, r.Time-lower for a right one. It
// stays buffered while W is before that time, and an event-time timer at
// that time removes it; timers of a key are shared by records with the
// same last partner time. A record arriving when W is already at or past
// its last partner time can match no record to come. It is still matched
// against the buffered records (which may retire later than it); if it
// matches none it is late and goes to the side output, with a reason
// naming its last partner time and the watermark. Buffered records the
// watermark has retired never match, even before their timer fires, so
// the output does not depend on when timers run. Where Flink keeps records
// until W passes the last partner time, weir's watermark ("none at or
// before W") lets them go as W reaches it.
//
// State bound: per key, the left records less than upper behind W (when
// upper is positive) and the right records less than -lower behind W (when
// lower is negative), plus the records ahead of W.
//
// # Output
//
// A CombineFunc builds each match's record; the join sets its ID to
// "<left ID>+<right ID>" (deterministic, so a re-run after a crash emits
// the same IDs), its time as above, and fills an empty key with the join
// key and an empty source coordinate with the left record's. A pair the
// CombineFunc rejects goes to the side output as its left record, with a
// reason naming both records and the error.
//
// # State
//
// Each buffered record is one entry of the family's map for its key, under
// a sub-key of 8 bytes of time (the window start, or the record's event
// time for the interval join, ordered), the side, and the record ID, so a
// redelivered record is stored once. The value is a compact binary encoding
// of the record's ID, key, producer, event time, source coordinate and
// value. Windowed timers are named "window:<start ms>"; interval timers
// "gc".
package join
