package watermark

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/weirflow/weir/pkg/record"
)

// Strategies, as the contract's progress.watermark names them.
const (
	BoundedOutOfOrderness = "bounded-out-of-orderness"
	SourceProvided        = "source-provided"
	None                  = "none"
)

// End is the watermark of an input that has ended — the last record of a
// bounded replay read: no record can be later, so every event-time window
// and timer closes.
var End = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// ProvidedHeader carries a source-provided watermark on an ingress
// message, in Unix milliseconds, when the contract's progress.watermark is
// SourceProvided.
const ProvidedHeader = "Weir-Watermark"

// Policy generates the watermarks of ingress inputs, as the contract's
// progress section declares: from the event times seen, with a bound on
// their disorder, or from what the source sends.
type Policy struct {
	Strategy string // BoundedOutOfOrderness or SourceProvided
	// Bound is the out-of-orderness: after the largest event time M an
	// input's watermark is M - Bound - 1ms, so an event up to Bound older
	// than the newest one seen is still on time.
	Bound time.Duration
}

// Observe feeds t one record of an ingress input: its event time and, for
// SourceProvided, the watermark its producer sent with it (ProvidedHeader,
// "" when none). A provided watermark that is not Unix milliseconds in the
// event-time domain is an error: the record carrying it is bad input.
func (p Policy) Observe(t *Tracker, input string, eventTime, now time.Time, provided string) error {
	t.Observe(input, eventTime, now)
	switch p.Strategy {
	case BoundedOutOfOrderness:
		t.Advance(input, t.Input(input).MaxEventTime.Add(-p.Bound-time.Millisecond))
	case SourceProvided:
		if provided == "" {
			return nil
		}
		ms, err := strconv.ParseInt(provided, 10, 64)
		wm := time.UnixMilli(ms).UTC()
		if err == nil {
			err = record.CheckTime(wm)
		}
		if err != nil {
			return fmt.Errorf("%q is not Unix milliseconds in the event-time domain: %v", provided, err)
		}
		t.Advance(input, wm)
	}
	return nil
}

// Input is one input's progress, as saved with each step.
type Input struct {
	// Watermark is the input's watermark; zero before the first.
	Watermark time.Time `json:"wm,omitzero"`
	// MaxEventTime is the largest event time seen, for generated watermarks.
	MaxEventTime time.Time `json:"max,omitzero"`
	// Idle is set while the input is idle.
	Idle bool `json:"idle,omitempty"`
	// LastActive is the processing time of the input's last record.
	LastActive time.Time `json:"active,omitzero"`
}

// Tracker combines the watermarks of an operator's inputs. It is not safe
// for concurrent use; it belongs to the runtime's step loop.
type Tracker struct {
	idleTimeout time.Duration
	drift       time.Duration
	inputs      map[string]*Input
	names       []string
	// emitted is the last watermark the operator forwarded.
	emitted time.Time
}

// Progress is a copy of a tracker's progress, taken by Save.
type Progress struct {
	inputs  map[string]Input
	emitted time.Time
}

// Save copies the tracker's progress, for Restore: a step that aborts puts
// the watermarks back as they were before it.
func (t *Tracker) Save() Progress {
	p := Progress{inputs: make(map[string]Input, len(t.inputs)), emitted: t.emitted}
	for n, in := range t.inputs {
		p.inputs[n] = *in
	}
	return p
}

// Restore puts back the progress Save copied.
func (t *Tracker) Restore(p Progress) {
	for n, saved := range p.inputs {
		if in := t.inputs[n]; in != nil {
			*in = saved
		}
	}
	t.emitted = p.emitted
}

// NewTracker tracks the named inputs. idleTimeout 0 never marks an input
// idle; drift 0 never pauses one.
func NewTracker(inputs []string, idleTimeout, drift time.Duration) *Tracker {
	t := &Tracker{idleTimeout: idleTimeout, drift: drift, inputs: map[string]*Input{}}
	for _, n := range inputs {
		t.inputs[n] = &Input{}
		t.names = append(t.names, n)
	}
	sort.Strings(t.names)
	return t
}

// Input returns an input's progress.
func (t *Tracker) Input(name string) Input {
	if in, ok := t.inputs[name]; ok {
		return *in
	}
	return Input{}
}

// Observe records that input delivered a record with event time et at
// processing time now: the input is active again.
func (t *Tracker) Observe(name string, et, now time.Time) {
	in := t.inputs[name]
	if in == nil {
		return
	}
	in.Idle = false
	in.LastActive = now
	if et.After(in.MaxEventTime) {
		in.MaxEventTime = et
	}
}

// Advance raises an input's watermark; a smaller value is ignored.
func (t *Tracker) Advance(name string, wm time.Time) {
	if in := t.inputs[name]; in != nil && wm.After(in.Watermark) {
		in.Watermark = wm
	}
}

// SetIdle marks an input idle (an upstream said so) or active.
func (t *Tracker) SetIdle(name string, idle bool) {
	if in := t.inputs[name]; in != nil {
		in.Idle = idle
	}
}

// Touch marks an input active without an event time (a control record or
// an input that was just opened).
func (t *Tracker) Touch(name string, now time.Time) {
	if in := t.inputs[name]; in != nil {
		in.LastActive = now
	}
}

// CheckIdle marks inputs idle that have been silent longer than the idle
// timeout, and returns their names. An input qualifies at LastActive plus
// the idle timeout; confirm, if not nil, is asked with that time and must
// agree before the input is marked (the broker, looked at since, holds
// nothing more for it): silence is also what a stalled broker looks like.
func (t *Tracker) CheckIdle(now time.Time, confirm func(name string, qualified time.Time) bool) []string {
	if t.idleTimeout <= 0 {
		return nil
	}
	var idled []string
	for _, n := range t.names {
		in := t.inputs[n]
		if in.Idle || in.LastActive.IsZero() || now.Sub(in.LastActive) <= t.idleTimeout {
			continue
		}
		if confirm != nil && !confirm(n, in.LastActive.Add(t.idleTimeout)) {
			continue
		}
		in.Idle = true
		idled = append(idled, n)
	}
	return idled
}

// Watermark is the operator's watermark: the minimum over active inputs.
// ok is false while an active input has no watermark yet. While every
// input is idle it is the minimum of the watermarks they reached before
// — what each promised, idle or not — so that the last watermarks an
// input sent before falling idle still count when they come in the same
// step as its idle marker; ok is false if none has one.
func (t *Tracker) Watermark() (wm time.Time, ok bool) {
	first := true
	for _, n := range t.names {
		in := t.inputs[n]
		if in.Idle {
			continue
		}
		if in.Watermark.IsZero() {
			return time.Time{}, false
		}
		if first || in.Watermark.Before(wm) {
			wm, first = in.Watermark, false
		}
	}
	if !first {
		return wm, true
	}
	for _, n := range t.names {
		in := t.inputs[n]
		if in.Watermark.IsZero() {
			continue
		}
		if first || in.Watermark.Before(wm) {
			wm, first = in.Watermark, false
		}
	}
	return wm, !first
}

// AllIdle reports whether every input is idle — true without inputs: an
// instance that owns no partition (more instances than partitions) will
// write nothing, and says so to the readers of its output.
func (t *Tracker) AllIdle() bool {
	for _, in := range t.inputs {
		if !in.Idle {
			return false
		}
	}
	return true
}

// Paused reports whether an input runs more than the drift ahead of the
// slowest active input and should not be read for now.
func (t *Tracker) Paused(name string) bool {
	in := t.inputs[name]
	if t.drift <= 0 || in == nil || in.Idle || in.Watermark.IsZero() {
		return false
	}
	slowest, ok := t.slowest()
	return ok && in.Watermark.Sub(slowest) > t.drift
}

// slowest is the minimum watermark over active inputs that have one.
func (t *Tracker) slowest() (time.Time, bool) {
	var m time.Time
	found := false
	for _, in := range t.inputs {
		if in.Idle || in.Watermark.IsZero() {
			continue
		}
		if !found || in.Watermark.Before(m) {
			m, found = in.Watermark, true
		}
	}
	return m, found
}

// Emitted is the last watermark the operator forwarded.
func (t *Tracker) Emitted() time.Time { return t.emitted }

// SetEmitted records a forwarded watermark.
func (t *Tracker) SetEmitted(wm time.Time) {
	if wm.After(t.emitted) {
		t.emitted = wm
	}
}

// state is the tracker's saved form.
type state struct {
	Inputs  map[string]Input `json:"inputs"`
	Emitted time.Time        `json:"emitted,omitzero"`
}

// MarshalBinary saves the tracker's progress.
func (t *Tracker) MarshalBinary() ([]byte, error) {
	s := state{Inputs: map[string]Input{}, Emitted: t.emitted}
	for n, in := range t.inputs {
		s.Inputs[n] = *in
	}
	return json.Marshal(s)
}

// UnmarshalBinary restores saved progress. Inputs no longer tracked are
// ignored; new inputs start empty. Idle inputs stay idle until a record.
func (t *Tracker) UnmarshalBinary(b []byte) error {
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("watermark: restore: %w", err)
	}
	for n, saved := range s.Inputs {
		if in := t.inputs[n]; in != nil {
			*in = saved
		}
	}
	t.emitted = s.Emitted
	return nil
}

// Relayout restores the progress of an instance whose inputs, or their
// writers, changed — a rescale — from the saved progress of the instances
// it replaces (snapshots). Each tracked input takes the progress of the
// saved inputs same reports as the same stream partition, whichever writer
// wrote it: the least watermark among them (none if one had none), idle
// only if every one was, last active when the latest was. A writer whose
// range of inputs changed promises no more than the least of what that
// partition's writers had promised: restoring one writer's own, larger
// watermark would let it run ahead of records it now reads in another's
// place, and close windows before them. The emitted watermark becomes the
// least of the snapshots'.
func (t *Tracker) Relayout(snapshots [][]byte, same func(input, saved string) bool) error {
	found := map[string]bool{}
	for i, b := range snapshots {
		var s state
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("watermark: restore: %w", err)
		}
		if i == 0 || s.Emitted.Before(t.emitted) {
			t.emitted = s.Emitted
		}
		for _, n := range t.names {
			in := t.inputs[n]
			for name, saved := range s.Inputs {
				if !same(n, name) {
					continue
				}
				if !found[n] {
					*in, found[n] = saved, true
					continue
				}
				if saved.Watermark.IsZero() || saved.Watermark.Before(in.Watermark) {
					in.Watermark = saved.Watermark
				}
				if saved.MaxEventTime.Before(in.MaxEventTime) {
					in.MaxEventTime = saved.MaxEventTime
				}
				in.Idle = in.Idle && saved.Idle
				if saved.LastActive.After(in.LastActive) {
					in.LastActive = saved.LastActive
				}
			}
		}
	}
	return nil
}
