// Package operator is the API operators are written against.
//
// An operator is business logic: one step of a pipeline. It implements
// Operator — one method that handles one data record — and sees only its
// Env: the record, its keyed state, timers, an emitter, the side output,
// the watermark and the processing-time clock. It never sees a NATS
// message, Pebble, acknowledgements or the wall clock. The runtime
// (pkg/stream) provides the Env and does the plumbing; the operator
// libraries (pkg/window, pkg/join) and the services' own operators are all
// Operators, hosted the same way, and operatortest runs any of them in a
// test the way the runtime does.
//
// What an operator returns says what happens to the record: nil, it is
// done; Poison, it can never be handled and goes to the dead-letter stream
// with its coordinate and the field at fault; Retry, the whole step is
// retried in place after a back-off; anything else stops the runtime, to be
// restarted from its last commit. Cross-cutting behaviour wraps an operator
// as Middleware, the way net/http handlers are wrapped.
package operator

import (
	"errors"
	"fmt"
	"time"

	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
)

// Operator handles the data records of one operator instance.
type Operator interface {
	Process(env Env, r record.Record) error
}

// Func adapts a function to Operator.
type Func func(env Env, r record.Record) error

// Process calls f.
func (f Func) Process(env Env, r record.Record) error { return f(env, r) }

// TimerHandler is implemented by operators that set timers. OnTimer runs
// with the Env scoped to the timer's key.
type TimerHandler interface {
	OnTimer(env Env, t state.Timer) error
}

// StateUser is implemented by operators that keep state: it names the state
// families the operator uses, each of which the contract must bound.
type StateUser interface {
	Families() []string
}

// Horizoned is implemented by operators whose state must live for a span of
// event time after it is first written — a window's size (or a session's
// gap) plus its allowed lateness. The runtime refuses to start when a
// family bounded by a TTL would expire sooner.
type Horizoned interface {
	StateHorizon() time.Duration
}

// Versioned is implemented by operators whose state layout has versions: a
// restore refuses a snapshot of a different version. Operators without it
// are at version 1.
type Versioned interface {
	SchemaVersion() int
}

// Env is what an operator sees while it handles one record or timer. It is
// valid only during that call.
type Env interface {
	// Now is the processing-time clock, injected by the runtime.
	Now() time.Time
	// Record is the record being handled; zero during OnTimer.
	Record() record.Record
	// Key is the key the state is scoped to: the record's ID or key, as
	// the operator's keying in the contract says, or the timer's key.
	Key() []byte
	// KeyGroup is the key group of Key.
	KeyGroup() int
	// Watermark is the operator's input watermark: no record still to
	// come has an event time at or before it. Zero before the first, and
	// in pipelines without event time.
	Watermark() time.Time
	// Value, Map and List are the current key's state of a family.
	Value(family string) state.Value
	Map(family string) state.Map
	List(family string) state.List
	// SetTimer sets a timer on the current key; setting the same domain,
	// time and name twice sets it once. DeleteTimer deletes one; a
	// missing timer is no error.
	SetTimer(d state.Domain, at time.Time, name string) error
	DeleteTimer(d state.Domain, at time.Time, name string) error
	// AddTimer sets a timer the operator knows is not set: it never set
	// it, or deleted it, or it fired. It saves the state read SetTimer
	// makes to tell. operatortest fails an AddTimer of a timer that is set.
	AddTimer(d state.Domain, at time.Time, name string) error
	// Emit sends a data record to the operator's output edge, routed by
	// its key. Fields left empty are inherited from the record being
	// handled: ID, key, producer, time and source coordinate.
	Emit(r record.Record) error
	// SideOutput files a record on the pipeline's side output (late
	// data), with its source coordinate and the reason.
	SideOutput(r record.Record, reason string) error
}

// Emitted is the data record an operator emitting r from while handling
// from means: what r leaves empty — kind, ID, key, producer, time and
// source coordinate — it inherits from from (zero during OnTimer). Every
// Env's Emit applies it.
func Emitted(r, from record.Record) record.Record {
	if r.Kind == 0 {
		r.Kind = record.Data
	}
	if r.ID == "" {
		r.ID = from.ID
	}
	if r.Key == nil {
		r.Key = from.Key
	}
	if r.Producer == "" {
		r.Producer = from.Producer
	}
	if r.Time.IsZero() {
		r.Time = from.Time
	}
	if r.At == (record.Coordinate{}) {
		r.At = from.At
	}
	return r
}

// PoisonError marks a record the operator cannot handle, ever. The runtime
// dead-letters the record and goes on.
type PoisonError struct {
	Field string
	Err   error
}

func (e *PoisonError) Error() string {
	return fmt.Sprintf("operator: poison record: %s: %v", e.Field, e.Err)
}
func (e *PoisonError) Unwrap() error { return e.Err }

// Poison marks err as a property of the record, not of the system: retrying
// cannot help. field names the part of the record at fault.
func Poison(field string, err error) error { return &PoisonError{Field: field, Err: err} }

// RetryError marks a transient failure. The runtime discards the step and
// retries it in place after the back-off, holding its input meanwhile.
type RetryError struct {
	After time.Duration
	Err   error
}

func (e *RetryError) Error() string {
	return fmt.Sprintf("operator: retry after %s: %v", e.After, e.Err)
}
func (e *RetryError) Unwrap() error { return e.Err }

// Retry marks err as transient: the step is retried after the back-off.
func Retry(err error, after time.Duration) error { return &RetryError{After: after, Err: err} }

// ErrNoOutput is returned by Emit in an operator without an output edge.
var ErrNoOutput = errors.New("operator: no output edge")
