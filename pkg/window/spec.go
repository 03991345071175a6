package window

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/weirflow/weir/contracts"
)

// Sentinel errors. Every error the package returns wraps one of these or an
// error of pkg/state, so callers classify failures with errors.Is.
var (
	// ErrInvalidSpec is returned by Spec.Validate and New for an unusable spec.
	ErrInvalidSpec = errors.New("window: invalid spec")
	// ErrValue is returned when an aggregator cannot read a record's value:
	// the record is poison, and nothing was written for it.
	ErrValue = errors.New("window: bad record value")
	// ErrEventTime is returned for a record without a usable event time.
	ErrEventTime = errors.New("window: event time out of range")
	// ErrCorrupt is returned when stored window state or a timer name cannot
	// be decoded.
	ErrCorrupt = errors.New("window: corrupt state")
)

// Kind is the shape of a window.
type Kind uint8

const (
	// Tumbling windows are fixed, non-overlapping intervals of Size aligned to
	// the Unix epoch.
	Tumbling Kind = iota + 1
	// Sliding windows are intervals of Size starting every Slide, aligned to
	// the Unix epoch; an element belongs to Size/Slide of them.
	Sliding
	// Session windows group a key's elements separated by less than Gap.
	Session
	// Global is one window holding all of a key's elements, forever.
	Global
)

var kindNames = [...]string{Tumbling: "tumbling", Sliding: "sliding", Session: "session", Global: "global"}

func (k Kind) String() string {
	if k >= Tumbling && k <= Global {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// MarshalText implements encoding.TextMarshaler.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *Kind) UnmarshalText(b []byte) error {
	for i, n := range kindNames {
		if n != "" && n == string(b) {
			*k = Kind(i)
			return nil
		}
	}
	return fmt.Errorf("%w: unknown window kind %q", ErrInvalidSpec, b)
}

// Accumulation says how the panes of one window relate.
type Accumulation uint8

const (
	// Discarding panes carry only the elements since the previous pane. It is
	// the zero value.
	Discarding Accumulation = iota
	// Accumulating panes carry every element of the window so far.
	Accumulating
	// Retracting panes carry every element so far, and each is preceded by a
	// retraction of the value the window emitted before.
	Retracting
)

var accumulationNames = [...]string{Discarding: "discarding", Accumulating: "accumulating", Retracting: "retracting"}

func (a Accumulation) String() string {
	if a <= Retracting {
		return accumulationNames[a]
	}
	return fmt.Sprintf("Accumulation(%d)", uint8(a))
}

// MarshalText implements encoding.TextMarshaler.
func (a Accumulation) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (a *Accumulation) UnmarshalText(b []byte) error {
	for i, n := range accumulationNames {
		if n == string(b) {
			*a = Accumulation(i)
			return nil
		}
	}
	return fmt.Errorf("%w: unknown accumulation %q", ErrInvalidSpec, b)
}

// MaxWindowsPerElement bounds Size/Slide of sliding windows: the number of
// windows, and so of state updates, one element costs.
const MaxWindowsPerElement = contracts.MaxWindowsPerElement

// Spec declares a windowed aggregation: the windows, the triggers that emit
// their panes, how panes accumulate, and how long late data is accepted.
type Spec struct {
	// Kind is the window shape.
	Kind Kind `yaml:"kind" json:"kind"`
	// Size is the length of tumbling and sliding windows.
	Size time.Duration `yaml:"size,omitempty" json:"size,omitempty"`
	// Slide is the period of sliding windows; Size must be a multiple of it.
	Slide time.Duration `yaml:"slide,omitempty" json:"slide,omitempty"`
	// Gap is the inactivity that closes a session.
	Gap time.Duration `yaml:"gap,omitempty" json:"gap,omitempty"`

	// EarlyEvery fires an early pane this much processing time after the
	// first element of a pane. Zero means no interval trigger.
	EarlyEvery time.Duration `yaml:"early_every,omitempty" json:"early_every,omitempty"`
	// EarlyCount fires an early pane when a pane has this many elements.
	// Zero means no count trigger.
	EarlyCount int `yaml:"early_count,omitempty" json:"early_count,omitempty"`
	// OnTime fires the ON_TIME pane when the watermark reaches the window's
	// maximum timestamp. It is required for every kind but Global, whose
	// window never ends.
	OnTime bool `yaml:"on_time" json:"on_time"`
	// LateEach fires a late pane for each accepted late element.
	LateEach bool `yaml:"late_each,omitempty" json:"late_each,omitempty"`
	// LateEvery fires a late pane this much processing time after the first
	// late element of a pane.
	LateEvery time.Duration `yaml:"late_every,omitempty" json:"late_every,omitempty"`

	// Accumulation says what each pane carries.
	Accumulation Accumulation `yaml:"accumulation" json:"accumulation"`
	// AllowedLateness is how long past its maximum timestamp, in event time,
	// a window keeps its state and accepts late elements.
	AllowedLateness time.Duration `yaml:"allowed_lateness,omitempty" json:"allowed_lateness,omitempty"`
}

// Validate reports whether the spec can be used. Every problem names the
// field at fault.
func (s Spec) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidSpec, fmt.Sprintf(format, args...))
	}
	wholeMillis := func(name string, d time.Duration) error {
		if d <= 0 {
			return bad("%s must be positive, got %v", name, d)
		}
		if d%time.Millisecond != 0 {
			return bad("%s must be a whole number of milliseconds, got %v", name, d)
		}
		return nil
	}
	zero := func(name string, d time.Duration) error {
		if d != 0 {
			return bad("%s is not used by %s windows, got %v", name, s.Kind, d)
		}
		return nil
	}
	var errs []error
	switch s.Kind {
	case Tumbling:
		errs = append(errs, wholeMillis("Size", s.Size), zero("Slide", s.Slide), zero("Gap", s.Gap))
	case Sliding:
		errs = append(errs, wholeMillis("Size", s.Size), wholeMillis("Slide", s.Slide), zero("Gap", s.Gap))
		if s.Size > 0 && s.Slide > 0 {
			switch {
			case s.Size%s.Slide != 0:
				errs = append(errs, bad("Size %v must be a multiple of Slide %v", s.Size, s.Slide))
			case s.Size/s.Slide > MaxWindowsPerElement:
				errs = append(errs, bad("Size/Slide is %d, more than %d windows per element", s.Size/s.Slide, MaxWindowsPerElement))
			}
		}
	case Session:
		errs = append(errs, wholeMillis("Gap", s.Gap), zero("Size", s.Size), zero("Slide", s.Slide))
	case Global:
		errs = append(errs, zero("Size", s.Size), zero("Slide", s.Slide), zero("Gap", s.Gap))
		if s.EarlyEvery <= 0 && s.EarlyCount <= 0 {
			errs = append(errs, bad("a global window never ends: it needs an early trigger (EarlyEvery or EarlyCount)"))
		}
		if s.OnTime {
			errs = append(errs, bad("OnTime: a global window never ends, so it has no ON_TIME pane"))
		}
		if s.AllowedLateness != 0 || s.LateEach || s.LateEvery != 0 {
			errs = append(errs, bad("AllowedLateness, LateEach, LateEvery: nothing is late in a global window"))
		}
	default:
		errs = append(errs, bad("Kind: unknown window kind %d", s.Kind))
	}
	if s.Kind != Global && s.Kind >= Tumbling && s.Kind <= Global && !s.OnTime {
		errs = append(errs, bad("OnTime must be true for %s windows: the ON_TIME pane is how a window completes", s.Kind))
	}
	if s.EarlyEvery < 0 {
		errs = append(errs, bad("EarlyEvery must not be negative, got %v", s.EarlyEvery))
	}
	if s.EarlyCount < 0 {
		errs = append(errs, bad("EarlyCount must not be negative, got %d", s.EarlyCount))
	}
	if s.LateEvery < 0 {
		errs = append(errs, bad("LateEvery must not be negative, got %v", s.LateEvery))
	}
	if s.AllowedLateness < 0 {
		errs = append(errs, bad("AllowedLateness must not be negative, got %v", s.AllowedLateness))
	}
	if s.Kind != Global && (s.LateEach || s.LateEvery > 0) && s.AllowedLateness == 0 {
		errs = append(errs, bad("LateEach/LateEvery: a late trigger can never fire with AllowedLateness 0, which drops every late element"))
	}
	if s.Accumulation > Retracting {
		errs = append(errs, bad("Accumulation: unknown accumulation %d", s.Accumulation))
	}
	return errors.Join(errs...)
}

// Window is the interval [Start, End) of event time. Its maximum timestamp,
// the last instant it holds at millisecond precision, is End-1ms.
type Window struct {
	Start, End time.Time
}

// MaxTimestamp is the window's last millisecond: End-1ms.
func (w Window) MaxTimestamp() time.Time { return w.End.Add(-time.Millisecond) }

func (w Window) String() string {
	return "[" + w.Start.UTC().Format(timeLayout) + ", " + w.End.UTC().Format(timeLayout) + ")"
}

// timeLayout is RFC 3339 with milliseconds, the precision of window bounds.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// The global window spans every time pkg/state can store a timer for, at
// millisecond precision.
var (
	GlobalStart = time.UnixMilli(math.MinInt64 / int64(time.Millisecond)).UTC()
	GlobalEnd   = time.UnixMilli(math.MaxInt64 / int64(time.Millisecond)).UTC()
)

// span is a window in Unix milliseconds: [start, end).
type span struct{ start, end int64 }

var globalSpan = span{GlobalStart.UnixMilli(), GlobalEnd.UnixMilli()}

func (s span) window() Window {
	return Window{Start: time.UnixMilli(s.start).UTC(), End: time.UnixMilli(s.end).UTC()}
}

// maxTs is the window's maximum timestamp, End-1ms.
func (s span) maxTs() time.Time { return time.UnixMilli(s.end - 1).UTC() }

func (s span) overlaps(o span) bool { return s.start < o.end && o.start < s.end }
func (s span) covers(o span) bool   { return s.start <= o.start && o.end <= s.end }

func (s span) union(o span) span { return span{min(s.start, o.start), max(s.end, o.end)} }

// eventMillis is the record's event time in Unix milliseconds, truncated
// toward the past: windows see event time at millisecond precision.
func eventMillis(t time.Time) (int64, error) {
	if t.IsZero() || t.Before(GlobalStart) || !t.Before(GlobalEnd) {
		return 0, fmt.Errorf("%w: %s", ErrEventTime, t.UTC().Format(time.RFC3339Nano))
	}
	return t.UnixMilli(), nil
}

// floorDiv is a/b rounded toward negative infinity, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// assign appends to dst the windows an element at ts (Unix ms) belongs to, in
// ascending start order. For sessions it is the element's own proto-window
// [ts, ts+Gap), before merging.
func (s Spec) assign(dst []span, ts int64) []span {
	const ms = int64(time.Millisecond)
	switch s.Kind {
	case Tumbling:
		size := int64(s.Size) / ms
		start := floorDiv(ts, size) * size
		return append(dst, span{start, start + size})
	case Sliding:
		size, slide := int64(s.Size)/ms, int64(s.Slide)/ms
		last := floorDiv(ts, slide) * slide
		for start := last - size + slide; start <= last; start += slide {
			dst = append(dst, span{start, start + size})
		}
		return dst
	case Session:
		return append(dst, span{ts, ts + int64(s.Gap)/ms})
	}
	return append(dst, globalSpan)
}

// Assign returns the windows an element with event time t belongs to, in
// ascending start order; for sessions, the element's own window [t, t+Gap)
// before it merges with others. The spec must be valid.
func (s Spec) Assign(t time.Time) ([]Window, error) {
	ts, err := eventMillis(t)
	if err != nil {
		return nil, err
	}
	spans := s.assign(nil, ts)
	out := make([]Window, len(spans))
	for i, sp := range spans {
		out[i] = sp.window()
	}
	return out, nil
}

// gcTime is the instant from which window sp is expired: its maximum
// timestamp plus the allowed lateness. The window's state is cleared when the
// watermark reaches it, and an element whose every window is expired is
// dropped.
func (s Spec) gcTime(sp span) time.Time { return sp.maxTs().Add(s.AllowedLateness) }

// expired reports whether window sp is past its allowed lateness under
// watermark wm (zero: no watermark yet).
func (s Spec) expired(sp span, wm time.Time) bool {
	return s.Kind != Global && !wm.IsZero() && !wm.Before(s.gcTime(sp))
}

// late reports whether the watermark has reached sp's maximum timestamp, so
// that its ON_TIME moment has passed.
func (s Spec) late(sp span, wm time.Time) bool {
	return s.Kind != Global && !wm.IsZero() && !wm.Before(sp.maxTs())
}

// interval is the processing-time trigger interval of a window in the early
// (late=false) or late phase; zero if none.
func (s Spec) interval(late bool) time.Duration {
	if late {
		return s.LateEvery
	}
	return s.EarlyEvery
}
