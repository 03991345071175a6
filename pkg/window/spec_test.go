package window

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestSpecValidate(t *testing.T) {
	const s = time.Second
	tumbling := Spec{Kind: Tumbling, Size: 10 * s, OnTime: true}
	with := func(f func(*Spec)) Spec {
		sp := tumbling
		f(&sp)
		return sp
	}
	for _, tc := range []struct {
		name string
		spec Spec
		want string // "" when valid, else a substring of the error
	}{
		{"tumbling", tumbling, ""},
		{"tumbling with early and late triggers", with(func(sp *Spec) {
			sp.EarlyCount, sp.EarlyEvery, sp.LateEach, sp.LateEvery, sp.AllowedLateness = 3, s, true, s, time.Minute
		}), ""},
		{"lateness without late trigger", with(func(sp *Spec) { sp.AllowedLateness = time.Minute }), ""},
		{"sliding", Spec{Kind: Sliding, Size: 10 * s, Slide: 2 * s, OnTime: true, Accumulation: Retracting}, ""},
		{"sliding of one slide", Spec{Kind: Sliding, Size: s, Slide: s, OnTime: true}, ""},
		{"session", Spec{Kind: Session, Gap: 30 * s, OnTime: true, Accumulation: Accumulating}, ""},
		{"global with count", Spec{Kind: Global, EarlyCount: 10}, ""},
		{"global with interval", Spec{Kind: Global, EarlyEvery: s}, ""},

		{"no kind", Spec{Size: s, OnTime: true}, "Kind"},
		{"unknown kind", Spec{Kind: 9, OnTime: true}, "Kind"},
		{"tumbling without size", with(func(sp *Spec) { sp.Size = 0 }), "Size must be positive"},
		{"tumbling with sub-millisecond size", with(func(sp *Spec) { sp.Size = 1500 * time.Microsecond }), "whole number of milliseconds"},
		{"tumbling with slide", with(func(sp *Spec) { sp.Slide = s }), "Slide is not used"},
		{"tumbling with gap", with(func(sp *Spec) { sp.Gap = s }), "Gap is not used"},
		{"sliding without slide", Spec{Kind: Sliding, Size: 10 * s, OnTime: true}, "Slide must be positive"},
		{"sliding size not a multiple", Spec{Kind: Sliding, Size: 10 * s, Slide: 3 * s, OnTime: true}, "multiple of Slide"},
		{"sliding with too many windows", Spec{Kind: Sliding, Size: time.Hour, Slide: time.Millisecond, OnTime: true}, "windows per element"},
		{"session without gap", Spec{Kind: Session, OnTime: true}, "Gap must be positive"},
		{"session with size", Spec{Kind: Session, Gap: s, Size: s, OnTime: true}, "Size is not used"},
		{"global without early trigger", Spec{Kind: Global}, "needs an early trigger"},
		{"global with on-time", Spec{Kind: Global, EarlyCount: 1, OnTime: true}, "OnTime"},
		{"global with lateness", Spec{Kind: Global, EarlyCount: 1, AllowedLateness: s}, "nothing is late"},
		{"global with late trigger", Spec{Kind: Global, EarlyCount: 1, LateEach: true}, "nothing is late"},
		{"global with size", Spec{Kind: Global, EarlyCount: 1, Size: s}, "Size is not used"},
		{"no on-time", with(func(sp *Spec) { sp.OnTime = false }), "OnTime must be true"},
		{"negative early interval", with(func(sp *Spec) { sp.EarlyEvery = -s }), "EarlyEvery"},
		{"negative early count", with(func(sp *Spec) { sp.EarlyCount = -1 }), "EarlyCount"},
		{"negative late interval", with(func(sp *Spec) { sp.LateEvery = -s; sp.AllowedLateness = s }), "LateEvery must not be negative"},
		{"negative lateness", with(func(sp *Spec) { sp.AllowedLateness = -s }), "AllowedLateness"},
		{"late each without lateness", with(func(sp *Spec) { sp.LateEach = true }), "can never fire"},
		{"late interval without lateness", with(func(sp *Spec) { sp.LateEvery = s }), "can never fire"},
		{"unknown accumulation", with(func(sp *Spec) { sp.Accumulation = 3 }), "Accumulation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.spec.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate(%+v) = %v, want nil", tc.spec, err)
			case tc.want != "" && err == nil:
				t.Fatalf("Validate(%+v) = nil, want an error about %q", tc.spec, tc.want)
			case tc.want != "" && (!errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate(%+v) = %v, want ErrInvalidSpec about %q", tc.spec, err, tc.want)
			}
			if _, nerr := New(tc.spec, Count(), "w"); (nerr == nil) != (err == nil) {
				t.Fatalf("New and Validate disagree: %v, %v", nerr, err)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	spec := Spec{Kind: Tumbling, Size: time.Second, OnTime: true}
	if _, err := New(spec, nil, "w"); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("nil aggregator: %v", err)
	}
	if _, err := New(spec, Count(), ""); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("empty family: %v", err)
	}
	op, err := New(spec, Count(), "w")
	if err != nil {
		t.Fatal(err)
	}
	if f := op.Families(); len(f) != 1 || f[0] != "w" {
		t.Errorf("Families() = %v", f)
	}
	if op.Spec() != spec {
		t.Errorf("Spec() = %+v", op.Spec())
	}
}

func TestAssign(t *testing.T) {
	ms := func(n int64) time.Time { return time.UnixMilli(n).UTC() }
	str := func(ws []Window) string {
		var parts []string
		for _, w := range ws {
			parts = append(parts, fmt.Sprintf("[%d,%d)", w.Start.UnixMilli(), w.End.UnixMilli()))
		}
		return strings.Join(parts, " ")
	}
	for _, tc := range []struct {
		spec Spec
		at   time.Time
		want string
	}{
		{Spec{Kind: Tumbling, Size: 10 * time.Millisecond}, ms(0), "[0,10)"},
		{Spec{Kind: Tumbling, Size: 10 * time.Millisecond}, ms(9), "[0,10)"},
		{Spec{Kind: Tumbling, Size: 10 * time.Millisecond}, ms(10), "[10,20)"},
		{Spec{Kind: Tumbling, Size: 10 * time.Millisecond}, ms(-1), "[-10,0)"},
		{Spec{Kind: Tumbling, Size: 10 * time.Millisecond}, ms(-10), "[-10,0)"},
		{Spec{Kind: Tumbling, Size: 10 * time.Millisecond}, ms(-11), "[-20,-10)"},
		// Sub-millisecond event times are truncated toward the past.
		{Spec{Kind: Tumbling, Size: 10 * time.Millisecond}, ms(10).Add(-time.Nanosecond), "[0,10)"},
		{Spec{Kind: Tumbling, Size: 10 * time.Millisecond}, ms(0).Add(-time.Nanosecond), "[-10,0)"},
		{Spec{Kind: Sliding, Size: 10 * time.Millisecond, Slide: 5 * time.Millisecond}, ms(7), "[0,10) [5,15)"},
		{Spec{Kind: Sliding, Size: 10 * time.Millisecond, Slide: 5 * time.Millisecond}, ms(5), "[0,10) [5,15)"},
		{Spec{Kind: Sliding, Size: 10 * time.Millisecond, Slide: 5 * time.Millisecond}, ms(-3), "[-10,0) [-5,5)"},
		{Spec{Kind: Sliding, Size: 6 * time.Millisecond, Slide: 2 * time.Millisecond}, ms(4), "[0,6) [2,8) [4,10)"},
		{Spec{Kind: Session, Gap: 3 * time.Millisecond}, ms(4), "[4,7)"},
		{Spec{Kind: Global, EarlyCount: 1}, ms(4), fmt.Sprintf("[%d,%d)", GlobalStart.UnixMilli(), GlobalEnd.UnixMilli())},
	} {
		ws, err := tc.spec.Assign(tc.at)
		if err != nil {
			t.Fatal(err)
		}
		if got := str(ws); got != tc.want {
			t.Errorf("%s windows of %s: %s, want %s", tc.spec.Kind, tc.at.Format(time.RFC3339Nano), got, tc.want)
		}
	}
	if _, err := (Spec{Kind: Tumbling, Size: time.Second}).Assign(time.Time{}); !errors.Is(err, ErrEventTime) {
		t.Errorf("zero event time: %v, want ErrEventTime", err)
	}
}

func TestWindowBounds(t *testing.T) {
	w := Window{Start: time.UnixMilli(0).UTC(), End: time.UnixMilli(10_000).UTC()}
	if got := w.MaxTimestamp(); !got.Equal(time.UnixMilli(9_999)) {
		t.Errorf("MaxTimestamp = %v", got)
	}
	if got, want := w.String(), "[1970-01-01T00:00:00.000Z, 1970-01-01T00:00:10.000Z)"; got != want {
		t.Errorf("String = %s, want %s", got, want)
	}
	sp := span{0, 10_000}
	spec := Spec{Kind: Tumbling, Size: 10 * time.Second, OnTime: true, AllowedLateness: 5 * time.Second}
	gc := time.UnixMilli(14_999)
	for _, tc := range []struct {
		wm            time.Time
		late, expired bool
	}{
		{time.Time{}, false, false},
		{time.UnixMilli(9_999).Add(-time.Nanosecond), false, false},
		{time.UnixMilli(9_999), true, false},
		{gc.Add(-time.Nanosecond), true, false}, // just inside the allowed lateness
		{gc, true, true},                        // just outside
	} {
		if got := spec.late(sp, tc.wm); got != tc.late {
			t.Errorf("late under %v = %v", tc.wm, got)
		}
		if got := spec.expired(sp, tc.wm); got != tc.expired {
			t.Errorf("expired under %v = %v", tc.wm, got)
		}
	}
}

func TestKindAndAccumulationText(t *testing.T) {
	for _, k := range []Kind{Tumbling, Sliding, Session, Global} {
		b, _ := k.MarshalText()
		var got Kind
		if err := got.UnmarshalText(b); err != nil || got != k {
			t.Errorf("%v: round trip gave %v, %v", k, got, err)
		}
	}
	for _, a := range []Accumulation{Discarding, Accumulating, Retracting} {
		b, _ := a.MarshalText()
		var got Accumulation
		if err := got.UnmarshalText(b); err != nil || got != a {
			t.Errorf("%v: round trip gave %v, %v", a, got, err)
		}
	}
	var k Kind
	if err := k.UnmarshalText([]byte("hopping")); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("unknown kind: %v", err)
	}
	var a Accumulation
	if err := a.UnmarshalText([]byte("summing")); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("unknown accumulation: %v", err)
	}
	if s := Kind(0).String(); s != "Kind(0)" {
		t.Errorf("Kind(0).String() = %s", s)
	}
}
