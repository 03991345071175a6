package harness

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/results"
	"github.com/weirflow/weir/internal/status"
	"github.com/weirflow/weir/services/coordinator"
)

// sample records process p's peak resident memory in out, as the kernel
// counts it: read before the process is killed, and at the end.
func (r *pipelineRun) sample(p *child, out *chaosOutcome) {
	if slices.ContainsFunc(r.brokers(), func(b **child) bool { return *b == p }) {
		return // the NATS server's memory is not weir's to bound
	}
	if u, err := p.usage(); err == nil {
		out.PeakRSS[p.name] = max(out.PeakRSS[p.name], u.PeakRSS)
	}
}

// settle waits until the run's results equal want — compared once they
// have stopped changing for a moment — or have not changed for stall,
// starting processes that ended on their own again meanwhile, and fills
// out.
func (r *pipelineRun) settle(ctx context.Context, want map[string]map[string][]results.Revision, since time.Time, stall time.Duration, out *chaosOutcome) error {
	var lastSeq uint64
	changed := time.Now()
	compared := uint64(0)
	for {
		if err := r.restartEnded(ctx, out); err != nil {
			return err
		}
		seq, err := r.resultSeq(ctx)
		if err == nil && seq != lastSeq {
			lastSeq, changed = seq, time.Now()
		}
		quiet := time.Since(changed)
		if err == nil && quiet >= settleQuiet(r.b.interval) && compared != lastSeq+1 && r.caughtUp(ctx) == nil {
			got, repeated, err := r.results(ctx)
			if err == nil {
				compared = lastSeq + 1
				out.judge(want, got, repeated)
				out.Settled = changed.Sub(since).Seconds()
				if out.Problem == "" {
					out.Settled = max(out.Settled, 0)
					return r.checkMemory(ctx, out)
				}
			}
		}
		if quiet >= stall {
			if out.Problem == "" {
				out.Problem = fmt.Sprintf("the pipeline did not catch up: %v", errors.Join(err, r.caughtUp(ctx)))
			}
			out.Problem += fmt.Sprintf(" (results unchanged for %s)", stall)
			return nil
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// settleQuiet is how long the result streams must not change before a
// run's results are compared: longer than a checkpoint interval, after
// which a transactional sink or an outbox releases what it holds.
func settleQuiet(interval time.Duration) time.Duration {
	return max(2*time.Second, interval+time.Second)
}

// caughtUp returns nil once every process of the run is up, every
// operator instance ready with nothing left to store, and every input
// delivered to its end: only then can its results be final.
func (r *pipelineRun) caughtUp(ctx context.Context) error {
	st, err := r.instanceStats(ctx)
	if err != nil {
		return err
	}
	for _, stats := range st {
		for _, s := range stats {
			if !s.Ready || s.Storing > 0 {
				return fmt.Errorf("operator %s/%s not ready or still storing", s.Operator, s.Instance)
			}
		}
	}
	for _, op := range r.c.Operators {
		names, input := r.c.Ingress.StreamNames(), "ingress"
		if _, ok := r.c.Edge(op.Input); ok {
			names, input = []string{edge.StreamName(r.c.Pipeline, op.Input)}, op.Input
		}
		name := strings.Join(names, ", ")
		// The consumers of the partitions each instance owns now: those
		// of a layout a rescale left behind are read by no one.
		owned := map[string]bool{}
		insts := r.instancesOf(op.ID)
		for k, inst := range insts {
			lo, hi := checkpoint.Owned(k, len(insts), r.partitionsOf(op.ID))
			for p := lo; p < hi; p++ {
				owned[edge.ConsumerName(edge.ConsumerPrefix(r.c.Pipeline, op.ID, inst), fmt.Sprintf("%s/%d", input, p))] = false
			}
		}
		for _, n := range names {
			s, err := r.js.Stream(ctx, n)
			if err != nil {
				return err
			}
			for info := range s.ListConsumers(ctx).Info() {
				if _, ok := owned[info.Name]; !ok {
					continue
				}
				owned[info.Name] = true
				// Only what is left to deliver counts: an acknowledgement
				// lost with a broker restarted is redelivered after the ack
				// wait and dropped by position, having changed nothing.
				if info.NumPending > 0 {
					return fmt.Errorf("consumer %s of %s: %d to deliver", info.Name, n, info.NumPending)
				}
			}
		}
		for c, seen := range owned {
			if !seen {
				return fmt.Errorf("consumer %s of %s not there yet", c, name)
			}
		}
	}
	return nil
}

// instanceStats asks every operator instance the run has for its Stats,
// keyed by the process it runs in.
func (r *pipelineRun) instanceStats(ctx context.Context) (map[string][]status.Stats, error) {
	for _, p := range append(r.procs, r.extra...) {
		if err := p.failed(); err != nil {
			return nil, err
		}
	}
	out := map[string][]status.Stats{}
	for _, op := range r.c.Operators {
		for _, inst := range r.instancesOf(op.ID) {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			st, err := status.RequestStats(rctx, r.nc, r.c.Pipeline, op.ID, inst)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("stats of %s/%s: %w", op.ID, inst, err)
			}
			proc := op.Service
			if inst == chaosInstance {
				proc += "-" + chaosInstance
			}
			out[proc] = append(out[proc], st)
		}
	}
	return out, nil
}

// declare records in out what each service and coordinator process
// declares it stays under: the sum of its operators' budgets, as they
// answer them, and a coordinator's own.
func (r *pipelineRun) declare(st map[string][]status.Stats, out *chaosOutcome) {
	for proc, stats := range st {
		var sum int64
		for _, s := range stats {
			sum += s.Memory
		}
		out.Budget[proc] = max(out.Budget[proc], sum)
	}
	for _, p := range r.procs[len(r.procs)-r.coordinators():] {
		out.Budget[p.name] = coordinator.Memory
	}
}

// checkMemory reads the peak resident memory of every service and
// coordinator process still running into out, and says in out which went
// over what it declared.
func (r *pipelineRun) checkMemory(ctx context.Context, out *chaosOutcome) error {
	st, err := r.instanceStats(ctx)
	if err != nil {
		return err
	}
	r.declare(st, out)
	for _, p := range append(r.procs, r.extra...) {
		r.sample(p, out)
	}
	for _, proc := range slices.Sorted(maps.Keys(out.PeakRSS)) {
		peak, budget := out.PeakRSS[proc], out.Budget[proc]
		if budget == 0 && out.Problem == "" {
			out.Problem = fmt.Sprintf("%s declared no memory budget", proc)
		}
		if peak > budget && out.Problem == "" {
			out.Problem = fmt.Sprintf("%s reached %d MiB resident, over the %d MiB it declares", proc, peak>>20, budget>>20)
		}
	}
	return nil
}

// judge compares got, a run's results, and the messages it stored more
// than once with want, the failure-free run's, and says in o what
// differs.
func (o *chaosOutcome) judge(want, got map[string]map[string][]results.Revision, repeated []string) {
	o.Missing, o.Repeated, o.Extra, o.Differ, o.Problem = 0, len(repeated), 0, 0, ""
	for _, e := range slices.Sorted(maps.Keys(want)) {
		c := results.CompareEdge(e, want[e], got[e])
		o.Missing += len(c.OnlyA)
		o.Extra += len(c.OnlyB)
		for _, d := range c.Differ {
			switch d.Kind {
			case "missing":
				o.Missing++
			case "extra":
				o.Extra++
			default:
				o.Differ++
			}
		}
		if o.Problem == "" {
			o.Problem = firstProblem(c)
		}
	}
	if o.Problem == "" && len(repeated) > 0 {
		o.Problem = fmt.Sprintf("result %s stored more than once", repeated[0])
	}
}

// firstProblem describes the first difference of an edge's comparison
// with the failure-free run (A), "" when there is none.
func firstProblem(c results.EdgeComparison) string {
	switch {
	case len(c.OnlyA) > 0:
		return fmt.Sprintf("edge %s: result %s missing", c.Edge, c.OnlyA[0])
	case len(c.OnlyB) > 0:
		return fmt.Sprintf("edge %s: result %s not in the failure-free run", c.Edge, c.OnlyB[0])
	case len(c.Differ) > 0:
		d := c.Differ[0]
		switch d.Kind {
		case "missing":
			return fmt.Sprintf("edge %s: result %s lacks revision %d, %s", c.Edge, d.Result, d.Revision, d.A.Value)
		case "extra":
			return fmt.Sprintf("edge %s: result %s has an extra revision %d, %s", c.Edge, d.Result, d.Revision, d.B.Value)
		}
		return fmt.Sprintf("edge %s: result %s revision %d is %s, want %s", c.Edge, d.Result, d.Revision, d.B.Value, d.A.Value)
	}
	return ""
}

// restartEnded starts again every process of the run that has ended on
// its own, counting them in out.
func (r *pipelineRun) restartEnded(ctx context.Context, out *chaosOutcome) error {
	for _, p := range append(append(r.brokers(), pointers(r.procs)...), pointers(r.extra)...) {
		if (*p).failed() == nil {
			continue
		}
		if err := r.again(ctx, p); err != nil {
			return err
		}
		out.Exits++
	}
	return nil
}

// again starts the process *p has run again, as it was started, and puts
// it in *p.
func (r *pipelineRun) again(ctx context.Context, p **child) error {
	c, _, err := spawn(ctx, r.b.exe, r.dir, (*p).name, (*p).args...)
	if err != nil {
		return fmt.Errorf("start %s again: %w", (*p).name, err)
	}
	*p = c
	return nil
}

// pointers are pointers to the elements of cs.
func pointers(cs []*child) []**child {
	out := make([]**child, len(cs))
	for i := range cs {
		out[i] = &cs[i]
	}
	return out
}

// lettersEdge is the name the run's dead letters and side outputs go by
// among its result edges.
const lettersEdge = "dead letters"

// results reads the run's result edges, revision by revision, and its
// dead letters and side outputs (letters).
func (r *pipelineRun) results(ctx context.Context) (map[string]map[string][]results.Revision, []string, error) {
	out := map[string]map[string][]results.Revision{}
	var repeated []string
	for _, e := range results.Edges(r.c, "") {
		revs, rep, err := results.Read(ctx, r.js, r.c.Pipeline, e, time.Time{})
		if err != nil {
			return nil, nil, err
		}
		out[e] = revs
		repeated = append(repeated, rep...)
	}
	letters, err := r.letters(ctx)
	if err != nil {
		return nil, nil, err
	}
	out[lettersEdge] = letters
	return out, repeated, nil
}

// letters reads the run's dead-letter stream: per letter — its subject
// (dead letter, side output or shed), operator, source subject, field and
// a digest of its payload, what names it alike in every run of a corpus —
// one revision for each time it was filed. The stream sequence is left
// out: the corpus's partitions interleave differently from run to run. A
// letter filed again after a failure is JetStream's duplicate, dropped
// by its message ID; one stored twice is an extra revision.
func (r *pipelineRun) letters(ctx context.Context) (map[string][]results.Revision, error) {
	out := map[string][]results.Revision{}
	st, err := r.js.Stream(ctx, deadletter.StreamName(r.c.Pipeline))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	err = results.Each(ctx, st, func(m jetstream.Msg, seq uint64) error {
		l, err := deadletter.Parse(m)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(l.Payload)
		id := fmt.Sprintf("%s %s field %s payload %x", m.Subject(), l.At.Subject, l.Field, sum[:8])
		out[id] = append(out[id], results.Revision{Seq: seq, Value: json.RawMessage(strconv.Quote(l.Field))})
		return nil
	})
	return out, err
}

// resultSeq sums the last sequences of the run's result streams: it
// changes whenever a result is stored.
func (r *pipelineRun) resultSeq(ctx context.Context) (uint64, error) {
	var sum uint64
	for _, e := range results.Edges(r.c, "") {
		s, err := r.js.Stream(ctx, edge.StreamName(r.c.Pipeline, e))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return 0, err
		}
		sum += s.CachedInfo().State.LastSeq
	}
	return sum, nil
}
