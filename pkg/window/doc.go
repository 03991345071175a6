// Package window is weir's windowing model, after Beam and Dataflow: it
// assigns each keyed record to event-time windows, aggregates the window's
// records in keyed state, and emits panes of the result when triggers fire,
// in discarding, accumulating or retracting mode. It is business logic only:
// the Operator is an operator.Operator, seeing only its operator.Env (clock,
// watermark, state, timers, emitter), which the runtime provides as it does
// for every operator. A record without a usable event time, or whose value
// the aggregator rejects, is poison. Evaluate is a bounded in-memory model
// of the same Spec that serves as the test oracle.
//
// # Windows
//
// Event time is taken at millisecond precision (truncated toward the past).
// A window is [Start, End), and its maximum timestamp is End-1ms. Tumbling
// windows of Size and sliding windows of Size every Slide are aligned to the
// Unix epoch; an element belongs to one tumbling and Size/Slide sliding
// windows. A session element belongs to [t, t+Gap), which merges with every
// session of the key it overlaps (touching is not overlapping: elements
// exactly Gap apart are two sessions). The global window holds everything
// and never ends, so it needs an early trigger and has no ON_TIME pane.
//
// # Watermark and lateness
//
// A watermark W says no later record has an event time at or before W (see
// pkg/record). With A the allowed lateness and max the window's maximum
// timestamp:
//
//   - the window is complete, and its ON_TIME pane fires, when W >= max;
//   - an element is late for the window when W >= max on arrival;
//   - the window expires when W >= max + A (its GC time): its state is
//     cleared, and it accepts nothing more;
//   - an element is dropped, to the side output with a reason naming the
//     window and the watermark, when every window it belongs to is expired
//     (for sessions: its own window [t, t+Gap)). A sliding element with some
//     windows expired joins the others.
//
// So with A = 0 every late element is dropped and the ON_TIME pane is final;
// W = max+A-1ns is the last watermark under which a late element is still
// accepted. The comparisons are >= rather than Beam's > because Beam's
// watermark means "no later element before W" and weir's "none at or
// before W": they differ by one instant, and with >= the GC timer, the drop
// rule and "final" agree exactly, at timers that fire when t.Time <= W.
//
// # Triggers and panes
//
// A window is in its early phase until its ON_TIME pane, in its late phase
// after; a window created with the watermark already past its maximum
// timestamp (its first elements are late) starts late and has no ON_TIME
// pane. The elements "of a pane" are those since the window's last pane.
//
//   - EarlyCount fires an EARLY pane when a pane has that many elements.
//   - EarlyEvery fires an EARLY pane that long in processing time after a
//     pane's first element.
//   - OnTime fires the ON_TIME pane when W >= max, always (even with no
//     element since the last pane, like Beam's FIRE_ALWAYS).
//   - LateEach fires a LATE pane for every accepted late element;
//     LateEvery that long after a late pane's first element.
//   - At GC, a window with elements since its last pane fires a LATE pane;
//     one without emits nothing.
//
// A pane's Final flag is set exactly when the window's state is cleared with
// it: the ON_TIME pane if the watermark is already at the GC time (always
// when A = 0), or the pane emitted at GC. Every emission is a record whose
// value is an encoded Pane; Version counts a window's emissions from 1 and
// the record ID is "<key>|<start>|<end>|v<version>|<kind>".
//
// Discarding panes carry the elements of the pane only; accumulating panes
// all the window's elements; retracting panes likewise, each after the
// previous insert (if any) is retracted by an emission of kind "retract"
// with the same value, the firing's pane info and its own version.
//
// # Session merges
//
// When an element joins sessions (or extends one), the merged session
// continues them: it takes their merged accumulators, their elements since
// the last pane (timed from the earliest), and the largest of their pane
// indexes and versions. It is a new window with new bounds and timers: it
// has an ON_TIME pane of its own unless the watermark is already past its
// maximum timestamp. In retracting mode each absorbed session that has
// emitted first retracts its last value, in a final firing (Final set, its
// own bounds and next version), so a downstream summing inserts minus
// retractions sees each element once. In accumulating and discarding modes
// nothing is retracted: the absorbed sessions' panes stand, and the merged
// session's accumulating panes repeat their elements.
//
// # State and timers
//
// The operator keeps one map family: per key, one entry per live window,
// under a 16-byte sub-key of its bounds, holding the phase, next pane
// index, last version, count and first arrival of the pane's elements, the
// accumulator and, when retracting, the last value. Timers are named by
// the hex sub-key and a purpose letter: event time at max (ON_TIME, only
// when A > 0), event time at the GC time, and processing time at the
// interval trigger's deadline. The operator expects the runtime to fire a
// key's due timers in (time, name) order and an event-time timer when the
// watermark reaches it; it tolerates timers that fire late (a record first
// brings its windows up to the watermark) and timers of windows already
// gone.
//
// Two layouts keep all of a key's windows in one entry instead, the
// operator's state schema version 2; their timers and panes are the same:
//
//   - sessions (sessions.go), in start order, so that a record finds the
//     sessions it overlaps with one read;
//   - sliding windows whose one pane is the final ON_TIME pane (no early
//     trigger, no allowed lateness) under Count or MaxBy, kept as slices
//     (slices.go): one accumulator per Slide, merged when a window fires,
//     so that a record costs one state update rather than Size/Slide.
//
// # Operators, middleware and the queries
//
// Every operator — the services' own and the libraries' — is an
// operator.Operator written against one interface, operator.Env (the
// record, keyed state, timers, emit, side output, clock, watermark), which the
// runtime implements (pkg/stream's env, checked at compile time), and
// operatortest implements for tests. pkg/window and pkg/join are such
// operators, hosted like any other; they return their record errors as
// poison, and never import the runtime (test/layout_test.go). Cross-cutting
// behaviour is middleware (operator.Chain): PoisonOn classifies errors as
// poison (the bid queries' key operator, nexmark.Bids, dead-letters events
// that do not decode with it), Rekey routes what an operator emits by
// another key (q5 routes per-auction counts by window). A hot key is split over a
// two-level aggregation (edges[].split): the edge writer routes a record by
// keygroup.Split(key, id, N) and the reading runtime keys its state by the
// same split key; window.NewPartial aggregates each part and emits its
// accumulator keyed by the key again (keygroup.Unsplit), and window.Merge
// keeps each window's latest accumulator per part and emits their merge when
// its watermark passes the window and for each late part. The window operator keeps one map-state family per
// operator, one entry per live window; the reference evaluator
// (window.Evaluate) recomputes the same panes from the full element set and is
// the oracle of the tests, down to the sequence of revisions. A window's
// shape is the contract's (emission.window), beside its triggers,
// accumulation and lateness; window operators build their spec from the
// contract they run (window.SpecOf), and the q8 join reads its tumbling size
// there.
//
// Each query is a service running two or three operators (a stateless key
// operator that filters and re-keys ingress events onto a keyed edge, then the
// windowed operators); stream.RunService runs all operators the contract
// assigns to the service, or the one -operator names, each with state in
// <data>/<operator>. Results go to an edge declared format: json: one
// message per result, the record's value as payload, Nats-Msg-Id its
// deterministic ID, so nats sub reads them and a replay never duplicates
// them. No operator may read a json edge (contract rule G8).
package window
