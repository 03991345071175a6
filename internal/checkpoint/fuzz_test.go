package checkpoint_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/weirflow/weir/internal/checkpoint"
)

// FuzzParseAck: any bytes on the acknowledgement subject either fail to
// parse or give an Ack naming a checkpoint, an operator and an instance,
// which marshals and parses again to the same Ack.
func FuzzParseAck(f *testing.F) {
	good, _ := json.Marshal(checkpoint.Ack{Checkpoint: 3, Operator: "dedup", Instance: "0", Snapshot: time.Second, FullBytes: 10})
	f.Add(good)
	for _, s := range []string{`{}`, `{"checkpoint":1,"operator":"a.b","instance":"0"}`, `{"checkpoint":1,"operator":"a","instance":"0","upload":-1}`,
		`{"checkpoint":18446744073709551616,"operator":"a","instance":"0"}`, "{\"checkpoint\":1,\"operator\":\"a\xff\",\"instance\":\"0\"}",
		`{"checkpoint":1,"operator":"a","instance":"0","first_barrier":"2026-01-01T00:00:00+05:00"}`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := checkpoint.ParseAck(data)
		if err != nil {
			return
		}
		if a.Checkpoint == 0 || !checkpoint.ValidName(a.Operator) || !checkpoint.ValidName(a.Instance) {
			t.Fatalf("accepted %+v", a)
		}
		b, err := json.Marshal(a)
		if err != nil {
			return // a time json cannot write (a year past 9999): never sent, never read back
		}
		again, err := checkpoint.ParseAck(b)
		if err != nil || !again.FirstBarrier.Equal(a.FirstBarrier) {
			t.Fatalf("round trip of %s: %+v, %v", b, again, err)
		}
		again.FirstBarrier, a.FirstBarrier = time.Time{}, time.Time{}
		if !reflect.DeepEqual(again, a) {
			t.Fatalf("round trip changed %+v into %+v", a, again)
		}
	})
}

// FuzzParseTrigger: any bytes on the trigger subject either fail to parse
// or give a trigger with a checkpoint number and, if any, a savepoint name
// that can name one.
func FuzzParseTrigger(f *testing.F) {
	for _, s := range []string{`{"checkpoint":3,"at":"2026-12-01T12:00:00Z"}`, `{"checkpoint":4,"savepoint":"before-upgrade"}`,
		`{"checkpoint":0}`, `{"checkpoint":5,"savepoint":"a.b.>"}`, `{"checkpoint":-1}`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := checkpoint.ParseTrigger(data)
		if err != nil {
			return
		}
		if tr.Checkpoint == 0 || tr.Savepoint != "" && !checkpoint.ValidName(tr.Savepoint) {
			t.Fatalf("accepted %+v", tr)
		}
	})
}
