package window

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
)

func rec(id, key string, t time.Duration, value string) *record.Record {
	return &record.Record{Kind: record.Data, ID: id, Key: []byte(key), Time: epoch(t), Value: []byte(value)}
}

// TestSideOutputReason checks that a dropped record's reason names the
// window, when it expired and the watermark.
func TestSideOutputReason(t *testing.T) {
	spec := Spec{Kind: Tumbling, Size: 10 * time.Second, OnTime: true, AllowedLateness: 5 * time.Second, LateEach: true}
	d := newDriver(t, spec, Count())
	err := d.run([]Step{
		{Record: rec("r1", "a", 2*time.Second, `{}`)},
		{Watermark: epoch(14999 * time.Millisecond)},
		{Record: rec("r2", "a", 3*time.Second, `{}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if side := d.side(); len(side) != 1 || side[0].ID != "r2" {
		t.Fatalf("side output %v, want r2", side)
	}
	reason := d.reason("r2")
	for _, want := range []string{
		"late beyond allowed lateness 5s",
		"event time 1970-01-01T00:00:03Z",
		"window [1970-01-01T00:00:00.000Z, 1970-01-01T00:00:10.000Z)",
		"expired at 1970-01-01T00:00:14.999Z",
		"watermark 1970-01-01T00:00:14.999Z",
	} {
		if !strings.Contains(reason, want) {
			t.Errorf("reason %q does not say %q", reason, want)
		}
	}
}

// TestPoisonWritesNothing checks that a record the aggregator rejects fails
// with ErrValue before any state, timer or output is written, so the
// runtime can dead-letter it and commit the rest of the step.
func TestPoisonWritesNothing(t *testing.T) {
	for _, spec := range []Spec{
		{Kind: Sliding, Size: 10 * time.Second, Slide: 5 * time.Second, OnTime: true},
		{Kind: Session, Gap: time.Second, OnTime: true, EarlyEvery: time.Second},
	} {
		d := newDriver(t, spec, Sum("n"))
		if err := d.run([]Step{{Record: rec("r1", "a", time.Second, `{"n":1}`)}}); err != nil {
			t.Fatal(err)
		}
		before := d.h.Store().Stats()
		emitted := len(d.h.Out) + len(d.h.Side)
		err := d.h.Process(*rec("r2", "a", 1500*time.Millisecond, `{"n":"x"}`))
		if !errors.Is(err, ErrValue) || len(d.h.Dead) != 1 {
			t.Errorf("%s: Process(poison) = %v, want ErrValue as poison", spec.Kind, err)
		}
		// The step committed what the operator wrote: it must be nothing.
		if len(d.h.Out)+len(d.h.Side) != emitted {
			t.Errorf("%s: poison emitted %d records", spec.Kind, len(d.h.Out)+len(d.h.Side)-emitted)
		}
		if err := d.checkTimers(map[string]bool{"a": true}); err != nil {
			t.Error(err)
		}
		if after := d.h.Store().Stats(); after.Timers != before.Timers || after.Keys[testFamily] != before.Keys[testFamily] {
			t.Errorf("%s: poison changed state: %+v, then %+v", spec.Kind, before, after)
		}
		if err := d.run([]Step{{Watermark: epoch(time.Hour)}}); err != nil {
			t.Fatal(err)
		}
		for _, p := range d.panes() {
			if !strings.Contains(string(p.Value), `"sum":1,"count":1`) {
				t.Errorf("%s: pane %s counts the poison record", spec.Kind, formatRecord(p))
			}
		}
	}
	d := newDriver(t, Spec{Kind: Tumbling, Size: time.Second, OnTime: true}, Count())
	if err := d.run([]Step{{Record: &record.Record{ID: "r0", Key: []byte("a")}}}); !errors.Is(err, ErrEventTime) {
		t.Errorf("record without event time: %v, want ErrEventTime", err)
	}
}

// TestTimerAheadOfWatermark fires an event-time timer while the Env reports
// an older watermark: the due timer itself proves the watermark reached it.
func TestTimerAheadOfWatermark(t *testing.T) {
	spec := Spec{Kind: Tumbling, Size: 10 * time.Second, OnTime: true}
	d := newDriver(t, spec, Count())
	if err := d.run([]Step{{Record: rec("r1", "a", time.Second, `{}`)}}); err != nil {
		t.Fatal(err)
	}
	timers, err := d.h.Store().DueTimers(state.EventTime, epoch(time.Hour), 10)
	if err != nil || len(timers) != 1 {
		t.Fatalf("timers %v, %v", timers, err)
	}
	if err := d.h.FireTimer(timers[0]); err != nil { // the watermark is still zero
		t.Fatal(err)
	}
	if p := d.panes(); len(p) != 1 || formatRecord(p[0]) != `a [0s,10s) #0 ON_TIME final v1 insert {"count":1}` {
		t.Fatalf("panes %v", render(p, nil))
	}
}

// TestStaleAndForeignTimers: a timer of a window that is gone does nothing;
// a timer the operator cannot have set is an error.
func TestStaleAndForeignTimers(t *testing.T) {
	spec := Spec{Kind: Session, Gap: time.Second, OnTime: true, EarlyEvery: time.Second}
	d := newDriver(t, spec, Count())
	stale := state.Timer{Domain: state.ProcessingTime, Time: d.h.Now(), Key: []byte("a"), Name: timerName(span{0, 1000}, purposeTrigger)}
	if err := d.h.FireTimer(stale); err != nil {
		t.Errorf("stale timer: %v", err)
	}
	foreign := state.Timer{Domain: state.ProcessingTime, Time: d.h.Now(), Key: []byte("a"), Name: "ping"}
	if err := d.h.FireTimer(foreign); !errors.Is(err, ErrCorrupt) {
		t.Errorf("foreign timer: %v, want ErrCorrupt", err)
	}
	if len(d.panes()) != 0 {
		t.Fatalf("panes %v", d.panes())
	}
}

// TestStateIsCollected checks that once the watermark passes every window's
// GC time, a script leaves no window state and no timer behind.
func TestStateIsCollected(t *testing.T) {
	for _, sc := range loadScripts(t) {
		if sc.spec.Kind == Global {
			continue
		}
		d := newDriver(t, sc.spec, sc.agg)
		if err := d.run(append(sc.steps, Step{Advance: time.Hour, Watermark: epoch(1000 * time.Hour)})); err != nil {
			t.Fatal(err)
		}
		if st := d.h.Store().Stats(); st.Timers != 0 || st.Keys[testFamily] != 0 {
			t.Errorf("%s: %d timers and %d keys left", sc.name, st.Timers, st.Keys[testFamily])
		}
	}
}
