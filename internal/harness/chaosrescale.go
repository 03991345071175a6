package harness

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/checkpoint"
)

// services are the run's service processes, the second instances a
// rescale started included.
func (r *pipelineRun) services() []**child {
	return append(pointers(r.procs[:len(r.procs)-r.coordinators()]), pointers(r.extra)...)
}

// rescaled are the processes of the services whose operators a rescale
// moves: those a rescale restarts.
func (r *pipelineRun) rescaled() []**child {
	var out []**child
	for _, p := range r.services() {
		svc, _ := strings.CutSuffix((*p).name, "-"+chaosInstance)
		if _, ok := r.scalable()[svc]; ok {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return r.services() // a rescale that keeps one instance restarts them all
	}
	return out
}

// scalable maps each service to its operators that a rescale runs as two
// instances: those that read more than one partition, but for one that
// keeps state by a key other than the event ID and reads the ingress — the
// corpus is partitioned by event ID, so a second instance would be handed
// records of key groups it does not own, and dead-letter them (weir's
// answer to an input not partitioned by the state key; scaling such an
// operator needs a keyed edge before it) — and but for one that keeps
// state with operators chained into its step, which runs as one instance
// (operators[].before).
func (r *pipelineRun) scalable() map[string][]string {
	out := map[string][]string{}
	for _, op := range r.c.Operators {
		if r.partitionsOf(op.ID) < 2 || op.Input == "ingress" && len(op.State) > 0 && op.Keying != contracts.KeyingID || len(op.Before) > 0 && len(op.State) > 0 {
			continue
		}
		out[op.Service] = append(out[op.Service], op.ID)
	}
	return out
}

// partitionsOf is how many partitions operator op reads.
func (r *pipelineRun) partitionsOf(op string) int {
	o, _ := r.c.Operator(op)
	if e, ok := r.c.Edge(o.Input); ok {
		return e.Partitions
	}
	return r.c.Ingress.Partitions
}

// instancesOf lists the instances operator op runs as.
func (r *pipelineRun) instancesOf(op string) []string {
	if insts, ok := r.instances[op]; ok {
		return insts
	}
	return []string{childInstance}
}

// rescale moves the scalable operators from one instance to two, starting
// a process per service for the second, or back from two to one, waiting
// for the second's processes to retire. It restarts the pipeline from its
// latest checkpoint, waiting for the first if none has completed yet, and
// returns the new assignment's version.
func (r *pipelineRun) rescale(ctx context.Context, out *chaosOutcome) (uint64, error) {
	var st *checkpoint.Store
	for deadline := time.Now().Add(time.Minute); ; {
		var err error
		if st, err = checkpoint.Existing(ctx, r.js, r.c.Pipeline); err == nil {
			if _, _, err = st.Latest(ctx); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("rescale: no checkpoint to restart from after a minute: %w", err)
		}
		select {
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	scaleOut := r.extra == nil
	insts := []string{childInstance}
	if scaleOut {
		insts = append(insts, chaosInstance)
	} else {
		// The second instances' processes are about to end: what they
		// used and declared is read now, once every instance answers —
		// one restoring, or restarted, registers its status afterwards.
		for deadline := time.Now().Add(time.Minute); ; {
			st, err := r.instanceStats(ctx)
			if err == nil {
				r.declare(st, out)
				break
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("rescale: the instances did not answer for a minute: %w", err)
			}
			select {
			case <-time.After(250 * time.Millisecond):
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		for _, p := range r.extra {
			r.sample(p, out)
		}
	}
	set := map[string][]string{}
	for _, ops := range r.scalable() {
		for _, op := range ops {
			set[op] = insts
		}
	}
	if len(set) == 0 {
		// Nothing can run as two: the rescale keeps the one instance of
		// the first operator, and restarts the pipeline from its latest
		// checkpoint under a new assignment all the same.
		set[r.c.Operators[0].ID], scaleOut = []string{childInstance}, false
	}
	a, err := checkpoint.Rescale(ctx, r.js, r.c, set, "")
	if err != nil {
		return 0, fmt.Errorf("rescale to %s: %w", strings.Join(insts, ", "), err)
	}
	r.instances = set
	if !scaleOut {
		// The second instances retire: each process ends on its own once
		// it reads the assignment.
		for _, p := range r.extra {
			select {
			case <-p.done:
			case <-time.After(time.Minute):
				return 0, fmt.Errorf("rescale: %s still runs a minute after the assignment retired it", p.name)
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			if err := p.stop(); err != nil {
				return 0, fmt.Errorf("rescale: %s retired with an error: %w", p.name, err)
			}
		}
		r.extra = nil
		return a.Version, nil
	}
	for _, svc := range slices.Sorted(maps.Keys(r.scalable())) {
		name := svc + "-" + chaosInstance
		p, _, err := spawn(ctx, r.b.exe, r.dir, name, "service", "-query", r.query, "-service", svc, "-replicas", strconv.Itoa(r.replicas),
			"-operators", strings.Join(r.scalable()[svc], ","), "-instance", chaosInstance,
			"-nats", r.url, "-dir", filepath.Join(r.dir, name), "-effect", r.b.effect, "-checkpoint-mode", r.mode)
		if err != nil {
			return 0, err
		}
		r.extra = append(r.extra, p)
	}
	return a.Version, nil
}
