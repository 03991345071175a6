package stream_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/pkg/state"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
)

// startDedup runs the dedup operator on dir and returns its Runtime and
// the channel Run's result arrives on; the run stops with the test.
func (h *harness) startDedup(dir string) (*stream.Runtime, <-chan error) {
	h.t.Helper()
	rt, err := stream.New(stream.Config{
		NATSURL: h.srv.ClientURL(), Contract: h.c, DataDir: dir, Operator: "dedup", Instance: "0",
		TickInterval: 10 * time.Millisecond,
	}, seenOp{families: []string{"seen"}})
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, finished := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(finished)
		done <- rt.Run(ctx)
	}()
	h.t.Cleanup(func() {
		cancel()
		<-finished
	})
	return rt, done
}

// ranOnce runs dedup on dir until it is ready and stops it: dir then
// holds the local state of a clean stop.
func (h *harness) ranOnce(dir string) {
	h.t.Helper()
	rt, err := stream.New(stream.Config{
		NATSURL: h.srv.ClientURL(), Contract: h.c, DataDir: dir, Operator: "dedup", Instance: "0",
		TickInterval: 10 * time.Millisecond,
	}, seenOp{families: []string{"seen"}})
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	streamtest.CheckFor(h.t, 30*time.Second, func() error {
		if !rt.Ready() {
			return fmt.Errorf("not ready")
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		h.t.Fatal(err)
	}
}

// putMeta writes an operator-level record into the state in dir, as a
// damaged disk or another build could have left it.
func (h *harness) putMeta(dir, name string, v []byte) {
	h.t.Helper()
	st, err := state.Open(filepath.Join(dir, "state"), state.Options{KeyGroups: h.c.State.KeyGroups})
	if err != nil {
		h.t.Fatal(err)
	}
	b := st.NewBatch()
	if err := b.PutMeta(name, v); err != nil {
		h.t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		h.t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		h.t.Fatal(err)
	}
}

// refusesWith damages record name of the local state dedup left in dir
// to v, starts dedup again, and waits for it to refuse with an error
// naming want.
func (h *harness) refusesWith(dir, name string, v []byte, want string) {
	h.t.Helper()
	h.putMeta(dir, name, v)
	_, done := h.startDedup(dir)
	refused(h.t, done, want)
}

// refused waits for a run to stop with an error that names want.
func refused(t *testing.T, done <-chan error, want string) {
	t.Helper()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("the start ended with %v, want a refusal naming %q", err, want)
		}
		t.Logf("refused: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatalf("the instance started; want a refusal naming %q", want)
	}
}

// TestACorruptAssignmentRecordRefusesTheStart: local state records the
// assignment version it was built under; one that cannot be read is not
// "built under no assignment", which would throw the local state away
// and rebuild it from the assignment's checkpoint — everything committed
// since lost. The start is refused with the reason.
func TestACorruptAssignmentRecordRefusesTheStart(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	js := h.js
	st, err := checkpoint.Open(ctx, js, h.c.Pipeline, 1, "dedup")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutAssignment(ctx, checkpoint.Assignment{Version: 1, Operators: map[string][]string{"dedup": {"0"}}}, 0); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	h.ranOnce(dir) // built under assignment 1
	h.refusesWith(dir, "assignment", []byte{0, 1, 2}, "assignment")
}

// TestACorruptRestoredRecordRefusesTheStart: the record of the
// checkpoint local state was restored from makes a start before the next
// checkpoint wait for its writers' fences; one that cannot be read is not
// "never restored", which would read zombie frames unfenced.
func TestACorruptRestoredRecordRefusesTheStart(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	h.ranOnce(dir)
	h.refusesWith(dir, "restored", []byte{0, 0, 7}, "restored")
}

// TestACorruptMeaningRecordRefusesTheStart: local state records what it
// means, and a build starting on it is judged by it as a restore is; a
// record that cannot be read is not "nothing to compare", which would
// run the state under whatever this build means and overwrite the record.
func TestACorruptMeaningRecordRefusesTheStart(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	h.ranOnce(dir)
	h.refusesWith(dir, "meaning", []byte("{not a meaning"), "meaning")
}

// TestACorruptRestoreMarkerRefusesTheStartWithItsReason: the marker of a
// restore not yet fenced has one format; a marker that is not in it is
// refused as what it is, naming the file, rather than taken for a
// savepoint's manifest key.
func TestACorruptRestoreMarkerRefusesTheStartWithItsReason(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	h.ranOnce(dir)
	if err := os.WriteFile(filepath.Join(dir, stream.RestoredMarker), []byte(`{"checkpoint":3,"gener`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, done := h.startDedup(dir)
	refused(t, done, stream.RestoredMarker)
}
