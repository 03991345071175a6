package stream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
)

// frames cuts n frames of one record each, as writer producer (generation
// 1) of the dedup contract's deduped edge, on partition p.
func (h *harness) frames(producer string, p, n int) []edge.Message {
	h.t.Helper()
	var spec edge.Spec
	for _, e := range h.c.Edges {
		if e.Name == "deduped" {
			spec = edge.ForContract(h.c, e)
		}
	}
	if _, err := edge.Ensure(context.Background(), h.js, spec); err != nil {
		h.t.Fatal(err)
	}
	w, err := edge.NewWriter(edge.WriterConfig{Spec: spec, KeyGroups: h.c.State.KeyGroups, Producer: producer, Generation: 1,
		Limits: edge.Limits{MaxRecords: 1, MaxBytes: 1 << 20}})
	if err != nil {
		h.t.Fatal(err)
	}
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("%s-%d", producer, i)
		w.WriteTo(p, record.Record{Kind: record.Data, ID: id, Key: []byte(id), Time: at,
			Value: fmt.Appendf(nil, `{"id":%q,"key":%q,"ts":%d}`, id, id, at.UnixMilli())})
	}
	return w.Flush()
}

// sinkMsgs counts the messages on the dedup contract's events edge.
func (h *harness) sinkMsgs() uint64 {
	h.t.Helper()
	st, err := h.js.Stream(context.Background(), edge.StreamName(h.c.Pipeline, "events"))
	if err != nil {
		return 0
	}
	info, err := st.Info(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	return info.State.Msgs
}

// runPublish runs the dedup contract's publish operator from dir until it
// stops on its own or wait passes (then nil).
func (h *harness) runPublish(dir string, wait time.Duration) error {
	h.t.Helper()
	rt, err := stream.New(stream.Config{NATSURL: h.srv.ClientURL(), Contract: h.c, DataDir: dir, Operator: "publish", Instance: "0",
		TickInterval: 10 * time.Millisecond}, seenOp{})
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(h.t.Context(), wait)
	defer cancel()
	return rt.Run(ctx)
}

// TestAFrameStoredBehindALaterOneStopsTheReader: a writer's frames of a
// partition are numbered 1, 2, 3, …, and a reader drops a frame at or
// below the last it read from that writer, as a copy published again. If
// frame 2 were stored behind frame 3 — a producer whose one-by-one
// publishes were refused in the middle, then sent again — reading on
// would take frame 3 and then drop frame 2 as seen: its records lost,
// silently. The reader stops at frame 3 instead, naming what is missing.
func TestAFrameStoredBehindALaterOneStopsTheReader(t *testing.T) {
	h := newHarness(t)
	fs := h.frames("dedup/9", 0, 3)
	if len(fs) != 3 || fs[0].Seq != 1 || fs[2].Seq != 3 {
		t.Fatalf("cut %d frames, want 3 numbered 1–3", len(fs))
	}
	if err := edge.Publish(t.Context(), h.js, []edge.Message{fs[0], fs[2], fs[1]}, 0); err != nil {
		t.Fatal(err)
	}
	err := h.runPublish(t.TempDir(), 30*time.Second)
	var gap *stream.FrameGapError
	if !errors.As(err, &gap) {
		t.Fatalf("the reader read on past frame 3 of 1, 3, 2 (%d of 3 events at the sink; frame 2 dropped as seen): %v", h.sinkMsgs(), err)
	}
	if gap.Writer != "dedup/9@g1" || gap.Last != 1 || gap.Seq != 3 || gap.At != 2 {
		t.Fatalf("stopped, naming %+v", gap)
	}
	if n := h.sinkMsgs(); n > 1 {
		t.Fatalf("%d events at the sink, want at most frame 1's", n)
	}
	t.Logf("stopped: %v", err)
}

// TestAFrameLostAndDeclaredIsSkipped: a frame removed from its stream
// stops the reader as any removed record does, until the loss is declared;
// then the writer's next frame, though it skips a sequence, is read, and
// its frames after that must be whole again.
func TestAFrameLostAndDeclaredIsSkipped(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	fs := h.frames("dedup/9", 1, 5)
	if err := edge.Publish(ctx, h.js, fs[:3], 0); err != nil {
		t.Fatal(err)
	}
	st, err := h.js.Stream(ctx, edge.StreamName(h.c.Pipeline, "deduped"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, 2); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	err = h.runPublish(dir, 30*time.Second)
	var te *edge.TrimmedError
	if !errors.As(err, &te) || len(te.Inputs) != 1 {
		t.Fatalf("the reader read on past a removed frame: %v", err)
	}
	lost := te.Inputs[0]
	if _, err := audit.DeclareLoss(ctx, h.js, h.c.Pipeline, audit.Declaration{Stream: lost.Stream, From: lost.Known() + 1, Through: lost.First - 1,
		Record: audit.Record{Actor: "test", Reason: "a removed frame"}}); err != nil {
		t.Fatal(err)
	}
	// Declared: frames 1 and 3 are read, and 4 and 5 after them.
	if err := edge.Publish(ctx, h.js, fs[3:], 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- h.runPublish(dir, 20*time.Second) }()
	streamtest.CheckFor(t, 20*time.Second, func() error {
		if n := h.sinkMsgs(); n != 4 {
			return fmt.Errorf("%d events at the sink, want 4", n)
		}
		return nil
	})
	if err := <-done; err != nil {
		t.Fatalf("after the declaration: %v", err)
	}
	// Past the loss, the writer's frames must follow on again: a frame 7
	// after 5 stops the reader.
	more := h.frames("dedup/9", 1, 7)
	if err := edge.Publish(ctx, h.js, more[6:], 0); err != nil {
		t.Fatal(err)
	}
	var gap *stream.FrameGapError
	if err := h.runPublish(dir, 30*time.Second); !errors.As(err, &gap) || gap.Last != 5 || gap.Seq != 7 {
		t.Fatalf("past the declared loss, the reader read on past a missing frame 6: %v", err)
	}
}
