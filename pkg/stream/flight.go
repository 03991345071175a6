package stream

import (
	"context"
	"fmt"
	"time"

	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/jsapi"
)

// A flight is the publishing of one committed step's frames, under way
// while the next step reads and processes its input.
//
// A step's frames are staged in its state batch, so once the batch is
// committed they are as durable as the step: a crash before they are
// stored leaves them staged, and the next start publishes them. Waiting
// for the broker to store them is therefore not part of the step. The
// next step overlaps it with its own work — decoding, processing, its
// state reads — and waits for the flight only before its own commit,
// which deletes the landed frames from the stage (land). One flight at a
// time keeps frames in the order their sequences were given: a frame is
// never stored behind a later one of its partition, where a reader would
// drop it as already seen.
//
// A step's inputs are acknowledged at its commit, not when its frames
// land: acknowledgements only release the broker's flow control, and the
// committed position decides where reading resumes. A snapshot, though,
// waits for them (snapshot): restoring a snapshot onto other key groups
// (a rescale) rebuilds the state without the staged frames, so what the
// snapshot's positions have passed must be stored before it counts.
type flight struct {
	frames []edge.Message
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done closes: ctx ended before they were stored
}

// launch starts publishing a committed step's frames. The publish is
// retried until it succeeds (the broker may be restarting); only the end
// of ctx gives up, and the frames stay staged for the next start.
// The step's out records count as output (Stats.Out) once stored; until
// then its messages count as Stats.Storing.
func (o *output) launch(ctx context.Context, frames []edge.Message, out int64) {
	if o.halted != nil {
		return // staged, for the stop or the next start (land)
	}
	ctx, cancel := context.WithCancel(ctx)
	f := &flight{frames: frames, cancel: cancel, done: make(chan struct{})}
	o.flight = f
	o.stats.storing.Store(int64(len(frames)))
	go func() {
		defer close(f.done)
		defer cancel()
		defer o.stats.storing.Store(0)
		for attempt := 1; ; attempt++ {
			err := o.publish(ctx, frames)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				f.err = err
				return
			}
			o.log.Warn("publishing output", "attempt", attempt, "err", err)
			if err := sleep(ctx, jsapi.Backoff(attempt)); err != nil {
				f.err = err
				return
			}
		}
		o.stats.out.Add(out)
		for _, m := range frames {
			o.obs.metrics.Out(ctx, m.Subject, int64(m.DataRecords), int64(len(m.Data)))
		}
	}()
}

// land waits for the flight in progress, if any, and notes its frames for
// the next commit to delete from the stage. The wait — what is left of
// the store once the next step's own work is done — is where
// backpressure from downstream shows.
//
// A flight ends unstored only when the run is stopping. Its frames stay
// staged, perhaps some of them stored, and from then on the run launches
// no flight (halted): a later step's frames stored before the earlier
// ones' would be dropped by readers as already seen. The steps still
// commit, their frames staged, and the stop or the next start publishes
// every staged frame in order (publishStaged). land reports whether every
// frame committed so far has been stored.
func (o *output) land(ctx context.Context) error {
	if f := o.flight; f != nil {
		waiting := time.Now()
		<-f.done
		o.flight = nil
		if f.err != nil {
			o.halted = fmt.Errorf("stream: publish output: %w", f.err)
		} else {
			waited := time.Since(waiting)
			o.obs.metrics.Backpressured(ctx, waited)
			o.stats.backpressured.Add(int64(waited))
			for _, m := range f.frames {
				o.published = append(o.published, stagedID(m))
			}
		}
	}
	return o.halted
}

// abandon ends the flight in progress, if any, without waiting for its
// frames to be stored: they stay staged, and the next start publishes
// them. A run ends with it, so that no publish of this run's outlives it
// and races the next run's.
func (o *output) abandon() {
	if f := o.flight; f != nil {
		f.cancel()
		<-f.done
		o.flight = nil
	}
}
