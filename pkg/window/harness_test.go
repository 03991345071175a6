package window

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/pkg/operator/operatortest"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
)

const testFamily = "windows"

// driver runs an Operator over a script with operatortest, the way the
// runtime does: one committed step per record, due event-time timers fired
// after each watermark move and due processing-time timers after each clock
// advance.
type driver struct {
	tb testing.TB
	h  *operatortest.Harness
	op *Operator
}

func newDriver(tb testing.TB, spec Spec, agg Aggregator) *driver {
	tb.Helper()
	op, err := New(spec, agg, testFamily)
	if err != nil {
		tb.Fatal(err)
	}
	h := operatortest.New(tb, op, operatortest.Options{
		Families:  []state.Family{{Name: testFamily, Kind: state.KindMap, MaxKeys: 1 << 40}},
		KeyGroups: 1,
		Now:       time.Unix(1<<31, 0).UTC(),
	})
	tb.Cleanup(func() { _ = h.Close() })
	return &driver{tb: tb, h: h, op: op}
}

func recordKey(r record.Record) []byte { return r.Key }

// panes and side are what committed steps emitted and side output.
func (d *driver) panes() []record.Record { return d.h.Out }

func (d *driver) side() []record.Record {
	out := make([]record.Record, len(d.h.Side))
	for i, s := range d.h.Side {
		out[i] = s.Record
	}
	return out
}

// reason is the side-output reason of a record.
func (d *driver) reason(id string) string {
	for _, s := range d.h.Side {
		if s.Record.ID == id {
			return s.Reason
		}
	}
	return ""
}

func (d *driver) step(st Step) error {
	if st.Advance > 0 {
		if err := d.h.Tick(st.Advance); err != nil {
			return err
		}
	}
	if st.Record != nil {
		if err := d.h.Process(*st.Record); err != nil {
			return err
		}
	}
	if !st.Watermark.IsZero() {
		if err := d.h.Advance(st.Watermark); err != nil {
			return err
		}
	}
	return nil
}

func (d *driver) run(script []Step) error {
	keys := map[string]bool{}
	for i, st := range script {
		if err := d.step(st); err != nil {
			return fmt.Errorf("step %d: %w", i, err)
		}
		if st.Record != nil {
			keys[string(recordKey(*st.Record))] = true
		}
		if err := d.checkTimers(keys); err != nil {
			return fmt.Errorf("after step %d: %w", i, err)
		}
	}
	return nil
}

// checkTimers checks that the registered timers are exactly those the live
// windows of keys need: GC at the GC time, ON_TIME at the maximum timestamp
// before the ON_TIME pane (with allowed lateness), and the interval trigger
// at its deadline while armed. No timer outlives its window.
func (d *driver) checkTimers(keys map[string]bool) error {
	want := map[string]bool{}
	b := d.h.Store().NewBatch()
	defer b.Close()
	spec := d.op.spec
	for k := range keys {
		var ferr error
		err := b.Scope(0, []byte(k), d.h.Now()).Map(testFamily).Range(func(sk, v []byte) bool {
			switch {
			case d.op.sliced:
				ferr = wantSliceTimers(spec, k, sk, v, want)
				return ferr == nil
			case spec.Kind == Session:
				if !bytes.Equal(sk, sessionSubKey) {
					ferr = fmt.Errorf("sessions under sub-key %x", sk)
					return false
				}
				list, err := decodeSessions(v)
				if err == nil && len(list) == 0 {
					err = fmt.Errorf("key %q keeps an entry without sessions", k)
				}
				for _, s := range list {
					wantWindowTimers(spec, k, s.sp, &s.ws, want)
				}
				ferr = err
				return err == nil
			}
			sp, err := parseSubKey(sk)
			if err != nil {
				ferr = err
				return false
			}
			ws, err := decodeWinState(v)
			if err != nil {
				ferr = err
				return false
			}
			wantWindowTimers(spec, k, sp, &ws, want)
			return true
		})
		if err != nil || ferr != nil {
			return errors.Join(err, ferr)
		}
	}
	b.Close()
	got := map[string]bool{}
	for _, dom := range []state.Domain{state.EventTime, state.ProcessingTime} {
		ts, err := d.h.Store().DueTimers(dom, GlobalEnd, 1<<20)
		if err != nil {
			return err
		}
		for _, t := range ts {
			got[fmt.Sprintf("%s %s %d %s", t.Key, dom, t.Time.UnixNano(), t.Name)] = true
		}
	}
	for t := range got {
		if !want[t] {
			return fmt.Errorf("stray timer %s", t)
		}
	}
	for t := range want {
		if !got[t] {
			return fmt.Errorf("missing timer %s", t)
		}
	}
	return nil
}

// wantWindowTimers adds the timers window sp of key needs to want: GC at
// the GC time, ON_TIME at the maximum timestamp before the ON_TIME pane
// (with allowed lateness), and the interval trigger at its deadline while
// armed.
func wantWindowTimers(spec Spec, key string, sp span, ws *winState, want map[string]bool) {
	add := func(dom state.Domain, at time.Time, purpose byte) {
		want[fmt.Sprintf("%s %s %d %s", key, dom, at.UnixNano(), timerName(sp, purpose))] = true
	}
	if spec.Kind != Global {
		add(state.EventTime, spec.gcTime(sp), purposeGC)
		if !ws.late && spec.AllowedLateness > 0 {
			add(state.EventTime, sp.maxTs(), purposeOnTime)
		}
	}
	if dl, ok := spec.deadline(ws); ok {
		add(state.ProcessingTime, dl, purposeTrigger)
	}
}

// wantSliceTimers adds the timers a key's slices need to want: the GC
// timer of every window that holds a live slice and has not fired.
func wantSliceTimers(spec Spec, key string, sk, v []byte, want map[string]bool) error {
	if !bytes.Equal(sk, sliceSubKey) {
		return fmt.Errorf("sliced state under sub-key %x", sk)
	}
	ks, err := decodeKeySlices(v)
	if err != nil {
		return err
	}
	if len(ks.slices) == 0 {
		return fmt.Errorf("key %q keeps an entry without slices", key)
	}
	size, slide := spec.Size.Milliseconds(), spec.Slide.Milliseconds()
	for _, s := range ks.slices {
		for start := s.start - size + slide; start <= s.start; start += slide {
			sp := span{start, start + size}
			if !ks.hasFired || sp.end > ks.fired {
				want[fmt.Sprintf("%s %s %d %s", key, state.EventTime, spec.gcTime(sp).UnixNano(), timerName(sp, purposeGC))] = true
			}
		}
	}
	return nil
}

// runBoth runs script through the Operator and through Evaluate and fails
// the test unless they emit the same records in the same order and side
// output the same records. It returns the panes and side outputs.
func runBoth(tb testing.TB, spec Spec, agg Aggregator, script []Step) (panes, side []record.Record) {
	tb.Helper()
	want, wantSide, err := Evaluate(spec, agg, recordKey, script)
	if err != nil {
		tb.Fatalf("Evaluate: %v", err)
	}
	d := newDriver(tb, spec, agg)
	if err := d.run(script); err != nil {
		tb.Fatalf("Operator: %v", err)
	}
	if diff := diffRecords(d.panes(), want); diff != "" {
		tb.Fatalf("spec %+v, agg %s: Operator panes differ from Evaluate (- operator, + evaluate):\n%s", spec, agg.Name(), diff)
	}
	if diff := diffRecords(d.side(), wantSide); diff != "" {
		tb.Fatalf("spec %+v: Operator side output differs from Evaluate (- operator, + evaluate):\n%s", spec, diff)
	}
	for _, s := range d.h.Side {
		if s.Reason == "" {
			tb.Fatalf("side output %s without a reason", s.Record.ID)
		}
	}
	return want, wantSide
}

func sameRecord(a, b record.Record) bool {
	return a.Kind == b.Kind && a.ID == b.ID && bytes.Equal(a.Key, b.Key) && a.Time.Equal(b.Time) && bytes.Equal(a.Value, b.Value)
}

// diffRecords shows two record sequences side by side from their first
// difference; "" if they are equal.
func diffRecords(got, want []record.Record) string {
	i := 0
	for i < len(got) && i < len(want) && sameRecord(got[i], want[i]) {
		i++
	}
	if i == len(got) && i == len(want) {
		return ""
	}
	var sb strings.Builder
	for j := max(0, i-3); j < i; j++ {
		fmt.Fprintf(&sb, "  %s\n", formatRecord(want[j]))
	}
	for j := i; j < len(got) && j < i+8; j++ {
		fmt.Fprintf(&sb, "- %s\n", formatRecord(got[j]))
	}
	for j := i; j < len(want) && j < i+8; j++ {
		fmt.Fprintf(&sb, "+ %s\n", formatRecord(want[j]))
	}
	return sb.String()
}

// formatRecord renders a pane record compactly, with window bounds as
// offsets from the Unix epoch:
//
//	a [0s,10s) #1 ON_TIME final v3 insert {"count":2}
func formatRecord(r record.Record) string {
	p, err := DecodePane(r.Value)
	if err != nil {
		return "record " + r.ID
	}
	bounds := "global"
	if !p.Window.Start.Equal(GlobalStart) {
		bounds = fmt.Sprintf("[%v,%v)", offset(p.Window.Start), offset(p.Window.End))
	}
	final := ""
	if p.Info.Final {
		final = " final"
	}
	return fmt.Sprintf("%s %s #%d %s%s v%d %s %s", p.Key, bounds, p.Info.Index, p.Info.Timing, final, p.Version, p.Kind, p.Value)
}

func offset(t time.Time) time.Duration { return t.Sub(time.Unix(0, 0)) }
