package window

import (
	"fmt"

	"github.com/weirflow/weir/contracts"
)

// FromContract completes a window shape (Kind, Size, Slide, Gap), which is
// the query's own business, with the emission decisions the pipeline's
// contract declares: triggers, accumulation and allowed lateness.
func FromContract(shape Spec, e contracts.Emission) (Spec, error) {
	s := shape
	s.EarlyEvery = e.Triggers.Early.Every.D()
	s.EarlyCount = e.Triggers.Early.Count
	s.OnTime = e.Triggers.OnTime
	s.LateEach = e.Triggers.Late.Each
	s.LateEvery = e.Triggers.Late.Every.D()
	s.AllowedLateness = e.AllowedLateness.D()
	switch e.Accumulation {
	case contracts.AccumulationDiscarding:
		s.Accumulation = Discarding
	case contracts.AccumulationAccumulating:
		s.Accumulation = Accumulating
	case contracts.AccumulationRetracting:
		s.Accumulation = Retracting
	default:
		return Spec{}, fmt.Errorf("window: emission.accumulation %q is not discarding, accumulating or retracting", e.Accumulation)
	}
	return s, s.Validate()
}
