package stream

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
)

// Operator handles the data records of one operator instance.
type Operator interface {
	Process(c *Context, r record.Record) error
}

// OperatorFunc adapts a function to Operator.
type OperatorFunc func(c *Context, r record.Record) error

// Process calls f.
func (f OperatorFunc) Process(c *Context, r record.Record) error { return f(c, r) }

// TimerHandler is implemented by operators that set timers. OnTimer runs
// with the Context scoped to the timer's key.
type TimerHandler interface {
	OnTimer(c *Context, t state.Timer) error
}

// StateUser is implemented by operators that keep state: it names the state
// families the operator uses, each of which the contract must bound.
type StateUser interface {
	Families() []string
}

// Middleware wraps an operator with cross-cutting behaviour.
type Middleware func(Operator) Operator

// Chain wraps op in mw, the first middleware outermost.
func Chain(op Operator, mw ...Middleware) Operator {
	for i := len(mw) - 1; i >= 0; i-- {
		op = mw[i](op)
	}
	return op
}

// Typed returns an operator that decodes each record's JSON value into a T
// before calling fn. A value that does not decode is poison: it is
// dead-lettered with the decoding error, naming the payload.
func Typed[T any](fn func(c *Context, r record.Record, v T) error) Operator {
	return OperatorFunc(func(c *Context, r record.Record) error {
		var v T
		if err := json.Unmarshal(r.Value, &v); err != nil {
			return Poison("payload", fmt.Errorf("decode %T: %w", v, err))
		}
		return fn(c, r, v)
	})
}

// PoisonError marks a record the operator cannot handle, ever. The runtime
// dead-letters the record and goes on.
type PoisonError struct {
	Field string
	Err   error
}

func (e *PoisonError) Error() string {
	return fmt.Sprintf("stream: poison record: %s: %v", e.Field, e.Err)
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

func (e *RetryError) Error() string { return fmt.Sprintf("stream: retry after %s: %v", e.After, e.Err) }
func (e *RetryError) Unwrap() error { return e.Err }

// Retry marks err as transient: the step is retried after the back-off.
func Retry(err error, after time.Duration) error { return &RetryError{After: after, Err: err} }

// ErrNoOutput is returned by Emit in an operator without an output edge.
var ErrNoOutput = errors.New("stream: operator has no output edge")
