package edge

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/pkg/natstest"
)

// TestACountThatDropsWithoutARemovalIsNotALoss: the reader takes a drop in
// its consumer's count of what is left to deliver for a removal only when
// the stream says a message after the last one delivered is gone. A
// clustered consumer whose leader moved counts from a replica that may lag
// (TestClusterSurvivesAPartition once stopped a pipeline for good on such
// a count, with the stream holding every message); a delete or a trim past
// the position is still a loss.
func TestACountThatDropsWithoutARemovalIsNotALoss(t *testing.T) {
	ctx := context.Background()
	js := natstest.Run(t).JetStream(t)
	spec := Spec{Pipeline: "p", Edge: "e", Partitions: 2, Retention: time.Hour}
	if _, err := Ensure(ctx, js, spec); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ { // sequences 1-10, partitions interleaved
		if _, err := js.Publish(ctx, spec.Subject(i%2), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	r := &Reader{js: js}
	in := &Input{Name: "e/0", Stream: spec.StreamName(), Subject: spec.Subject(0)}
	st, err := js.Stream(ctx, spec.StreamName())
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string, seq uint64, want bool) {
		t.Helper()
		if got := r.removedSince(ctx, in, seq); got != want {
			info, _ := r.streamInfo(ctx, in.Stream)
			t.Fatalf("%s: removed after %d = %t, want %t (stream state %+v)", when, seq, got, want, info.State)
		}
	}
	check("nothing removed", 3, false)
	check("nothing removed", 0, false)
	if err := st.DeleteMsg(ctx, 6); err != nil {
		t.Fatal(err)
	}
	check("6 deleted", 3, true)
	check("6 deleted", 5, true)
	check("6 deleted", 6, false)
	check("6 deleted", 9, false)
	if err := st.Purge(ctx, jetstream.WithPurgeSequence(8)); err != nil { // keeps 8-10
		t.Fatal(err)
	}
	check("1-7 purged", 3, true)
	check("1-7 purged", 6, true)
	check("1-7 purged", 7, false)
	check("1-7 purged", 10, false)
}

// TestALossOnlyAFirstLookSawIsNone: a server just restarted can report,
// for a moment, a first sequence past messages it still holds (weir chaos:
// a consumer asked for 962 started at 977, 962–976 stored). ConfirmTrimmed
// looks again: a loss whose next sequence the stream holds is dropped, one
// retention made stands with where the stream begins now, and losses
// counted while reading or skipped in a mirror are kept without a look.
func TestALossOnlyAFirstLookSawIsNone(t *testing.T) {
	ctx := context.Background()
	js := natstest.Run(t).JetStream(t)
	spec := Spec{Pipeline: "p", Edge: "e", Partitions: 2, Retention: time.Hour}
	if _, err := Ensure(ctx, js, spec); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if _, err := js.Publish(ctx, spec.Subject(i%2), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	loss := func(committed, first uint64) Trimmed {
		return Trimmed{Input: "e/0", Stream: spec.StreamName(), Subject: spec.Subject(0),
			Committed: committed, First: first, Removed: first - 1 - committed}
	}
	// What a restarted server's first answer said; the stream holds 6-20.
	te, err := ConfirmTrimmed(ctx, js, &TrimmedError{Inputs: []Trimmed{loss(5, 15)}})
	if err != nil || te != nil {
		t.Fatalf("a loss of held records: %v, %v; want none", te, err)
	}
	st, err := js.Stream(ctx, spec.StreamName())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSequence(12)); err != nil { // keeps 12-20
		t.Fatal(err)
	}
	ahead := Trimmed{Input: "e/1", Stream: "NONE", Subject: "x", Committed: 3, First: 9, Removed: 2, Ahead: true}
	skipped := Trimmed{Input: "m/0", Stream: "NONE", Subject: "y", Committed: 3, First: 9, Removed: 5, Skipped: true}
	began := time.Now()
	te, err = ConfirmTrimmed(ctx, js, &TrimmedError{Inputs: []Trimmed{ahead, loss(5, 9), skipped}})
	if err != nil {
		t.Fatal(err)
	}
	want := []Trimmed{ahead, loss(5, 12), skipped}
	if te == nil || len(te.Inputs) != 3 || te.Inputs[0] != want[0] || te.Inputs[1] != want[1] || te.Inputs[2] != want[2] {
		t.Fatalf("losses after the purge: %+v, want %+v", te, want)
	}
	var wait time.Duration
	for _, p := range trimLooks {
		wait += p
	}
	if took := time.Since(began); took < wait {
		t.Fatalf("a loss was confirmed after %v, before every look (%v)", took, wait)
	}
	// A look that cannot be made decides nothing.
	if te, err := ConfirmTrimmed(ctx, js, &TrimmedError{Inputs: []Trimmed{{Input: "x", Stream: "NONE", Committed: 1, First: 5}}}); err == nil {
		t.Fatalf("a stream that cannot be read: %+v, want an error", te)
	}
}
