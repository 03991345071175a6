package window

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
)

const testFamily = "windows"

// driver runs an Operator over a script on a real Pebble store, the way the
// runtime does: one committed batch per step part, due event-time timers
// fired after each watermark move and due processing-time timers after each
// clock advance, each timer deleted before OnTimer sees it.
type driver struct {
	tb    testing.TB
	s     *state.Store
	op    *Operator
	keyOf func(record.Record) []byte
	now   time.Time
	wm    time.Time
	panes []record.Record
	side  []record.Record
	// reasons are the side-output reasons, by record ID.
	reasons map[string]string
}

func newDriver(tb testing.TB, spec Spec, agg Aggregator) *driver {
	tb.Helper()
	op, err := New(spec, agg, testFamily)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := state.Open("db", state.Options{
		FS:        vfs.NewMem(),
		KeyGroups: 1,
		NoSync:    true,
		Families:  []state.Family{{Name: testFamily, Kind: state.KindMap, MaxKeys: 1 << 40}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return &driver{tb: tb, s: s, op: op, keyOf: recordKey, now: time.Unix(1<<31, 0).UTC(), reasons: map[string]string{}}
}

func recordKey(r record.Record) []byte { return r.Key }

// env is the Env of one call, over a batch scoped to one key.
type env struct {
	d    *driver
	b    *state.Batch
	sc   state.Scope
	key  []byte
	out  *[]record.Record
	side *[]record.Record
}

func (e *env) Now() time.Time                  { return e.d.now }
func (e *env) Watermark() time.Time            { return e.d.wm }
func (e *env) Key() []byte                     { return e.key }
func (e *env) Map(family string) state.Map     { return e.sc.Map(family) }
func (e *env) Value(family string) state.Value { return e.sc.Value(family) }
func (e *env) Emit(r record.Record) error      { *e.out = append(*e.out, r); return nil }

func (e *env) SetTimer(d state.Domain, at time.Time, name string) error {
	return e.b.SetTimer(state.Timer{Domain: d, Time: at, Key: e.key, Name: name})
}

func (e *env) DeleteTimer(d state.Domain, at time.Time, name string) error {
	return e.b.DeleteTimer(state.Timer{Domain: d, Time: at, Key: e.key, Name: name})
}

func (e *env) SideOutput(r record.Record, reason string) error {
	*e.side = append(*e.side, r)
	e.d.reasons[r.ID] = reason
	return nil
}

// batch runs fn in one batch and commits it, keeping its output only then.
func (d *driver) batch(fn func(b *state.Batch, out, side *[]record.Record) error) error {
	b := d.s.NewBatch()
	defer b.Close()
	var out, side []record.Record
	if err := fn(b, &out, &side); err != nil {
		return err
	}
	if err := b.Commit(); err != nil {
		return err
	}
	d.panes = append(d.panes, out...)
	d.side = append(d.side, side...)
	return nil
}

func (d *driver) env(b *state.Batch, key []byte, out, side *[]record.Record) *env {
	return &env{d: d, b: b, sc: b.Scope(0, key, d.now), key: key, out: out, side: side}
}

// fire fires the due timers of domain d, a bounded batch at a time.
func (d *driver) fire(dom state.Domain, upTo time.Time) error {
	for range 1000 {
		timers, err := d.s.DueTimers(dom, upTo, 64)
		if err != nil || len(timers) == 0 {
			return err
		}
		err = d.batch(func(b *state.Batch, out, side *[]record.Record) error {
			for _, t := range timers {
				if err := b.DeleteTimer(t); err != nil {
					return err
				}
				if err := d.op.OnTimer(d.env(b, t.Key, out, side), t); err != nil {
					return fmt.Errorf("timer %s %s: %w", t.Domain, t.Name, err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return fmt.Errorf("%s timers keep coming due", dom)
}

func (d *driver) step(st Step) error {
	if st.Advance > 0 {
		d.now = d.now.Add(st.Advance)
		if err := d.fire(state.ProcessingTime, d.now); err != nil {
			return err
		}
	}
	if st.Record != nil {
		r := *st.Record
		err := d.batch(func(b *state.Batch, out, side *[]record.Record) error {
			return d.op.Process(d.env(b, d.keyOf(r), out, side), r)
		})
		if err != nil {
			return err
		}
	}
	if !st.Watermark.IsZero() {
		if st.Watermark.After(d.wm) {
			d.wm = st.Watermark
		}
		if err := d.fire(state.EventTime, d.wm); err != nil {
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
			keys[string(d.keyOf(*st.Record))] = true
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
	b := d.s.NewBatch()
	defer b.Close()
	spec := d.op.spec
	for k := range keys {
		var ferr error
		err := b.Scope(0, []byte(k), d.now).Map(testFamily).Range(func(sk, v []byte) bool {
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
			add := func(dom state.Domain, at time.Time, purpose byte) {
				want[fmt.Sprintf("%s %s %d %s", k, dom, at.UnixNano(), timerName(sp, purpose))] = true
			}
			if spec.Kind != Global {
				add(state.EventTime, spec.gcTime(sp), purposeGC)
				if !ws.late && spec.AllowedLateness > 0 {
					add(state.EventTime, sp.maxTs(), purposeOnTime)
				}
			}
			if dl, ok := spec.deadline(&ws); ok {
				add(state.ProcessingTime, dl, purposeTrigger)
			}
			return true
		})
		if err != nil || ferr != nil {
			return errors.Join(err, ferr)
		}
	}
	b.Close()
	got := map[string]bool{}
	for _, dom := range []state.Domain{state.EventTime, state.ProcessingTime} {
		ts, err := d.s.DueTimers(dom, GlobalEnd, 1<<20)
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
	if diff := diffRecords(d.panes, want); diff != "" {
		tb.Fatalf("spec %+v, agg %s: Operator panes differ from Evaluate (- operator, + evaluate):\n%s", spec, agg.Name(), diff)
	}
	if diff := diffRecords(d.side, wantSide); diff != "" {
		tb.Fatalf("spec %+v: Operator side output differs from Evaluate (- operator, + evaluate):\n%s", spec, diff)
	}
	if len(d.reasons) != len(d.side) {
		tb.Fatalf("%d side outputs but %d reasons", len(d.side), len(d.reasons))
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
