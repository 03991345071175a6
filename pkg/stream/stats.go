package stream

import (
	"sync/atomic"
	"time"
)

type counters struct {
	steps, in, out                atomic.Int64
	deadLettered, sideOutput      atomic.Int64
	redelivered, duplicateFrames  atomic.Int64
	fencedFrames                  atomic.Int64
	control, retries, timersFired atomic.Int64
	// watermark is the last forwarded watermark, Unix milliseconds.
	watermark atomic.Int64
}

// Stats are an instance's running totals since it started.
type Stats struct {
	Operator string `json:"operator"`
	Instance string `json:"instance"`
	Ready    bool   `json:"ready"`
	// Steps committed.
	Steps int64 `json:"steps"`
	// In counts data records handed to the operator; Out counts records it
	// emitted.
	In  int64 `json:"in"`
	Out int64 `json:"out"`
	// DeadLettered and SideOutput count records filed instead of processed.
	DeadLettered int64 `json:"dead_lettered"`
	SideOutput   int64 `json:"side_output"`
	// Redelivered counts input messages dropped because the committed
	// position had passed them; DuplicateFrames counts frames dropped by
	// frame sequence.
	Redelivered     int64 `json:"redelivered"`
	DuplicateFrames int64 `json:"duplicate_frames"`
	// FencedFrames counts frames of a restored writer's older generation
	// written after its restore cut: a zombie's output, ignored.
	FencedFrames int64 `json:"fenced_frames"`
	Control      int64 `json:"control_records"`
	Retries      int64 `json:"retries"`
	TimersFired  int64 `json:"timers_fired"`
	// Watermark is the operator's watermark; zero before the first.
	Watermark time.Time `json:"watermark,omitzero"`
	// Paused lists the inputs paused for running ahead of the others.
	Paused []string `json:"paused,omitempty"`
	// StateKeys is the live key count per state family.
	StateKeys map[string]int64 `json:"state_keys,omitempty"`
}

// Stats returns the instance's totals.
func (rt *Runtime) Stats() Stats {
	s := Stats{
		Operator:        rt.cfg.Operator,
		Instance:        rt.cfg.Instance,
		Ready:           rt.ready.Load(),
		Steps:           rt.stats.steps.Load(),
		In:              rt.stats.in.Load(),
		Out:             rt.stats.out.Load(),
		DeadLettered:    rt.stats.deadLettered.Load(),
		SideOutput:      rt.stats.sideOutput.Load(),
		Redelivered:     rt.stats.redelivered.Load(),
		DuplicateFrames: rt.stats.duplicateFrames.Load(),
		FencedFrames:    rt.stats.fencedFrames.Load(),
		Control:         rt.stats.control.Load(),
		Retries:         rt.stats.retries.Load(),
		TimersFired:     rt.stats.timersFired.Load(),
	}
	if r := rt.reader.Load(); r != nil {
		for _, in := range rt.plan.inputs {
			if r.Paused(in.Name) {
				s.Paused = append(s.Paused, in.Name)
			}
		}
	}
	if ms := rt.stats.watermark.Load(); ms != 0 {
		s.Watermark = time.UnixMilli(ms).UTC()
	}
	if st := rt.storeRef.Load(); st != nil {
		s.StateKeys = st.Stats().Keys
	}
	return s
}
