package stream

import (
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/ingress"
)

// shedder drops optional ingress records while the operator is behind:
// overload.policy shed. Behind is what its consumers had not delivered
// after the last message of each input partition, summed, above
// overload.max_lag; optional is the contract's predicate on the payload.
// A dropped record is filed by its coordinate on the shed subject, so
// nothing is skipped silently.
type shedder struct {
	maxLag   int64
	optional *ingress.Predicate
	pending  map[string]uint64 // per input: not yet delivered after its last message
}

// shedPlan is what the plan reads of policy shed: nil unless the policy
// is shed and the operator reads the ingress.
type shedPlan struct {
	maxLag int
	shed   contracts.Shed
}

func planShed(c *contracts.Contract, readsIngress bool) *shedPlan {
	if c.Overload.Policy != contracts.PolicyShed || !readsIngress {
		return nil
	}
	return &shedPlan{maxLag: c.Overload.MaxLag, shed: c.Overload.Shed}
}

// newShedder returns a run's shedder; nil for a nil plan.
func newShedder(p *shedPlan) *shedder {
	if p == nil {
		return nil
	}
	return &shedder{maxLag: int64(p.maxLag), optional: ingress.NewPredicate(p.shed.Field, p.shed.Values), pending: map[string]uint64{}}
}

// drop notes an input's pending count and reports whether the record of
// payload is dropped, with the lag that decided it.
func (s *shedder) drop(input string, pending uint64, payload []byte) (lag int64, ok bool) {
	s.pending[input] = pending
	for _, p := range s.pending {
		lag += int64(p)
	}
	if lag <= s.maxLag {
		return lag, false
	}
	return lag, s.optional.Match(payload)
}
