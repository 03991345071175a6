package stream

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirflow/weir/internal/status"
)

type counters struct {
	steps, in, out, storing        atomic.Int64
	deadLettered, sideOutput, shed atomic.Int64
	redelivered, duplicateFrames   atomic.Int64
	fencedFrames                   atomic.Int64
	ended                          atomic.Int64 // inputs of a bounded replay read to their end
	control, retries, timersFired  atomic.Int64
	released, heldEpochs           atomic.Int64
	stale, alreadyStored           atomic.Int64
	erased                         atomic.Int64 // records of erased keys dropped
	// replayed is what the consumers had to deliver at the last start.
	replayed atomic.Int64
	// memory is the budget of the current run; stepOutput the largest
	// output a step staged, in bytes.
	memory     atomic.Pointer[Memory]
	stepOutput atomic.Int64
	// watermark is the last forwarded watermark, Unix milliseconds.
	watermark atomic.Int64
	// busy, idle and backpressured are nanoseconds spent running steps
	// (publishing included), waiting for input, and waiting for the
	// broker to store a step's output; load samples them.
	busy, idle, backpressured atomic.Int64
	// stateIO is nanoseconds spent committing steps to the state store
	// (the batch and its fsync); inputBusy, per input partition,
	// nanoseconds spent decoding and processing its messages.
	stateIO   atomic.Int64
	inputBusy struct {
		sync.Mutex
		ns map[string]int64
	}
	load loadWindow
}

// addInputBusy adds what a step spent on each input partition.
func (c *counters) addInputBusy(spent map[string]time.Duration) {
	if len(spent) == 0 {
		return
	}
	c.inputBusy.Lock()
	defer c.inputBusy.Unlock()
	if c.inputBusy.ns == nil {
		c.inputBusy.ns = map[string]int64{}
	}
	for in, d := range spent {
		c.inputBusy.ns[in] += int64(d)
	}
}

func (c *counters) inputBusyNow() map[string]int64 {
	c.inputBusy.Lock()
	defer c.inputBusy.Unlock()
	return maps.Clone(c.inputBusy.ns)
}

// loadWindow keeps samples of the time counters, at most one a second
// over the last loadSpan, so that Stats reports how the time was spent
// lately, not since the start.
type loadWindow struct {
	mu        sync.Mutex
	samples   []loadSample
	spanStart time.Time
}

type loadSample struct {
	at                        time.Time
	busy, idle, backpressured int64
	stateIO                   int64
	inputs                    map[string]int64
}

// loadSpan is the window the load fractions cover.
const loadSpan = 10 * time.Second

// sampleLoad samples the time counters, and ends a key-group load window
// every loadSpan.
func (rt *Runtime) sampleLoad(now time.Time) {
	if rt.stats.sample(now) {
		rt.groups.rotate()
	}
}

// sample records the counters now, once a second at most, and reports
// whether a loadSpan has passed since the last report.
func (c *counters) sample(now time.Time) (spanEnded bool) {
	c.load.mu.Lock()
	defer c.load.mu.Unlock()
	if n := len(c.load.samples); n > 0 && now.Sub(c.load.samples[n-1].at) < time.Second {
		return false
	}
	if c.load.spanStart.IsZero() {
		c.load.spanStart = now
	}
	if now.Sub(c.load.spanStart) >= loadSpan {
		c.load.spanStart, spanEnded = now, true
	}
	c.load.samples = append(c.load.samples, loadSample{now, c.busy.Load(), c.idle.Load(), c.backpressured.Load(), c.stateIO.Load(), c.inputBusyNow()})
	for len(c.load.samples) > 1 && now.Sub(c.load.samples[1].at) >= loadSpan {
		c.load.samples = c.load.samples[1:]
	}
	return spanEnded
}

// fractions are the shares of the wall clock, since the oldest sample of
// the window, spent busy (not counting waits for the broker), waiting for
// the broker, and idle.
func (c *counters) fractions(now time.Time) (busy, backpressured, idle float64, over time.Duration) {
	c.load.mu.Lock()
	defer c.load.mu.Unlock()
	if len(c.load.samples) == 0 {
		return 0, 0, 0, 0
	}
	old := c.load.samples[0]
	over = now.Sub(old.at)
	if over <= 0 {
		return 0, 0, 0, 0
	}
	wall := float64(over)
	bp := float64(c.backpressured.Load() - old.backpressured)
	busy = max(float64(c.busy.Load()-old.busy)-bp, 0) / wall
	return min(busy, 1), min(bp/wall, 1), min(float64(c.idle.Load()-old.idle)/wall, 1), over
}

// shares are, over the same window as fractions, the share of the wall
// clock spent committing state, and per input partition the share spent
// on its messages.
func (c *counters) shares(now time.Time) (stateIO float64, inputs map[string]float64) {
	c.load.mu.Lock()
	defer c.load.mu.Unlock()
	if len(c.load.samples) == 0 {
		return 0, nil
	}
	old := c.load.samples[0]
	wall := float64(now.Sub(old.at))
	if wall <= 0 {
		return 0, nil
	}
	for in, ns := range c.inputBusyNow() {
		if inputs == nil {
			inputs = map[string]float64{}
		}
		inputs[in] = min(float64(ns-old.inputs[in])/wall, 1)
	}
	return min(float64(c.stateIO.Load()-old.stateIO)/wall, 1), inputs
}

// Stats returns the instance's totals.
func (rt *Runtime) Stats() status.Stats {
	s := status.Stats{
		Operator:        rt.cfg.Operator,
		Instance:        rt.cfg.Instance,
		Ready:           rt.ready.Load(),
		Steps:           rt.stats.steps.Load(),
		In:              rt.stats.in.Load(),
		Out:             rt.stats.out.Load(),
		Storing:         rt.stats.storing.Load(),
		DeadLettered:    rt.stats.deadLettered.Load(),
		SideOutput:      rt.stats.sideOutput.Load(),
		Shed:            rt.stats.shed.Load(),
		Erased:          rt.stats.erased.Load(),
		Redelivered:     rt.stats.redelivered.Load(),
		Ended:           rt.stats.ended.Load(),
		DuplicateFrames: rt.stats.duplicateFrames.Load(),
		FencedFrames:    rt.stats.fencedFrames.Load(),
		Control:         rt.stats.control.Load(),
		Retries:         rt.stats.retries.Load(),
		TimersFired:     rt.stats.timersFired.Load(),
		Released:        rt.stats.released.Load(),
		HeldEpochs:      rt.stats.heldEpochs.Load(),
		StaleVersions:   rt.stats.stale.Load(),
		AlreadyStored:   rt.stats.alreadyStored.Load(),
		Replayed:        rt.stats.replayed.Load(),
		StepOutputMax:   rt.stats.stepOutput.Load(),
	}
	if m := rt.stats.memory.Load(); m != nil {
		s.Memory = m.Total
	}
	// The step loop samples the counters (sampleLoad); reading them here
	// changes nothing.
	var over time.Duration
	now := time.Now()
	s.Busy, s.Backpressured, s.Idle, over = rt.stats.fractions(now)
	s.StateIO, s.InputBusy = rt.stats.shares(now)
	s.LoadSeconds = over.Seconds()
	lo, hi := 0, rt.base.keyGroups
	if rn := rt.cur.Load(); rn != nil {
		lo, hi = rn.lay.groupLo, rn.lay.groupHi
	}
	if kg, share, skew, n := rt.groups.hot(lo, hi); kg >= 0 {
		s.HotKeyGroup, s.HotShare, s.KeyGroupSkew, s.KeyGroupRecords = kg, share, skew, n
	}
	if ms := rt.stats.watermark.Load(); ms != 0 {
		s.Watermark = time.UnixMilli(ms).UTC()
	}
	rn := rt.cur.Load()
	if rn == nil {
		return s
	}
	if r := rn.in.reader.Load(); r != nil {
		s.InputBuffered, s.InputBudget = r.Held()
		for _, in := range rn.plan.inputs {
			if r.Paused(in.Name) {
				s.Paused = append(s.Paused, in.Name)
			}
		}
	}
	st := rn.store.Stats()
	s.StateKeys, s.Timers = st.Keys, st.Timers
	if fb := rn.obs.familyBytes.Load(); fb != nil {
		s.StateBytes = *fb
	}
	rn.obs.mu.Lock()
	for in, wm := range rn.obs.mu.watermarks {
		if s.InputWatermarks == nil {
			s.InputWatermarks = map[string]time.Time{}
		}
		s.InputWatermarks[in] = wm
	}
	rn.obs.mu.Unlock()
	return s
}
