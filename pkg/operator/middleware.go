package operator

import (
	"errors"
	"fmt"
	"time"

	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
)

// Middleware wraps an operator with cross-cutting behaviour. What it
// returns keeps the wrapped operator's timers, state families and schema
// version (Wrap).
type Middleware func(Operator) Operator

// Chain wraps op in mw, the first middleware outermost.
func Chain(op Operator, mw ...Middleware) Operator {
	for i := len(mw) - 1; i >= 0; i-- {
		op = mw[i](op)
	}
	return op
}

// Wrap returns an operator that handles records and timers with process and
// onTimer, and reports inner's state families and schema version. Either
// function may be nil: inner's own is used. Middleware builds on it, so
// that a wrapped operator keeps everything the runtime asks of inner.
func Wrap(inner Operator, process Func, onTimer func(Env, state.Timer) error) Operator {
	if process == nil {
		process = inner.Process
	}
	if onTimer == nil {
		if th, ok := inner.(TimerHandler); ok {
			onTimer = th.OnTimer
		}
	}
	return wrapped{inner: inner, process: process, onTimer: onTimer}
}

type wrapped struct {
	inner   Operator
	process Func
	onTimer func(Env, state.Timer) error
}

func (w wrapped) Process(env Env, r record.Record) error { return w.process(env, r) }

// OnTimer handles a timer; an operator that set none is never called.
func (w wrapped) OnTimer(env Env, t state.Timer) error {
	if w.onTimer == nil {
		return nil
	}
	return w.onTimer(env, t)
}

func (w wrapped) Families() []string {
	if su, ok := w.inner.(StateUser); ok {
		return su.Families()
	}
	return nil
}

func (w wrapped) StateHorizon() time.Duration {
	if h, ok := w.inner.(Horizoned); ok {
		return h.StateHorizon()
	}
	return 0
}

func (w wrapped) SchemaVersion() int {
	if v, ok := w.inner.(Versioned); ok {
		return v.SchemaVersion()
	}
	return 1
}

// PoisonOn classifies errors as poison: an error that matches one of
// targets (errors.Is) — a payload that does not decode, say — is a
// property of the record, so the record is dead-lettered naming field
// rather than stopping the runtime.
func PoisonOn(field string, targets ...error) Middleware {
	classify := func(err error) error {
		for _, t := range targets {
			if errors.Is(err, t) {
				return Poison(field, err)
			}
		}
		return err
	}
	return func(op Operator) Operator {
		return Wrap(op, func(env Env, r record.Record) error { return classify(op.Process(env, r)) }, nil)
	}
}

// Rekey routes everything op emits by the key f gives it: f sees each
// record op emits and returns its new key; its error is op's. q5 uses it to
// route per-auction counts by their window.
func Rekey(f func(r record.Record) ([]byte, error)) Middleware {
	return func(op Operator) Operator {
		var onTimer func(Env, state.Timer) error
		if th, ok := op.(TimerHandler); ok {
			onTimer = func(env Env, t state.Timer) error { return th.OnTimer(rekeyed{env, f}, t) }
		}
		return Wrap(op, func(env Env, r record.Record) error { return op.Process(rekeyed{env, f}, r) }, onTimer)
	}
}

// rekeyed is an Env whose Emit re-keys records.
type rekeyed struct {
	Env
	key func(record.Record) ([]byte, error)
}

func (e rekeyed) Emit(r record.Record) error {
	k, err := e.key(r)
	if err != nil {
		return fmt.Errorf("operator: rekey %s: %w", r.ID, err)
	}
	r.Key = k
	return e.Env.Emit(r)
}
