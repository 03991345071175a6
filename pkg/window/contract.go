package window

import (
	"fmt"

	"github.com/weirflow/weir/contracts"
)

// SpecOf is the window spec contract c declares: the shape of its
// emission.window with its triggers, accumulation and allowed lateness.
// A window operator's factory reads it from the contract it runs, so the
// shape is stated once, beside the triggers and lateness, where Lint holds
// the state's TTLs to it.
func SpecOf(c *contracts.Contract) (Spec, error) {
	if !c.Emission.Window.Declared() {
		return Spec{}, fmt.Errorf("%w: contract %s declares no window (emission.window)", ErrInvalidSpec, c.File)
	}
	shape, err := ShapeOf(c.Emission.Window)
	if err != nil {
		return Spec{}, err
	}
	return FromContract(shape, c.Emission)
}

// ShapeOf is the shape (Kind, Size, Slide, Gap) of a contract's window.
func ShapeOf(w contracts.Window) (Spec, error) {
	kinds := map[string]Kind{contracts.WindowTumbling: Tumbling, contracts.WindowSliding: Sliding,
		contracts.WindowSession: Session, contracts.WindowGlobal: Global}
	k, ok := kinds[w.Kind]
	if !ok {
		return Spec{}, fmt.Errorf("%w: emission.window.kind %q is not tumbling, sliding, session or global", ErrInvalidSpec, w.Kind)
	}
	return Spec{Kind: k, Size: w.Size.D(), Slide: w.Slide.D(), Gap: w.Gap.D()}, nil
}

// ShippedShape is the window shape of a contract shipped with weir
// (contracts.Shipped), for code that builds a query's reference model
// beside the operator. It panics when the shipped contract does not load
// or declares no window: the build itself is broken, which its tests show.
func ShippedShape(name string) Spec {
	c, err := contracts.Shipped(name)
	if err != nil {
		panic(fmt.Sprintf("window: shipped contract %s: %v", name, err))
	}
	s, err := ShapeOf(c.Emission.Window)
	if err != nil {
		panic(fmt.Sprintf("window: shipped contract %s: %v", name, err))
	}
	return s
}

// FromContract completes a window shape (Kind, Size, Slide, Gap) with the
// emission decisions of a contract: triggers, accumulation and allowed
// lateness. SpecOf takes the shape from the contract too.
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
