package stream

import (
	"sync/atomic"
	"time"

	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/watermark"
	"github.com/weirflow/weir/pkg/state"
)

// inputs is a run's input reading: the reader of its input partitions,
// the committed position of each, what has been delivered, and the
// event-time progress the inputs make. Retention's checks on it are in
// retention.go.
type inputs struct {
	// reader is read by the connection's error handler too.
	reader    atomic.Pointer[edge.Reader]
	positions map[string]state.Position
	// seen is, per input, the highest sequence a committed step was
	// delivered: where the next delivery's jump is measured from.
	seen map[string]uint64
	// ended are the inputs of a bounded replay read to their end.
	ended map[string]bool
	// tracker combines the inputs' watermarks; nil when the contract
	// declares no event-time progress.
	tracker *watermark.Tracker
	// shed drops optional ingress records while behind; nil unless the
	// contract's policy is shed and the operator reads the ingress.
	shed     *shedder
	idleSent bool
	// caughtUp is, per input, when a look at the broker, begun then,
	// found that the input had been delivered every message its subject
	// held; wantHeads asks the next tick for such a look, for an ingress
	// input silent past the idle timeout (checkIdle).
	caughtUp  map[string]time.Time
	wantHeads bool
	lookedAt  time.Time // the last look wantHeads asked for
	// fencing says which writers' frames are a zombie's (fence.go).
	fencing fencing
}
