package edge_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirflow/weir/internal/edge"
)

// TestStoredSinceReadsAWritersLaterBatches commits batches of two writers
// interleaved on one transactional edge and asks, as a writer restored
// from an older state would, which results it stored after a sequence:
// exactly those of its batches past it, none of the other writer's.
func TestStoredSinceReadsAWritersLaterBatches(t *testing.T) {
	ctx := context.Background()
	js := newJS(t)
	spec := edge.Spec{Pipeline: "p", Edge: "results", Partitions: 2, Retention: time.Hour, Transactional: true}
	if _, err := edge.Ensure(ctx, js, spec); err != nil {
		t.Fatal(err)
	}
	prev := map[string]uint64{}
	seq := map[string]uint64{}
	commit := func(writer string, ids ...string) {
		t.Helper()
		var msgs []edge.Message
		for i, id := range ids {
			msgs = append(msgs, edge.Message{Subject: spec.Subject(i % 2), ID: id, Producer: writer, JSON: true, Data: []byte(`{}`)})
		}
		seq[writer] += uint64(len(ids))
		s, err := edge.PublishCommitted(ctx, js, spec, edge.Commit{Writer: writer, Seq: seq[writer], Epoch: 1}, prev[writer], msgs)
		if err != nil {
			t.Fatal(err)
		}
		prev[writer] = s
	}
	commit("a/0", "a1", "a2")       // a's seq 1-2
	commit("b/0", "b1")             // another writer's
	commit("a/0", "a3", "a4", "a5") // 3-5
	commit("b/0", "b2", "b3")
	commit("a/0", "a6") // 6

	for _, c := range []struct {
		since uint64
		want  []string
	}{
		{0, []string{"a1", "a2", "a3", "a4", "a5", "a6"}},
		{2, []string{"a3", "a4", "a5", "a6"}},
		{3, []string{"a3", "a4", "a5", "a6"}}, // a batch past the sequence is read whole
		{5, []string{"a6"}},
		{6, nil},
	} {
		got, err := edge.StoredSince(ctx, js, spec, "a/0", c.since)
		if err != nil {
			t.Fatal(err)
		}
		if ids := slices.Sorted(maps.Keys(got)); !slices.Equal(ids, c.want) {
			t.Errorf("stored since %d: %v, want %v", c.since, ids, c.want)
		}
	}
	if got, err := edge.StoredSince(ctx, js, spec, "c/0", 0); err != nil || len(got) != 0 {
		t.Errorf("a writer that stored nothing: %v, %v", got, err)
	}
}

// TestLastCommitReadsTheMarkerWhole: a writer's last commit marker reads
// back as committed, and one whose epoch does not parse is an error — a
// publisher resuming from it must not take a marker it cannot read for
// epoch 0.
func TestLastCommitReadsTheMarkerWhole(t *testing.T) {
	ctx := context.Background()
	js := newJS(t)
	spec := edge.Spec{Pipeline: "p", Edge: "results", Partitions: 1, Retention: time.Hour, Transactional: true}
	if _, err := edge.Ensure(ctx, js, spec); err != nil {
		t.Fatal(err)
	}
	want := edge.Commit{Writer: "a/0", Seq: 2, Epoch: 7}
	msgs := []edge.Message{{Subject: spec.Subject(0), ID: "r1", Producer: "a/0", JSON: true, Data: []byte(`{}`)},
		{Subject: spec.Subject(0), ID: "r2", Producer: "a/0", JSON: true, Data: []byte(`{}`)}}
	stored, err := edge.PublishCommitted(ctx, js, spec, want, 0, msgs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := edge.LastCommit(ctx, js, spec, "a/0")
	if want.StreamSeq = stored; err != nil || got != want {
		t.Fatalf("last commit %+v %v, want %+v", got, err, want)
	}
	m := nats.NewMsg(spec.CommitSubject("a/0"))
	m.Header.Set(edge.HeaderWriter, "a/0")
	m.Header.Set(edge.HeaderHeldSeq, "3")
	m.Header.Set(edge.HeaderEpoch, "seven")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	if got, err := edge.LastCommit(ctx, js, spec, "a/0"); err == nil || !strings.Contains(err.Error(), edge.HeaderEpoch) {
		t.Errorf("a marker with epoch %q read as %+v, %v; want an error naming %s", "seven", got, err, edge.HeaderEpoch)
	}
}
