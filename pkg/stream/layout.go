package stream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/keygroup"
)

// errReassigned stops a run whose pipeline was rescaled: Run starts again
// under the new assignment.
var errReassigned = errors.New("stream: the pipeline's assignment changed")

// errRetired stops a run whose instance the assignment no longer names.
var errRetired = errors.New("stream: instance retired by the pipeline's assignment")

// layout is what the pipeline's assignment means for this instance: the
// input partitions and key groups it owns, and the writers of its input.
type layout struct {
	// assignment is nil when the pipeline was never scaled: the instance
	// owns every partition and every key group.
	assignment *checkpoint.Assignment
	version    uint64
	// lo, hi are the owned input partitions; groupLo, groupHi their key
	// groups.
	lo, hi           int
	groupLo, groupHi int
	// writers are the upstream instances writing the input edge
	// ("operator/instance") when the upstream operator is assigned; nil
	// when each partition has one writer.
	writers []string
	// chans are the input channels: a partition, or a partition and one of
	// its writers when the upstream operator runs several instances;
	// chanInput maps each to its partition's input name.
	chans     []string
	chanInput map[string]string
}

// watch is the run's watch on the assignment (start):
// reassigned signals a change from layVersion, the version the run laid
// itself out by.
type watch struct {
	reassigned chan struct{}
	layVersion atomic.Uint64
}

// owns reports whether the instance owns key group kg.
func (l layout) owns(kg int) bool { return kg >= l.groupLo && kg < l.groupHi }

// loadLayout reads the assignment and narrows the plan's inputs to the
// partitions this instance owns.
func (rn *run) loadLayout(ctx context.Context) error {
	all := rn.plan.inputs
	lay := layout{lo: 0, hi: len(all), groupLo: 0, groupHi: rn.plan.keyGroups}
	a, _, err := rn.bar.store.Assignment(ctx)
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
	case err != nil:
		return fmt.Errorf("stream: read assignment: %w", err)
	default:
		lay.assignment, lay.version = &a, a.Version
		rn.watch.layVersion.Store(a.Version)
		k, n, ok := a.Index(rn.rt.cfg.Operator, rn.rt.cfg.Instance)
		if ok && k < 0 {
			return fmt.Errorf("%w: operator %s runs as instances %s (assignment version %d), not %s",
				errRetired, rn.rt.cfg.Operator, strings.Join(a.Operators[rn.rt.cfg.Operator], ", "), a.Version, rn.rt.cfg.Instance)
		}
		if ok {
			lay.lo, lay.hi = checkpoint.Owned(k, n, len(all))
		}
		if up := rn.plan.upstream; up != "" {
			for _, inst := range a.Operators[up] {
				lay.writers = append(lay.writers, up+"/"+inst)
			}
		}
	}
	if len(rn.rt.before) > 0 && len(rn.plan.families) > 0 && (lay.lo > 0 || lay.hi < len(all)) {
		return fmt.Errorf("stream: refusing to start: operator %s runs %s in its step (operators[].before in %s), which may key a record into any key group, and the assignment (version %d) gives instance %s partitions [%d, %d) of %d: an operator with a chain runs as one instance, owning every key group; rescale it to one (weir scale), or give %s an edge of its own",
			rn.rt.cfg.Operator, strings.Join(rn.rt.beforeNames, ", "), rn.plan.contract.File, lay.version, rn.rt.cfg.Instance, lay.lo, lay.hi, len(all), strings.Join(rn.rt.beforeNames, ", "))
	}
	kl := keygroup.Layout{Groups: rn.plan.keyGroups, Partitions: len(all)}
	if lay.hi > lay.lo {
		lay.groupLo, _ = kl.GroupRange(lay.lo)
		_, lay.groupHi = kl.GroupRange(lay.hi - 1)
	} else {
		lay.groupLo, lay.groupHi = 0, 0
	}
	rn.plan.inputs = all[lay.lo:lay.hi]
	rn.lay = lay
	rn.lay.chans, rn.lay.chanInput = nil, map[string]string{}
	for _, in := range rn.plan.inputs {
		if lay.writers == nil {
			rn.lay.chans = append(rn.lay.chans, in.Name)
			rn.lay.chanInput[in.Name] = in.Name
			continue
		}
		for _, w := range lay.writers {
			c := channelName(in.Name, w)
			rn.lay.chans = append(rn.lay.chans, c)
			rn.lay.chanInput[c] = in.Name
		}
	}
	return nil
}

// channelName names the channel of one writer on one input partition.
func channelName(input, writer string) string { return input + "@" + writer }

// channel returns the channel a message of producer on input belongs to,
// or "" for a writer the assignment does not name (its control records
// are ignored; a fenced zombie's frames never get here).
func (l layout) channel(input, producer string) string {
	if l.writers == nil {
		return input
	}
	if slices.Contains(l.writers, producer) {
		return channelName(input, producer)
	}
	return ""
}

// channelsOf lists the channels of an input partition.
func (l layout) channelsOf(input string) []string {
	if l.writers == nil {
		return []string{input}
	}
	out := make([]string, len(l.writers))
	for i, w := range l.writers {
		out[i] = channelName(input, w)
	}
	return out
}

// deliveryChannel is the channel a delivery belongs to.
func (l layout) deliveryChannel(d edge.Delivery) string {
	if d.Frame == nil {
		return d.Input.Name // ingress, or a malformed frame that deliver refuses
	}
	return l.channel(d.Input.Name, d.Frame.Producer)
}

// start makes the step loop stop when the assignment changes.
// It starts before the assignment is read, so no change is missed.
func (w *watch) start(ctx context.Context, store *checkpoint.Store) error {
	// The channel is this run's: a previous run's watcher, still winding
	// down, signals its own.
	ch := make(chan struct{}, 1)
	w.reassigned = ch
	w.layVersion.Store(0)
	return store.WatchAssignment(ctx, func(a checkpoint.Assignment) {
		if a.Version != w.layVersion.Load() {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	})
}
