// Package operatortest runs an operator.Operator in a test the way the
// runtime does, on a real Pebble store in memory — as net/http/httptest
// serves net/http. Each call to Process is one step: the record is handled
// in one state batch, committed at its end with what it emitted and side
// output. A record the operator calls poison is dead-lettered and the step
// still commits, as in the runtime, so whatever the operator wrote before
// giving up stays: tests see it. A step whose operator fails otherwise is
// discarded whole. Advance moves the watermark and fires the event-time
// timers now due, Tick moves the processing-time clock and fires its
// timers, each in one step, each timer deleted before OnTimer sees it —
// timers set while firing included, in time order.
package operatortest

import (
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirflow/weir/internal/keygroup"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
)

// TB is the part of testing.TB the harness uses. Runnable examples, which
// have no testing.T, pass Panicker.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Panicker is a TB that panics, for examples.
type Panicker struct{}

// Helper does nothing.
func (Panicker) Helper() {}

// Fatalf panics with the message.
func (Panicker) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// Options configure a Harness. The zero value serves most operators.
type Options struct {
	// Families are the state families; nil gives every family the
	// operator names (operator.StateUser) map state without a key bound.
	Families []state.Family
	// KeyGroups is the key-group count; 0 means 16.
	KeyGroups int
	// KeyOf is the state key of a record; nil means its Key.
	KeyOf func(record.Record) []byte
	// Now is the processing-time clock's start; zero means 2025-03-01
	// 12:00 UTC.
	Now time.Time
}

// SideOutput is one record filed on the side output, with its reason.
type SideOutput struct {
	Record record.Record
	Reason string
}

// DeadLetter is one record the operator called poison.
type DeadLetter struct {
	Record record.Record
	Field  string
	Err    error
}

// Harness drives one operator.
type Harness struct {
	tb      TB
	op      operator.Operator
	store   *state.Store
	groups  int
	keyOf   func(record.Record) []byte
	now, wm time.Time

	// Out and Side are what committed steps emitted and side output, in
	// order; Dead the records their operator called poison.
	Out  []record.Record
	Side []SideOutput
	Dead []DeadLetter
}

// New opens a harness for op; Close releases its store.
func New(tb TB, op operator.Operator, o Options) *Harness {
	tb.Helper()
	if o.KeyGroups == 0 {
		o.KeyGroups = 16
	}
	if o.KeyOf == nil {
		o.KeyOf = func(r record.Record) []byte { return r.Key }
	}
	if o.Now.IsZero() {
		o.Now = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	}
	fams := o.Families
	if su, ok := op.(operator.StateUser); ok && fams == nil {
		for _, f := range su.Families() {
			fams = append(fams, state.Family{Name: f, Kind: state.KindMap, MaxKeys: 1 << 40})
		}
	}
	s, err := state.Open("db", state.Options{FS: vfs.NewMem(), Families: fams, KeyGroups: o.KeyGroups, NoSync: true})
	if err != nil {
		tb.Fatalf("operatortest: open state: %v", err)
	}
	return &Harness{tb: tb, op: op, store: s, groups: o.KeyGroups, keyOf: o.KeyOf, now: o.Now}
}

// Close closes the harness's store.
func (h *Harness) Close() error { return h.store.Close() }

// Store is the operator's state store, for tests that look inside.
func (h *Harness) Store() *state.Store { return h.store }

// Now is the processing-time clock.
func (h *Harness) Now() time.Time { return h.now }

// Watermark is the operator's watermark.
func (h *Harness) Watermark() time.Time { return h.wm }

// KeyGroup is the key group of a state key.
func (h *Harness) KeyGroup(key []byte) int { return keygroup.Of(key, h.groups) }

// Process hands r to the operator in a step of its own. A poison error is
// returned after the step commits with r dead-lettered.
func (h *Harness) Process(r record.Record) error { return h.ProcessAll(r) }

// process hands one record to the operator; poison is dead-lettered and
// returned, and does not fail the step.
func (s *step) process(r record.Record) error {
	key := s.h.keyOf(r)
	err := s.h.op.Process(s.env(r, s.h.KeyGroup(key), key), r)
	var pe *operator.PoisonError
	if errors.As(err, &pe) {
		s.dead = append(s.dead, DeadLetter{Record: r, Field: pe.Field, Err: pe.Err})
		s.poisoned = err
		return nil
	}
	return err
}

// ProcessAll hands every record to the operator in one step, as the
// runtime does with a fetch batch: all commit together or none does. Poison
// records are dead-lettered and the last poison error returned.
func (h *Harness) ProcessAll(rs ...record.Record) error {
	var poison error
	err := h.step(func(s *step) error {
		for _, r := range rs {
			if err := s.process(r); err != nil {
				return err
			}
		}
		poison = s.poisoned
		return nil
	})
	if err != nil {
		return err
	}
	return poison
}

// FireTimer fires one timer in a step of its own, whether or not it is
// due or set: tests of what an operator does with a timer that fires early,
// late, or that it never set.
func (h *Harness) FireTimer(t state.Timer) error {
	th, ok := h.op.(operator.TimerHandler)
	if !ok {
		return fmt.Errorf("operatortest: %T handles no timers", h.op)
	}
	t.KeyGroup = h.KeyGroup(t.Key)
	return h.step(func(s *step) error {
		if err := s.b.DeleteTimer(t); err != nil {
			return err
		}
		return th.OnTimer(s.env(record.Record{}, t.KeyGroup, t.Key), t)
	})
}

// MustProcess is Process failing the test on an error.
func (h *Harness) MustProcess(r record.Record) {
	h.tb.Helper()
	if err := h.Process(r); err != nil {
		h.tb.Fatalf("operatortest: process %s: %v", r.ID, err)
	}
}

// Advance moves the watermark to wm (never back) and fires the event-time
// timers due, in one step.
func (h *Harness) Advance(wm time.Time) error {
	if wm.After(h.wm) {
		h.wm = wm
	}
	return h.fire(state.EventTime, h.wm)
}

// SetWatermark moves the watermark without firing timers, as if they ran
// late.
func (h *Harness) SetWatermark(wm time.Time) {
	if wm.After(h.wm) {
		h.wm = wm
	}
}

// Tick moves the processing-time clock by d and fires the processing-time
// timers due, in one step.
func (h *Harness) Tick(d time.Duration) error {
	h.now = h.now.Add(d)
	return h.fire(state.ProcessingTime, h.now)
}

func (h *Harness) fire(d state.Domain, upTo time.Time) error {
	th, ok := h.op.(operator.TimerHandler)
	if !ok {
		return nil
	}
	return h.step(func(s *step) error {
		s.b.Note(d, true)
		defer s.b.Note(d, false)
		for {
			const limit = 64
			due, err := s.b.DueTimers(d, upTo, limit)
			if err != nil || len(due) == 0 {
				return err
			}
			var last *state.Timer
			if len(due) == limit {
				l := due[len(due)-1]
				last = &l
			}
			for len(due) > 0 {
				t := due[0]
				due = due[1:]
				// As the runtime does: one an earlier callback cancelled
				// does not fire, and one a callback sets is merged into
				// what is left to fire.
				if ok, err := s.b.TakeTimer(t); err != nil || !ok {
					if err != nil {
						return err
					}
					continue
				}
				if err := th.OnTimer(s.env(record.Record{}, t.KeyGroup, t.Key), t); err != nil {
					return fmt.Errorf("timer %s %s of %q: %w", t.Domain, t.Name, t.Key, err)
				}
				due = s.b.Merge(d, due, upTo, last)
			}
		}
	})
}

// step is one batch and what it emitted.
type step struct {
	h        *Harness
	b        *state.Batch
	out      []record.Record
	side     []SideOutput
	dead     []DeadLetter
	poisoned error
}

func (h *Harness) step(fn func(*step) error) error {
	s := &step{h: h, b: h.store.NewBatch()}
	defer s.b.Close()
	if err := fn(s); err != nil {
		return err
	}
	if err := s.b.Commit(); err != nil {
		return err
	}
	h.Out = append(h.Out, s.out...)
	h.Side = append(h.Side, s.side...)
	h.Dead = append(h.Dead, s.dead...)
	return nil
}

func (s *step) env(r record.Record, kg int, key []byte) *env {
	return &env{s: s, rec: r, kg: kg, key: key, scope: s.b.Scope(kg, key, s.h.now)}
}

// env is the operator.Env of one call.
type env struct {
	s     *step
	rec   record.Record
	kg    int
	key   []byte
	scope state.Scope
}

var _ operator.Env = (*env)(nil)

func (e *env) Now() time.Time                  { return e.s.h.now }
func (e *env) Record() record.Record           { return e.rec }
func (e *env) Key() []byte                     { return e.key }
func (e *env) KeyGroup() int                   { return e.kg }
func (e *env) Watermark() time.Time            { return e.s.h.wm }
func (e *env) Value(family string) state.Value { return e.scope.Value(family) }
func (e *env) Map(family string) state.Map     { return e.scope.Map(family) }
func (e *env) List(family string) state.List   { return e.scope.List(family) }

func (e *env) SetTimer(d state.Domain, at time.Time, name string) error {
	return e.s.b.SetTimer(state.Timer{Domain: d, Time: at, KeyGroup: e.kg, Key: e.key, Name: name})
}

// AddTimer fails if the timer is set: the operator's claim that it is not
// is what lets the runtime skip the read.
func (e *env) AddTimer(d state.Domain, at time.Time, name string) error {
	t := state.Timer{Domain: d, Time: at, KeyGroup: e.kg, Key: e.key, Name: name}
	switch set, err := e.s.b.HasTimer(t); {
	case err != nil:
		return err
	case set:
		return fmt.Errorf("operatortest: AddTimer of timer %s %s %q of key %q, which is set", d, at.Format(time.RFC3339Nano), name, e.key)
	}
	return e.s.b.AddTimer(t)
}

func (e *env) DeleteTimer(d state.Domain, at time.Time, name string) error {
	return e.s.b.DeleteTimer(state.Timer{Domain: d, Time: at, KeyGroup: e.kg, Key: e.key, Name: name})
}

// Emit records r as the runtime's Context would send it: fields left empty
// are the handled record's.
func (e *env) Emit(r record.Record) error {
	e.s.out = append(e.s.out, operator.Emitted(r, e.rec))
	return nil
}

func (e *env) SideOutput(r record.Record, reason string) error {
	e.s.side = append(e.s.side, SideOutput{Record: r, Reason: reason})
	return nil
}
