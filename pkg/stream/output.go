package stream

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/pkg/state"
	"github.com/weirflow/weir/pkg/view"
)

// output is a run's output staging: the writer that cuts the operator's
// output into frames, the frames staged and being stored (flight.go), the
// results a transactional sink holds (txn.go), or the view a versioned
// sink applies its panes to.
type output struct {
	writer *edge.Writer
	// published holds staged frame IDs published after the last commit;
	// the next commit deletes them.
	published []string
	// flight is the last step's frames being stored while the next step
	// runs (flight.go); nil when none is. halted says why no flight is
	// launched any more: one ended unstored, as the run stops.
	flight *flight
	halted error
	// txn holds results until their checkpoint completes; nil unless the
	// operator writes a transactional result edge.
	txn *txn
	// view, when the operator's results go to a versioned view
	// (sink.effect versioned-upsert), is where: panes are applied to it
	// instead of published.
	view *view.View
	// warned: a step's output passed the memory budget's share, said once.
	outputWarned bool

	// What output staging takes from its run: the connection it publishes
	// on, the plan, the store its frames are staged in, and where it
	// counts, logs and measures.
	conn  *conn
	plan  *plan
	store *state.Store
	stats *counters
	log   *slog.Logger
	obs   *observer
}

// publishStaged publishes every frame staged in the store — committed with
// its step but perhaps never published — and deletes them.
func (o *output) publishStaged(ctx context.Context) error {
	var staged []edge.Message
	var ids []string
	err := o.store.StagedOutputs(func(id string, data []byte) error {
		var m edge.Message
		if err := m.UnmarshalBinary(data); err != nil {
			return err
		}
		staged = append(staged, m)
		ids = append(ids, id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("stream: read staged frames: %w", err)
	}
	if len(staged) == 0 {
		return nil
	}
	o.log.Info("publishing staged frames", "frames", len(staged))
	if err := o.publish(ctx, staged); err != nil {
		return err
	}
	// Every staged frame is stored now, in order: a flight cut short
	// earlier no longer holds publishing back (flight.go).
	o.halted = nil
	o.published = ids
	return o.commitPublished()
}

// commitPublished deletes published staged frames when no step is going to.
func (o *output) commitPublished() error {
	if err := o.land(context.Background()); err != nil {
		// A publish was cut short: the frames stay staged, and
		// publishStaged or the next start stores them.
		o.log.Warn("the last steps' frames were not all stored", "err", err)
	}
	if len(o.published) == 0 {
		return nil
	}
	b := o.store.NewBatch()
	for _, id := range o.published {
		if err := b.DeleteOutput(id); err != nil {
			b.Close()
			return err
		}
	}
	if err := b.Commit(); err != nil {
		return fmt.Errorf("stream: commit: %w", err)
	}
	o.published = nil
	return nil
}

// publish stores a step's output: frames or json results in their edge
// stream, or panes applied to the versioned view, where a pane no newer
// than the one stored — a re-publish after a crash, a replay — is
// rejected and counted.
func (o *output) publish(ctx context.Context, msgs []edge.Message) error {
	if o.view == nil {
		return edge.Publish(ctx, o.conn.js, msgs, o.plan.maxInFlight())
	}
	for _, m := range msgs {
		applied, err := o.view.Apply(ctx, m.Data)
		if err != nil {
			return fmt.Errorf("stream: %s (record %s): %w", o.plan.output.Edge, m.ID, err)
		}
		if !applied {
			o.stats.stale.Add(1)
		}
	}
	return nil
}

// noteOutput keeps the largest output a step staged, and says once when
// one is larger than the memory budget allows.
func (o *output) noteOutput(frames []edge.Message) {
	var n int64
	for _, f := range frames {
		n += int64(len(f.Data))
	}
	if n <= o.stats.stepOutput.Load() {
		return
	}
	o.stats.stepOutput.Store(n)
	if share := o.obs.memory.Output / 3; share > 0 && n > share && !o.outputWarned {
		o.outputWarned = true
		o.log.Warn("a step's output is larger than the memory budget allows: the instance may use more memory than it declares",
			"bytes", n, "budget", share, "fix", "emit fewer or smaller records per input record or timer, or lower overload.fetch_batch")
	}
}

func (o *output) outputSeqs() []uint64 {
	if o.writer == nil {
		return nil
	}
	return o.writer.Seqs()
}
