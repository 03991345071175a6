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
