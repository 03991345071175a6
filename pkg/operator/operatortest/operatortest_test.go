package operatortest_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/operator/operatortest"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
)

// laterOp sets a timer "a" per record at the record's time; each a's
// callback sets a "c" one second later, before the next record's a.
type laterOp struct{}

func (laterOp) Process(c operator.Env, r record.Record) error {
	return c.SetTimer(state.EventTime, r.Time, "a")
}

func (laterOp) OnTimer(c operator.Env, t state.Timer) error {
	if t.Name == "a" {
		if err := c.SetTimer(state.EventTime, t.Time.Add(time.Second), "c"); err != nil {
			return err
		}
	}
	return c.Emit(record.Record{ID: t.Name + "-" + string(t.Key), Key: t.Key, Time: t.Time})
}

// TestATimerSetWhileFiringFiresInTimeOrder: as the runtime does, a timer
// a callback sets before the others due fires before them.
func TestATimerSetWhileFiringFiresInTimeOrder(t *testing.T) {
	h := operatortest.New(t, laterOp{}, operatortest.Options{})
	defer h.Close()
	base := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	var want []string
	for i := range 100 {
		k := fmt.Sprintf("k%d", i)
		h.MustProcess(record.Record{ID: k, Key: []byte(k), Time: base.Add(time.Duration(2*i) * time.Second)})
		want = append(want, "a-"+k, "c-"+k)
	}
	if err := h.Advance(base.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range h.Out {
		got = append(got, r.ID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("fired in the order %v, want %v", got, want)
	}
}

// cancelOp: a's callback cancels b, the next timer, and sets x between b
// and c.
type cancelOp struct{ base time.Time }

func (o cancelOp) Process(c operator.Env, r record.Record) error {
	if string(r.Key) == "k0" {
		if err := c.SetTimer(state.EventTime, o.base.Add(time.Second), "a"); err != nil {
			return err
		}
		return c.SetTimer(state.EventTime, o.base.Add(2*time.Second), "b")
	}
	return c.SetTimer(state.EventTime, o.base.Add(3*time.Second), "c")
}

func (o cancelOp) OnTimer(c operator.Env, t state.Timer) error {
	if t.Name == "a" {
		if err := c.DeleteTimer(state.EventTime, o.base.Add(2*time.Second), "b"); err != nil {
			return err
		}
		if err := c.SetTimer(state.EventTime, o.base.Add(2500*time.Millisecond), "x"); err != nil {
			return err
		}
	}
	return c.Emit(record.Record{ID: t.Name, Key: t.Key, Time: t.Time})
}

// TestATimerSetBesideACancelledOneFiresInTimeOrder: a callback that
// cancels the next timer of the list and sets one before the timer after
// it has the new one fire first (a review found it fired after).
func TestATimerSetBesideACancelledOneFiresInTimeOrder(t *testing.T) {
	base := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	h := operatortest.New(t, cancelOp{base: base}, operatortest.Options{})
	defer h.Close()
	h.MustProcess(record.Record{ID: "0", Key: []byte("k0"), Time: base})
	h.MustProcess(record.Record{ID: "1", Key: []byte("k1"), Time: base})
	if err := h.Advance(base.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range h.Out {
		got = append(got, r.ID)
	}
	if want := []string{"a", "x", "c"}; !slices.Equal(got, want) {
		t.Fatalf("fired %v, want %v", got, want)
	}
}
