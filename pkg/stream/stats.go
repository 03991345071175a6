package stream

import (
	"sync/atomic"
	"time"

	"github.com/weirflow/weir/pkg/status"
)

type counters struct {
	steps, in, out                 atomic.Int64
	deadLettered, sideOutput, shed atomic.Int64
	redelivered, duplicateFrames   atomic.Int64
	fencedFrames                   atomic.Int64
	control, retries, timersFired  atomic.Int64
	released, heldEpochs           atomic.Int64
	stale, alreadyStored           atomic.Int64
	// watermark is the last forwarded watermark, Unix milliseconds.
	watermark atomic.Int64
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
		DeadLettered:    rt.stats.deadLettered.Load(),
		SideOutput:      rt.stats.sideOutput.Load(),
		Shed:            rt.stats.shed.Load(),
		Redelivered:     rt.stats.redelivered.Load(),
		DuplicateFrames: rt.stats.duplicateFrames.Load(),
		FencedFrames:    rt.stats.fencedFrames.Load(),
		Control:         rt.stats.control.Load(),
		Retries:         rt.stats.retries.Load(),
		TimersFired:     rt.stats.timersFired.Load(),
		Released:        rt.stats.released.Load(),
		HeldEpochs:      rt.stats.heldEpochs.Load(),
		StaleVersions:   rt.stats.stale.Load(),
		AlreadyStored:   rt.stats.alreadyStored.Load(),
	}
	if ms := rt.stats.watermark.Load(); ms != 0 {
		s.Watermark = time.UnixMilli(ms).UTC()
	}
	rn := rt.cur.Load()
	if rn == nil {
		return s
	}
	if r := rn.reader.Load(); r != nil {
		for _, in := range rn.plan.inputs {
			if r.Paused(in.Name) {
				s.Paused = append(s.Paused, in.Name)
			}
		}
	}
	s.StateKeys = rn.store.Stats().Keys
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
