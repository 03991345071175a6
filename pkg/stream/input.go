package stream

import (
	"sync/atomic"
	"time"

	"github.com/weirflow/weir/internal/checkpoint"
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

// held is the instance's input positions as a manifest records them.
func (in *inputs) held(ins []edge.Input) map[string]checkpoint.Held {
	out := make(map[string]checkpoint.Held, len(in.positions))
	for _, i := range ins {
		if p, ok := in.positions[i.Name]; ok {
			out[i.Name] = checkpoint.Held{Stream: i.Stream, Seq: p.Seq, Clear: p.Clear}
		}
	}
	return out
}

// touch starts every input's silence afresh: after a restart, a
// reopened reader or the broker's return, an input that was silent only
// because nothing could be read gets a full idle timeout to speak before
// it is marked idle — and the watermark of the others runs ahead of its
// records.
func (in *inputs) touch(chans []string, now time.Time) {
	if in.tracker == nil {
		return
	}
	for _, n := range chans {
		in.tracker.Touch(n, now)
	}
}

// noteSeen records, once a step committed, the highest sequence delivered
// per input.
func (in *inputs) noteSeen(g *gaps) {
	for name, seq := range g.seen {
		in.seen[name] = max(in.seen[name], seq)
	}
}
