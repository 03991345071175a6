package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/edge"
)

// Rescale gives operators of the pipeline new instance lists (set maps an
// operator ID to its instances, in order) and restarts the pipeline from
// its latest completed checkpoint under them:
//
//  1. the checkpoint is the latest one taken under the current assignment
//     (or, when none was taken since, the one the current assignment
//     restarted from);
//  2. the assignment is written with a compare-and-set. Every running
//     instance watches it and restarts: those whose key groups changed
//     rebuild their state from the checkpoint's snapshots, the rest restore
//     their own; dropped instances stop;
//  3. instances the new assignment drops are fenced at that checkpoint's
//     cut, so whatever they wrote after it — or write before they notice —
//     is ignored downstream.
//
// With from set, the pipeline restarts from that savepoint instead: a
// savepoint restores into any layout.
//
// A pipeline that has processed input but never completed a checkpoint
// cannot be rescaled: there is no cut to restart from.
func Rescale(ctx context.Context, js jetstream.JetStream, c *contracts.Contract, set map[string][]string, from string) (Assignment, error) {
	st, err := Open(ctx, js, c.Pipeline, 0) // as deployed: never change the replicas
	if err != nil {
		return Assignment{}, err
	}
	var pin *Snapshot
	if from != "" {
		sn, err := st.SnapshotOf(ctx, 0, from)
		if err != nil {
			return Assignment{}, err
		}
		pin = &sn
	}
	return reassign(ctx, st, js, c, set, pin, nil)
}

// reassign writes the assignment that gives set's operators their
// instances, restarting the pipeline from pin, or when pin is nil from its
// latest checkpoint, and fences the instances it drops. With version set,
// only over the assignment of that version (0: none).
func reassign(ctx context.Context, st *Store, js jetstream.JetStream, c *contracts.Contract, set map[string][]string, pin *Snapshot, version *uint64) (Assignment, error) {
	if err := checkSet(c, set); err != nil {
		return Assignment{}, err
	}
	cur, rev, err := st.Assignment(ctx)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Assignment{}, err
	}
	if version != nil && cur.Version != *version {
		return Assignment{}, fmt.Errorf("%w: the assignment is at version %d, not %d", ErrConflict, cur.Version, *version)
	}
	next := Assignment{
		Version:    cur.Version + 1,
		Operators:  maps.Clone(cur.Operators),
		Checkpoint: cur.Checkpoint,
		Manifests:  cur.Manifests,
		Changed:    time.Now().UTC(),
	}
	if next.Operators == nil {
		next.Operators = map[string][]string{}
	}
	latest, _, err := st.Latest(ctx)
	if pin != nil {
		next.Checkpoint, next.Manifests = pin.Checkpoint, pin.Manifests
	}
	switch {
	case pin != nil:
	case errors.Is(err, ErrNotFound):
		if err := checkUntouched(ctx, js, c); err != nil {
			return Assignment{}, err
		}
	case err != nil:
		return Assignment{}, err
	case latest.Assignment == cur.Version && latest.Checkpoint > cur.Checkpoint:
		next.Checkpoint, next.Manifests = latest.Checkpoint, latest.Manifests
	}
	for op, insts := range set {
		next.Operators[op] = slices.Clone(insts)
	}
	if _, err := st.PutAssignment(ctx, next, rev); err != nil {
		return Assignment{}, fmt.Errorf("checkpoint: rescale %s: %w", c.Pipeline, err)
	}
	// Fence the instances dropped — those of the checkpoint and those the
	// previous assignment ran — once the assignment is theirs no more. The
	// fences carry the new version: readers restarting under it wait for
	// them before reading a dropped writer's frames.
	// A restart from a chosen snapshot fences the instances it keeps too,
	// at once: one still running, or not started yet, must not have its
	// frames past the snapshot's cut read while the others restore.
	if pin != nil {
		for op, insts := range set {
			for _, inst := range insts {
				// One without a snapshot in it (added since) is fenced
				// whole: everything it wrote is past the cut.
				if err := fenceAt(ctx, st, op, inst, next); err != nil {
					return next, fmt.Errorf("checkpoint: fence %s/%s at %s: %w", op, inst, pin, err)
				}
			}
		}
	}
	for op, insts := range set {
		gone := map[string]bool{}
		for key := range next.Manifests {
			if o, inst, _ := strings.Cut(key, "/"); o == op {
				gone[inst] = true
			}
		}
		for _, inst := range cur.Operators[op] {
			gone[inst] = true
		}
		for _, inst := range insts {
			delete(gone, inst)
		}
		for _, inst := range slices.Sorted(maps.Keys(gone)) {
			if err := fenceRetired(ctx, st, op, inst, next); err != nil {
				return next, err
			}
		}
	}
	return next, nil
}

// checkSet checks a rescale request against the contract.
func checkSet(c *contracts.Contract, set map[string][]string) error {
	if len(set) == 0 {
		return errors.New("checkpoint: rescale: no operator given")
	}
	var errs []error
	for op, insts := range set {
		o, ok := c.Operator(op)
		if !ok {
			errs = append(errs, fmt.Errorf("checkpoint: rescale: contract %s declares no operator %q", c.File, op))
			continue
		}
		parts := c.Ingress.Partitions
		if e, ok := c.Edge(o.Input); ok {
			parts = e.Partitions
		}
		if len(insts) == 0 || len(insts) > parts {
			errs = append(errs, fmt.Errorf("checkpoint: rescale: operator %s reads %d partitions: it can run as 1 to %d instances, not %d", op, parts, parts, len(insts)))
		}
		if len(o.Before) > 0 && len(o.State) > 0 && len(insts) > 1 {
			errs = append(errs, fmt.Errorf("checkpoint: rescale: operator %s runs %s in its step (operators[].before in %s), which may key a record into any key group: it runs as one instance, owning them all, not %d; to run more, give %s an edge of its own (a new generation, weir shadow)",
				op, strings.Join(o.Before, ", "), c.File, len(insts), strings.Join(o.Before, ", ")))
		}
		seen := map[string]bool{}
		for _, in := range insts {
			if !ValidName(in) || seen[in] {
				errs = append(errs, fmt.Errorf("checkpoint: rescale: operator %s: instance %q is empty, repeated, or holds . * > / or a space", op, in))
			}
			seen[in] = true
		}
	}
	return errors.Join(errs...)
}

// checkUntouched refuses to rescale a pipeline without a checkpoint whose
// edges already carry frames.
func checkUntouched(ctx context.Context, js jetstream.JetStream, c *contracts.Contract) error {
	for _, e := range c.Edges {
		s, err := js.Stream(ctx, edge.StreamName(c.Pipeline, e.Name))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if s.CachedInfo().State.Msgs > 0 {
			return fmt.Errorf("checkpoint: refusing to rescale %s: it has run (edge %s holds %d messages) but completed no checkpoint to restart from; run a coordinator (or `weir checkpoint trigger`) first",
				c.Pipeline, e.Name, s.CachedInfo().State.Msgs)
		}
	}
	return nil
}

// fenceRetired fences an instance the new assignment drops: readers ignore
// whatever it wrote after the checkpoint's cut.
func fenceRetired(ctx context.Context, st *Store, op, inst string, a Assignment) error {
	if err := fenceAt(ctx, st, op, inst, a); err != nil {
		return fmt.Errorf("checkpoint: fence retired instance %s/%s: %w", op, inst, err)
	}
	// The assignment and the fence are in place: what is left of the
	// instance is its registration and any marker of input trimmed under
	// it, which a later instance of that name would otherwise inherit.
	if err := errors.Join(st.Deregister(ctx, op, inst), st.DeleteTrimmed(ctx, op, inst)); err != nil {
		return fmt.Errorf("checkpoint: retired instance %s/%s is fenced, but its records remain: %w", op, inst, err)
	}
	return nil
}

// fenceAt fences an instance at the cut of its snapshot in the checkpoint
// assignment a restarts from, with a generation above every one it ran.
func fenceAt(ctx context.Context, st *Store, op, inst string, a Assignment) error {
	f := Fence{Checkpoint: a.Checkpoint, Assignment: a.Version}
	if key := a.Manifests[op+"/"+inst]; key != "" {
		m, err := st.Manifest(ctx, key)
		if err != nil {
			return err
		}
		f.Generation, f.Cut = m.Generation, m.Outputs
	}
	old, ok, err := st.Fence(ctx, op, inst)
	if err != nil {
		return err
	}
	if ok {
		f.Generation = max(f.Generation, old.Generation)
	}
	// An instance runs generation 1 until its first restore.
	f.Generation = max(f.Generation, 1) + 1
	return st.PutFence(ctx, op, inst, f)
}
