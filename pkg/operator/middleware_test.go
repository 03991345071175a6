package operator_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/operator/operatortest"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
)

var errUndecodable = errors.New("undecodable")

// counter counts records per key and emits the count when the watermark
// passes the record's time; it keeps state, sets timers and versions its
// state, all of which middleware must keep visible to the runtime.
type counter struct{}

func (counter) Families() []string { return []string{"counts"} }
func (counter) SchemaVersion() int { return 3 }

func (counter) Process(env operator.Env, r record.Record) error {
	if string(r.Value) == "bad" {
		return fmt.Errorf("record %s: %w", r.ID, errUndecodable)
	}
	n, _, err := env.Value("counts").Get()
	if err != nil {
		return err
	}
	if err := env.Value("counts").Set(append(n, '+')); err != nil {
		return err
	}
	return env.SetTimer(state.EventTime, r.Time, "emit")
}

func (counter) OnTimer(env operator.Env, t state.Timer) error {
	n, _, err := env.Value("counts").Get()
	if err != nil {
		return err
	}
	return env.Emit(record.Record{ID: string(env.Key()), Key: env.Key(), Time: t.Time, Value: n})
}

func rec(id, key string, sec int64, value string) record.Record {
	return record.Record{Kind: record.Data, ID: id, Key: []byte(key), Time: time.Unix(sec, 0).UTC(), Value: []byte(value),
		At: record.Coordinate{Stream: "IN", Subject: "in.0", Seq: uint64(sec)}}
}

func TestMiddlewareKeepsWhatTheRuntimeAsks(t *testing.T) {
	op := operator.Chain(counter{},
		operator.PoisonOn("payload", errUndecodable),
		operator.Rekey(func(r record.Record) ([]byte, error) { return append([]byte("by-"), r.Key...), nil }))
	if su, ok := op.(operator.StateUser); !ok || len(su.Families()) != 1 {
		t.Fatalf("wrapped operator hides its state families")
	}
	if v, ok := op.(operator.Versioned); !ok || v.SchemaVersion() != 3 {
		t.Fatalf("wrapped operator hides its schema version")
	}
	h := operatortest.New(t, op, operatortest.Options{
		Families: []state.Family{{Name: "counts", Kind: state.KindValue, MaxKeys: 100}}})
	defer h.Close()
	h.MustProcess(rec("a1", "a", 1, "x"))
	h.MustProcess(rec("a2", "a", 2, "x"))
	var pe *operator.PoisonError
	if err := h.Process(rec("a3", "a", 3, "bad")); !errors.As(err, &pe) || pe.Field != "payload" || len(h.Dead) != 1 {
		t.Fatalf("undecodable record: %v, dead %v; want poison naming the payload", err, h.Dead)
	}
	if err := h.Advance(time.Unix(10, 0)); err != nil {
		t.Fatal(err)
	}
	if len(h.Out) != 2 || string(h.Out[1].Key) != "by-a" || string(h.Out[1].Value) != "++" {
		t.Fatalf("output %+v, want the counts re-keyed by the middleware", h.Out)
	}
}

func TestPoisonOnLeavesOtherErrors(t *testing.T) {
	boom := errors.New("disk on fire")
	op := operator.Chain(operator.Func(func(operator.Env, record.Record) error { return boom }),
		operator.PoisonOn("payload", errUndecodable))
	h := operatortest.New(t, op, operatortest.Options{})
	defer h.Close()
	var pe *operator.PoisonError
	if err := h.Process(rec("a", "a", 1, "x")); !errors.Is(err, boom) || errors.As(err, &pe) {
		t.Fatalf("err = %v, want the error as it was", err)
	}
}
