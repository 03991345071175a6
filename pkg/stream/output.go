package stream

import (
	"github.com/weirflow/weir/internal/edge"
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
}
