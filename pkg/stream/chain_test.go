package stream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/keygroup"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
)

// chainedDedup is the shipped dedup contract with tag chained into the
// dedup operator's step (operators[].before).
func chainedDedup(t *testing.T) *contracts.Contract {
	t.Helper()
	c, err := contracts.Shipped("nexmark-dedup")
	if err != nil {
		t.Fatal(err)
	}
	ops := append([]contracts.Operator(nil), c.Operators...)
	ops[0].Before = []string{"tag"}
	c.Operators = ops
	if ps := c.Lint(); len(ps) > 0 {
		t.Fatal(ps)
	}
	return c
}

// publishByID sends one event per id to the ingress partition its key
// group lies in, as a producer keyed by ID would: dedup keys its state by
// ID.
func (h *harness) publishByID(ids ...string) {
	h.t.Helper()
	l := keygroup.Layout{Groups: h.c.State.KeyGroups, Partitions: h.c.Ingress.Partitions}
	ts := time.Now().Add(-time.Minute).UnixMilli()
	for _, id := range ids {
		data := fmt.Sprintf(`{"id":%q,"key":%q,"ts":%d}`, id, id, ts)
		if _, err := h.js.Publish(context.Background(), h.c.Ingress.Subject(l.Partition([]byte(id))), []byte(data)); err != nil {
			h.t.Fatal(err)
		}
	}
}

// tagOp marks each record's value, drops the one with ID "drop", calls
// the one with ID "bad" poison, and gives the one with ID "move" another
// ID, in another partition's key groups. It ignores what Emit returns, as
// a careless operator would.
type tagOp struct{}

func (tagOp) Process(c operator.Env, r record.Record) error {
	switch r.ID {
	case "drop":
		return nil
	case "bad":
		return operator.Poison("payload.tag", errors.New("untaggable"))
	case "move":
		_ = c.Emit(record.Record{ID: movedID(r.ID), Value: append([]byte("tagged:"), r.Value...)})
		return nil
	}
	_ = c.Emit(record.Record{Value: append([]byte("tagged:"), r.Value...)})
	return nil
}

// movedID is an ID in another partition of the shipped dedup contract's
// ingress than id.
func movedID(id string) string {
	l := keygroup.Layout{Groups: keygroup.DefaultGroups, Partitions: 4}
	for i := 0; ; i++ {
		if m := fmt.Sprint("moved-", i); l.Partition([]byte(m)) != l.Partition([]byte(id)) {
			return m
		}
	}
}

// failOp keeps the records it is handed, and fails the one with ID
// "boom".
type failOp struct{ seenOp }

func (o failOp) Process(c operator.Env, r record.Record) error {
	if r.ID == "boom" {
		return errors.New("boom: the disk is on fire")
	}
	return o.seenOp.Process(c, r)
}

func runChained(t *testing.T, h *harness, c *contracts.Contract, op operator.Operator, before map[string]operator.Operator, dir string) (rt *stream.Runtime, ended func() (error, bool)) {
	t.Helper()
	rt, err := stream.NewChained(stream.Config{
		NATSURL: h.srv.ClientURL(), Contract: c, DataDir: dir, Operator: "dedup", Instance: "0",
		TickInterval: 10 * time.Millisecond,
	}, op, before)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	finished := make(chan struct{})
	go func() {
		err = rt.Run(ctx)
		close(finished)
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
	})
	return rt, func() (error, bool) {
		select {
		case <-finished:
			return err, true
		case <-time.After(30 * time.Second):
			return nil, false
		}
	}
}

// TestAChainedOperatorRunsInTheStep: the records an operator chained
// before dedup emits are what dedup handles, in its step — nothing is
// written between them — whatever key group they are moved to; a record
// it drops is gone, and one it calls poison is filed naming it.
func TestAChainedOperatorRunsInTheStep(t *testing.T) {
	h := newHarness(t)
	c := chainedDedup(t)
	h.publishByID("a", "b", "drop", "bad", "move", "c")
	rt, _ := runChained(t, h, c, seenOp{families: []string{"seen"}}, map[string]operator.Operator{"tag": tagOp{}}, t.TempDir())
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if s := rt.Stats(); s.Out != 4 || s.DeadLettered != 1 {
			return fmt.Errorf("out %d, dead %d; want 4 out, 1 dead", s.Out, s.DeadLettered)
		}
		return nil
	})
	got := h.records("deduped")
	ids := map[string]bool{}
	for _, r := range got {
		ids[r.ID] = true
		if !strings.HasPrefix(string(r.Value), "tagged:{") || r.At.Stream != "NEXMARK" || r.At.Seq == 0 {
			t.Errorf("record %s: value %q at %v: want the tagged event, at its ingress coordinate", r.ID, r.Value, r.At)
		}
	}
	if len(got) != 4 || !ids["a"] || !ids["b"] || !ids["c"] || !ids[movedID("move")] {
		t.Fatalf("deduped holds %v, want a, b, c and %s", ids, movedID("move"))
	}
	l := h.letters()
	if len(l) != 1 || !strings.Contains(string(l[0].Payload), `"id":"bad"`) || l[0].At.Seq == 0 || l[0].Field != "payload.tag" || !strings.Contains(l[0].Reason, "operator tag, chained before dedup") {
		t.Fatalf("letters %+v, want the one tag called poison, naming tag", l)
	}
}

// TestAnErrorDownTheChainStopsTheStep: the operator fails on a record a
// chained operator handed it; the chained operator drops Emit's error,
// and the run stops all the same, committing nothing of the step — not
// the record handled before it in the same step. Started again with an
// operator that does not fail, each comes out once.
func TestAnErrorDownTheChainStopsTheStep(t *testing.T) {
	h := newHarness(t)
	c := chainedDedup(t)
	l := keygroup.Layout{Groups: c.State.KeyGroups, Partitions: c.Ingress.Partitions}
	before := "a"
	for i := 0; l.Partition([]byte(before)) != l.Partition([]byte("boom")); i++ {
		before = fmt.Sprint("a", i)
	}
	h.publishByID(before, "boom") // one partition, one fetch: one step
	dir := t.TempDir()
	rt, ended := runChained(t, h, c, failOp{seenOp{families: []string{"seen"}}}, map[string]operator.Operator{"tag": tagOp{}}, dir)
	err, ok := ended()
	if !ok {
		t.Fatalf("still running after 30 s; stats %+v", rt.Stats())
	}
	if err == nil || !strings.Contains(err.Error(), "the disk is on fire") {
		t.Fatalf("run: %v, want it to stop on the operator's error", err)
	}
	if got := h.records("deduped"); len(got) > 0 {
		t.Errorf("deduped holds %d records: the failed step committed", len(got))
	}
	rt, _ = runChained(t, h, c, seenOp{families: []string{"seen"}}, map[string]operator.Operator{"tag": tagOp{}}, dir)
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if s := rt.Stats(); s.Out != 2 {
			return fmt.Errorf("out %d, want 2", s.Out)
		}
		return nil
	})
	ids := map[string]int{}
	for _, r := range h.records("deduped") {
		ids[r.ID]++
	}
	if len(ids) != 2 || ids[before] != 1 || ids["boom"] != 1 {
		t.Fatalf("deduped holds %v, want %s and boom once each", ids, before)
	}
}

// countOp counts, per key, the records it handles, in its state, and
// emits each with its count.
type countOp struct{}

func (countOp) Families() []string { return []string{"seen"} }
func (countOp) Process(c operator.Env, r record.Record) error {
	v := c.Value("seen")
	b, _, err := v.Get()
	if err != nil {
		return err
	}
	n := len(b) + 1
	if err := v.Set(make([]byte, n)); err != nil {
		return err
	}
	return c.Emit(record.Record{ID: fmt.Sprintf("%s#%d", r.ID, n)})
}

// gatherOp gives every record the ID "all", wherever it was read.
type gatherOp struct{}

func (gatherOp) Process(c operator.Env, r record.Record) error {
	return c.Emit(record.Record{ID: "all", Value: r.Value})
}

// TestAChainKeysTheOperatorsState: records read from every partition,
// each keyed by the chain into one key, share that key's state — as they
// would behind an edge routing them to it.
func TestAChainKeysTheOperatorsState(t *testing.T) {
	h := newHarness(t)
	c := chainedDedup(t)
	c.Operators[0].Before = []string{"gather"}
	var ids []string
	seen := map[int]bool{}
	l := keygroup.Layout{Groups: c.State.KeyGroups, Partitions: c.Ingress.Partitions}
	for i := 0; len(seen) < c.Ingress.Partitions; i++ {
		id := fmt.Sprint("e", i)
		if p := l.Partition([]byte(id)); !seen[p] {
			seen[p] = true
			ids = append(ids, id)
		}
	}
	h.publishByID(ids...)
	rt, _ := runChained(t, h, c, countOp{}, map[string]operator.Operator{"gather": gatherOp{}}, t.TempDir())
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if s := rt.Stats(); s.Out != int64(len(ids)) {
			return fmt.Errorf("out %d, want %d", s.Out, len(ids))
		}
		return nil
	})
	got := map[string]bool{}
	for _, r := range h.records("deduped") {
		got[r.ID] = true
	}
	for n := 1; n <= len(ids); n++ {
		if id := fmt.Sprintf("all#%d", n); !got[id] {
			t.Errorf("no %s among %v: the records from %d partitions did not share key all's state", id, got, len(ids))
		}
	}
}

// TestAChainedOperatorRunsAsOneInstance: a chain may key a record into
// any key group, so its operator owns them all: a rescale to two is
// refused, and so is a start under an assignment that splits it.
func TestAChainedOperatorRunsAsOneInstance(t *testing.T) {
	h := newHarness(t)
	c := chainedDedup(t)
	ctx := context.Background()
	if _, err := checkpoint.Rescale(ctx, h.js, c, map[string][]string{"dedup": {"0", "1"}}, ""); err == nil || !strings.Contains(err.Error(), "runs as one instance") {
		t.Fatalf("rescale of a chained operator to two: %v, want a refusal", err)
	}
	// One without state owns no key group: it may run as many as any.
	stateless := *h.c
	stateless.Operators = append([]contracts.Operator(nil), h.c.Operators...)
	stateless.Operators[1].Before = []string{"tag"}
	if _, err := checkpoint.Rescale(ctx, h.js, &stateless, map[string][]string{"publish": {"0", "1"}}, ""); err != nil {
		t.Fatalf("rescale of a stateless operator with a chain to two: %v", err)
	}
	// The assignment written under the contract without the chain.
	if _, err := checkpoint.Rescale(ctx, h.js, h.c, map[string][]string{"dedup": {"0", "1"}}, ""); err != nil {
		t.Fatal(err)
	}
	_, ended := runChained(t, h, c, seenOp{families: []string{"seen"}}, map[string]operator.Operator{"tag": tagOp{}}, t.TempDir())
	if err, ok := ended(); !ok || err == nil || !strings.Contains(err.Error(), "runs as one instance, owning every key group") {
		t.Fatalf("start of a chained operator as one of two instances: %v (ended %v), want a refusal", err, ok)
	}
}

// statefulOp keeps state: it may not be chained.
type statefulOp struct{ tagOp }

func (statefulOp) Families() []string { return []string{"seen"} }

// timedOp sets a timer: a chained operator keeps no state, timers
// included.
type timedOp struct{}

func (timedOp) Process(c operator.Env, r record.Record) error {
	return c.SetTimer(state.ProcessingTime, c.Now().Add(time.Second), "t")
}

// TestAChainIsRefusedUnlessAsDeclared: an operator whose contract chains
// others does not start without them, with one the contract does not
// chain, or with one that keeps state; a chained operator's timer stops
// the run.
func TestAChainIsRefusedUnlessAsDeclared(t *testing.T) {
	h := newHarness(t)
	c := chainedDedup(t)
	cfg := stream.Config{NATSURL: h.srv.ClientURL(), Contract: c, DataDir: t.TempDir(), Operator: "dedup", Instance: "0"}
	op := seenOp{families: []string{"seen"}}
	for _, tc := range []struct {
		name   string
		before map[string]operator.Operator
		want   string
	}{
		{"missing", nil, "the service has no tag"},
		{"stateful", map[string]operator.Operator{"tag": statefulOp{}}, "keeps state (seen)"},
		{"undeclared", map[string]operator.Operator{"tag": tagOp{}, "other": tagOp{}}, "does not chain it there"},
	} {
		if _, err := stream.NewChained(cfg, op, tc.before); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := stream.New(cfg, op); err == nil || !strings.Contains(err.Error(), "operators[].before") {
		t.Errorf("New of a chained operator: %v, want a refusal naming operators[].before", err)
	}
	h.publishByID("a")
	_, ended := runChained(t, h, c, seenOp{families: []string{"seen"}}, map[string]operator.Operator{"tag": timedOp{}}, t.TempDir())
	if err, ok := ended(); !ok || err == nil || !strings.Contains(err.Error(), "set a timer") {
		t.Fatalf("run: %v (ended %v), want it to stop on the chained operator's timer", err, ok)
	}
}

// TestAPositionInAnotherInputRefusesTheStart: publish's state holds its
// position in the deduped edge; a contract that has it read the ingress
// instead — its writer's edge replaced by a chain — would start it
// nowhere in particular, so the start is refused: the state's meaning
// names its input (checkpoint.Meaning.Input). A state from before the
// meaning named it is refused by its positions (TestCheckInputName).
func TestAPositionInAnotherInputRefusesTheStart(t *testing.T) {
	h := newHarness(t)
	c := h.c
	h.publishByID("a", "b")
	_, stopUp := h.run(c, "dedup", seenOp{families: []string{"seen"}}, t.TempDir())
	dir := t.TempDir()
	rt, stop := h.run(c, "publish", seenOp{}, dir)
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if s := rt.Stats(); s.In != 2 {
			return fmt.Errorf("publish in %d, want 2", s.In)
		}
		return nil
	})
	stop()
	stopUp()
	moved := *c
	moved.Operators = []contracts.Operator{{ID: "publish", Service: "dedup", Input: "ingress", Output: "events", Keying: contracts.KeyingKey, DeadLetter: true}}
	moved.Edges = []contracts.Edge{c.Edges[1]}
	moved.State.Families = nil
	if ps := moved.Lint(); len(ps) > 0 {
		t.Fatal(ps)
	}
	rt2, err := stream.New(stream.Config{NATSURL: h.srv.ClientURL(), Contract: &moved, DataDir: dir, Operator: "publish", Instance: "0"}, seenOp{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rt2.Run(ctx); err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "input: deduped -> ingress (incompatible") {
		t.Fatalf("run over positions in another input: %v, want a refusal naming it", err)
	}
}
