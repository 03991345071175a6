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
