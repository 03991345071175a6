package harness

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/cli"
	"github.com/weirflow/weir/internal/results"
	"github.com/weirflow/weir/pkg/checkpoint"
	"github.com/weirflow/weir/pkg/deadletter"
	"github.com/weirflow/weir/pkg/edge"
	"github.com/weirflow/weir/pkg/ingress"
	"github.com/weirflow/weir/pkg/keygroup"
	"github.com/weirflow/weir/pkg/nexmark"
	"github.com/weirflow/weir/pkg/status"
	"github.com/weirflow/weir/services/coordinator"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
)

const chaosUsage = `usage: weir chaos [-query Q,…|all] [-modes aligned,unaligned] [-rounds N] [-seed S] [-events N] [-faults F,…] [-cluster 3] [-json] [-dir DIR]

Runs each query the way it is deployed — the broker, every service and two
coordinators, one of them a standby, as processes of their own, every write
synced, checkpoints on — over a seeded corpus (events out of order within
the contract's bound, duplicate IDs, a hot key, timestamps in the future),
first without failures, then once per checkpoint mode while, at the random
moments of a seeded schedule, it injects one fault a round (-faults):

  service      SIGKILL an operator instance's process, and start it again
  coordinator  SIGKILL a coordinator — the lease holder or the standby
  broker       SIGKILL the NATS server (with -cluster 3, one of the
               three nodes, every stream and bucket replicated to each)
  rescale      move every operator that can run as two — it reads more
               than one partition, and they carry its state's key groups
               — from one instance to two, the second in a process of its
               own, or back (where none can, restart the pipeline from its
               latest checkpoint under a new assignment); then SIGKILL one
               of the processes involved (an instance, a coordinator or
               the broker) while the instances restore
  pause        SIGSTOP a process — any of them, the broker too — for
               longer than the coordinators' lease (8 to 10 s), then
               SIGCONT it
  host         SIGKILL every service process and start them again on
               empty data directories, as on new hosts: the operators
               restore their state from the latest checkpoint

Each block of as many rounds as there are kinds has each kind once. The
corpus is published while the faults go on; the generator resumes after a
broker's. Afterwards it compares the committed results of each run with
the failure-free one results.Revision by results.Revision, as weir compare does: none may
be missing, repeated, extra or different. So are its dead letters and
side outputs, each named by its kind, operator, source subject, field and
payload: none may be missing or filed twice. It waits for the results to stop
changing, not for a fixed time, and reports how long the pipeline took to
settle after the last fault. Each service and coordinator process must
also have stayed within the memory its status declares: its peak resident
memory, read from /proc before every kill and at the end, is checked
against the sum of its operators' budgets.

The seed is printed; the same -seed, -query, -rounds, -events and -faults
replay a schedule — which faults, which processes and after what pauses —
but not where in the work each fault lands, which depends on the machine:
a failure may take several runs of a seed to show. A result stored twice
is a failure: the runs are shorter than any stream's duplicate window.
Exits 1 when any run's results differ.
`

// The kinds of fault weir chaos injects.
const (
	faultService     = "service"
	faultCoordinator = "coordinator"
	faultBroker      = "broker"
	faultRescale     = "rescale"
	faultPause       = "pause"
	faultHost        = "host"
)

// chaosFaults are the kinds of fault, in the order reports list them.
var chaosFaults = []string{faultService, faultCoordinator, faultBroker, faultRescale, faultPause, faultHost}

// chaosInstance names the second instance of the operators a rescale runs
// as two.
const chaosInstance = "chaos-2"

// chaosTimeout is the coordinators' checkpoint timeout in a chaos run;
// their lease lasts two seconds longer, and a pause longer still.
const chaosTimeout = 5 * time.Second

// chaosOutcome is one run's report.
type chaosOutcome struct {
	Query  string         `json:"query"`
	Mode   string         `json:"mode"`
	Seed   int64          `json:"seed"`
	Rounds int            `json:"rounds"`
	Faults map[string]int `json:"faults"`
	// Interrupted counts the rescales whose kill came before a checkpoint
	// under the new assignment had completed.
	Interrupted int `json:"rescales_interrupted"`
	// Schedule says what each round did, in order.
	Schedule []string `json:"schedule"`
	// Exits counts processes found ended on their own, started again.
	Exits  int `json:"exits"`
	Events int `json:"events"`
	// Results and Revisions are the failure-free run's.
	Results   int `json:"results"`
	Revisions int `json:"revisions"`
	// Letters counts the failure-free run's dead letters and side
	// outputs, which the run's must equal (Missing and Extra count theirs
	// too).
	Letters  int `json:"letters"`
	Missing  int `json:"missing"`
	Repeated int `json:"repeated"`
	Extra    int `json:"extra"`
	Differ   int `json:"differ"`
	// Settled is how long after the last fault the results matched, or
	// last changed.
	Settled float64 `json:"settled_seconds"`
	// PeakRSS is each service and coordinator process's peak resident
	// memory, and Budget what it declares, in bytes.
	PeakRSS map[string]int64 `json:"peak_rss_bytes,omitempty"`
	Budget  map[string]int64 `json:"budget_bytes,omitempty"`
	// Problem is the first difference, or why the run could not finish.
	Problem string `json:"problem,omitempty"`
	// Logs is the run's directory, holding each process's log
	// (<process>.log): kept with -dir.
	Logs string `json:"logs,omitempty"`
	OK   bool   `json:"ok"`
}

func (o chaosOutcome) String() string {
	var faults []string
	for _, k := range chaosFaults {
		if n := o.Faults[k]; n > 0 {
			faults = append(faults, fmt.Sprintf("%s %d", k, n))
		}
	}
	s := fmt.Sprintf("%s %s: seed %d, %d rounds (%s", o.Query, o.Mode, o.Seed, o.Rounds, strings.Join(faults, ", "))
	if o.Faults[faultRescale] > 0 {
		s += fmt.Sprintf("; %d rescales interrupted", o.Interrupted)
	}
	if o.Exits > 0 {
		s += fmt.Sprintf("; %d processes ended on their own and were started again", o.Exits)
	}
	s += fmt.Sprintf("), %d events, %d results in %d revisions and %d letters: ", o.Events, o.Results, o.Revisions, o.Letters)
	var peak, budget int64
	for p, n := range o.PeakRSS {
		if n > peak {
			peak, budget = n, o.Budget[p]
		}
	}
	if o.OK {
		return s + fmt.Sprintf("all equal results.Revision by results.Revision, settled %.1fs after the last fault; peak memory %d of %d MiB declared", o.Settled, peak>>20, budget>>20)
	}
	return s + fmt.Sprintf("%d missing, %d repeated, %d extra, %d different; %s; the rounds: %s", o.Missing, o.Repeated, o.Extra, o.Differ, o.Problem, strings.Join(o.Schedule, "; "))
}

// chaosCmd is `weir chaos`.
func (h *Harness) chaosCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cat := h.Catalog
	fs := cli.NewFlags("weir chaos", getenv)
	queries, modes, kinds, dir := new(string), new(string), new(string), new(string)
	rounds, events := new(int), new(int)
	seed := new(int)
	rate := new(float64)
	asJSON, inOrder := new(bool), new(bool)
	nodes := new(int)
	interval, stall := new(time.Duration), new(time.Duration)
	fs.String(queries, "query", "WEIR_QUERY", "all", "queries, comma-separated, or all: "+strings.Join(cat.Names(), ", "))
	fs.String(modes, "modes", "WEIR_CHAOS_MODES", contracts.CheckpointAligned+","+contracts.CheckpointUnaligned, "checkpoint modes to run each query in, comma-separated")
	fs.String(kinds, "faults", "WEIR_CHAOS_FAULTS", strings.Join(chaosFaults, ","), "kinds of fault to inject, comma-separated")
	fs.Bool(inOrder, "in-order", "WEIR_CHAOS_IN_ORDER", false, "inject the faults in the order -faults lists them, a kind may repeat, rather than in seeded permutations")
	fs.Int(rounds, "rounds", "WEIR_CHAOS_ROUNDS", 10, "faults per query and mode")
	fs.Int(seed, "seed", "WEIR_CHAOS_SEED", 0, "seed of the kill schedule (0: from the clock)")
	fs.Int(events, "events", "WEIR_CHAOS_EVENTS", 20000, "events in the corpus")
	fs.Float64(rate, "rate", "WEIR_CHAOS_RATE", 2000, "events a second the corpus is published at")
	fs.Duration(interval, "checkpoint-interval", "WEIR_CHECKPOINT_INTERVAL", time.Second, "checkpoint interval")
	fs.Duration(stall, "stall", "WEIR_CHAOS_STALL", time.Minute, "how long the results may stay unchanged and still differ before a run fails")
	fs.Bool(asJSON, "json", "WEIR_CHAOS_JSON", false, "print one JSON object per run")
	fs.Int(nodes, "cluster", "WEIR_CHAOS_CLUSTER", 1, "brokers: 1, or the nodes of a cluster (3) with every stream and bucket replicated to each; a broker fault then hits one node")
	fs.String(dir, "dir", "WEIR_CHAOS_DIR", "", "scratch directory for storage and the processes' logs (default: a temporary directory, removed)")
	if cli.WantsHelp(args) {
		fmt.Fprint(stdout, chaosUsage)
	}
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	chosen, err := cat.Choose(*queries, nil)
	if err != nil {
		return fmt.Errorf("weir chaos: %w", err)
	}
	var chosenModes []string
	for m := range strings.SplitSeq(*modes, ",") {
		if _, err := withMode(&contracts.Contract{}, m); err != nil || m == "" {
			return fmt.Errorf("weir chaos: unknown checkpoint mode %q", m)
		}
		chosenModes = append(chosenModes, m)
	}
	var chosenKinds []string
	for k := range strings.SplitSeq(*kinds, ",") {
		if !slices.Contains(chaosFaults, k) || !*inOrder && slices.Contains(chosenKinds, k) {
			return fmt.Errorf("weir chaos: unknown kind of fault %q, or one repeated without -in-order (have %s)", k, strings.Join(chaosFaults, ", "))
		}
		chosenKinds = append(chosenKinds, k)
	}
	if *nodes != 1 && *nodes != 3 {
		return fmt.Errorf("weir chaos: -cluster %d: 1 broker, or a cluster of 3", *nodes)
	}
	if *events < 100 || *rounds < 0 || *rate <= 0 {
		return fmt.Errorf("weir chaos: -events %d (at least 100), -rounds %d, -rate %v (more than 0)", *events, *rounds, *rate)
	}
	if *seed == 0 {
		*seed = int(time.Now().UnixNano() % 1e9)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if *dir != "" {
		// Runs are numbered from 1 in it: an earlier run's storage would
		// be taken for this one's.
		if entries, err := os.ReadDir(*dir); err == nil && len(entries) > 0 {
			return fmt.Errorf("weir chaos: -dir %s is not empty", *dir)
		}
	}
	d, cleanup, err := cli.WorkDir(*dir, "weir-chaos-")
	if err != nil {
		return err
	}
	defer cleanup()
	b := &nexmarkBench{cat: cat, exe: exe, dir: d, interval: *interval, log: stderr}
	o := chaosOptions{rounds: *rounds, seed: int64(*seed), events: *events, rate: *rate, kinds: chosenKinds, inOrder: *inOrder, stall: *stall, nodes: *nodes,
		first: time.Now().Add(-time.Hour).Truncate(time.Minute)}
	fmt.Fprintf(stderr, "weir chaos: seed %d\n", o.seed)
	failed := 0
	for _, q := range chosen {
		outs, err := b.chaos(ctx, q.Name, chosenModes, o)
		for _, out := range outs {
			if !out.OK {
				failed++
			}
			if *asJSON {
				if err := json.NewEncoder(stdout).Encode(out); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(stdout, out)
			}
		}
		if err != nil {
			return fmt.Errorf("weir chaos %s: %w", q.Name, err)
		}
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "weir chaos: %d runs lost, repeated or changed results (seed %d; the processes' logs are in %s with -dir)\n", failed, o.seed, d)
		return cli.ExitError(1)
	}
	return nil
}

// chaosOptions are a chaos run's settings.
type chaosOptions struct {
	rounds int
	seed   int64
	events int
	rate   float64
	kinds  []string
	// inOrder injects kinds in their order, cycling, rather than in
	// seeded permutations.
	inOrder bool
	stall   time.Duration
	// first is the corpus's first event time, the same in every run: an
	// hour before the command started.
	first time.Time
	// nodes is how many brokers run: 1, or a cluster's nodes.
	nodes int
}

// chaos runs query q without failures, then once per checkpoint mode
// under the kill schedule, and compares each with the first.
func (b *nexmarkBench) chaos(ctx context.Context, q string, modes []string, o chaosOptions) ([]chaosOutcome, error) {
	fmt.Fprintf(b.log, "weir chaos: %s without failures…\n", q)
	want, err := b.chaosRun(ctx, q, "", o, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("the failure-free run: %w", err)
	}
	var outs []chaosOutcome
	for _, mode := range modes {
		fmt.Fprintf(b.log, "weir chaos: %s %s, %d rounds…\n", q, mode, o.rounds)
		out := chaosOutcome{Query: q, Mode: mode, Seed: o.seed, Rounds: o.rounds, Faults: map[string]int{}, Events: o.events,
			PeakRSS: map[string]int64{}, Budget: map[string]int64{}}
		for e, revs := range want {
			if e == lettersEdge {
				for _, r := range revs {
					out.Letters += len(r)
				}
				continue
			}
			out.Results += len(revs)
			for _, r := range revs {
				out.Revisions += len(r)
			}
		}
		if _, err := b.chaosRun(ctx, q, mode, o, want, &out); err != nil {
			out.Problem = err.Error()
		}
		out.OK = out.Problem == ""
		outs = append(outs, out)
		if ctx.Err() != nil {
			return outs, ctx.Err()
		}
	}
	return outs, nil
}

// chaosRun runs query q in checkpoint mode mode ("": the contract's) on a
// broker of its own, publishing the corpus while it runs. Without out it
// kills nothing and returns the results, per result edge, once every
// operator has handled the corpus and they have stopped changing. With
// out it kills processes on the seeded schedule, then waits until the
// results equal want, or stop changing, and fills out.
func (b *nexmarkBench) chaosRun(ctx context.Context, q, mode string, o chaosOptions, want map[string]map[string][]results.Revision, out *chaosOutcome) (map[string]map[string][]results.Revision, error) {
	// The brokers keep their ports when they are started again.
	ports := make([]int, max(o.nodes, 1))
	for i := range ports {
		var err error
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	r, err := b.openOn(ctx, q, "chaos", ports...)
	if err != nil {
		return nil, err
	}
	if out != nil {
		out.Logs = r.dir
	}
	defer r.close()
	defer func() {
		for _, p := range r.extra {
			p.stop()
		}
	}()
	r.mode, r.holders, r.timeout = mode, []string{"chaos-a", "chaos-b"}, chaosTimeout
	if err := r.start(ctx); err != nil {
		return nil, err
	}
	gen := r.chaosGen(o)
	pubCtx, stopPub := context.WithCancel(ctx)
	var publishing sync.WaitGroup
	defer publishing.Wait()
	defer stopPub()
	published := make(chan error, 1)
	publishing.Go(func() { published <- r.publishThroughKills(pubCtx, gen) })

	if out == nil {
		if err := <-published; err != nil {
			return nil, err
		}
		dctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		if err := r.waitDrained(dctx, chaosMessages(gen)); err != nil {
			return nil, err
		}
		// Results held for a checkpoint (a transactional sink, an outbox)
		// are released after it: wait until nothing more comes.
		for last, quiet := uint64(0), time.Now(); time.Since(quiet) < settleQuiet(b.interval); time.Sleep(250 * time.Millisecond) {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			seq, err := r.resultSeq(ctx)
			if err != nil {
				return nil, err
			}
			if seq != last {
				last, quiet = seq, time.Now()
			}
		}
		res, repeated, err := r.results(ctx)
		if err == nil && len(repeated) > 0 {
			err = fmt.Errorf("%d results stored twice without a failure (e.g. %s)", len(repeated), repeated[0])
		}
		return res, err
	}

	rng := rand.New(rand.NewSource(o.seed))
	var schedule []string
	for len(schedule) < o.rounds {
		order := rng.Perm(len(o.kinds))
		if o.inOrder {
			order = nil
			for i := range o.kinds {
				order = append(order, i)
			}
		}
		for _, i := range order {
			schedule = append(schedule, o.kinds[i])
		}
	}
	last := time.Now()
	for _, kind := range schedule[:o.rounds] {
		// The round's draws come first and in a fixed order, so that a
		// seed replays the same schedule whatever the run finds.
		wait := time.Duration(50+rng.Intn(550)) * time.Millisecond // a random moment: up to 600 ms of work
		pick := rng.Intn(1 << 30)                                  // the process
		during := time.Duration(rng.Intn(500)) * time.Millisecond  // into a rescale's restore
		pause := chaosTimeout + 3*time.Second + time.Duration(rng.Intn(2000))*time.Millisecond
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if err := r.restartEnded(ctx, out); err != nil {
			return nil, err
		}
		services := r.services()
		coordinators := pointers(r.procs[len(r.procs)-r.coordinators():])
		var victims []**child
		did := kind
		switch kind {
		case faultService:
			victims = services[pick%len(services):][:1]
		case faultCoordinator:
			victims = coordinators[pick%len(coordinators):][:1]
		case faultBroker:
			brokers := r.brokers()
			victims = brokers[pick%len(brokers):][:1]
		case faultHost:
			// Every service moves: restoring one process's operators
			// while the others keep newer state is a partial rollback,
			// which weir does not support (docs/RELIABILITY.md).
			victims = services
		case faultPause:
			all := append(append(services, coordinators...), r.brokers()...)
			p := *all[pick%len(all)]
			did += fmt.Sprintf(" %s for %s", p.name, pause.Round(100*time.Millisecond))
			if err := p.pause(ctx, pause); err != nil {
				return nil, err
			}
		case faultRescale:
			version, err := r.rescale(ctx, out)
			if err != nil {
				return nil, err
			}
			involved := append(append(r.rescaled(), coordinators...), r.brokers()...)
			victims = involved[pick%len(involved):][:1]
			did += fmt.Sprintf(" to %d instances, then after %s", 1+min(1, len(r.extra)), during)
			select {
			case <-time.After(during):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if st, err := checkpoint.Existing(ctx, r.js, r.c.Pipeline); err == nil {
				if l, _, err := st.Latest(ctx); err == nil && l.Assignment < version {
					out.Interrupted++
				}
			}
		}
		for _, v := range victims {
			did += " kill " + (*v).name
			r.sample(*v, out)
			(*v).kill()
			if kind == faultHost {
				if err := os.RemoveAll((*v).dataDir()); err != nil {
					return nil, err
				}
			}
		}
		for _, v := range victims {
			if err := r.again(ctx, v); err != nil {
				return nil, err
			}
		}
		out.Schedule = append(out.Schedule, did)
		out.Faults[kind]++
		last = time.Now()
	}
	if err := <-published; err != nil {
		return nil, err
	}
	return nil, r.settle(ctx, want, last, o.stall, out)
}

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
// operator needs a keyed edge before it).
func (r *pipelineRun) scalable() map[string][]string {
	out := map[string][]string{}
	for _, op := range r.c.Operators {
		if r.partitionsOf(op.ID) < 2 || op.Input == "ingress" && len(op.State) > 0 && op.Keying != contracts.KeyingID {
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
		name, input := r.c.Ingress.Stream, "ingress"
		if _, ok := r.c.Edge(op.Input); ok {
			name, input = edge.StreamName(r.c.Pipeline, op.Input), op.Input
		}
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
		s, err := r.js.Stream(ctx, name)
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
				return fmt.Errorf("consumer %s of %s: %d to deliver", info.Name, name, info.NumPending)
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
			msg, err := r.nc.RequestWithContext(rctx, status.EndpointSubject(r.c.Pipeline, op.ID, inst), nil)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("stats of %s/%s: %w", op.ID, inst, err)
			}
			var st status.Stats
			if err := json.Unmarshal(msg.Data, &st); err != nil {
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
			return fmt.Sprintf("edge %s: result %s lacks results.Revision %d, %s", c.Edge, d.Result, d.Revision, d.A.Value)
		case "extra":
			return fmt.Sprintf("edge %s: result %s has an extra results.Revision %d, %s", c.Edge, d.Result, d.Revision, d.B.Value)
		}
		return fmt.Sprintf("edge %s: result %s results.Revision %d is %s, want %s", c.Edge, d.Result, d.Revision, d.B.Value, d.A.Value)
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

// results reads the run's result edges, results.Revision by results.Revision, and its
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
// one results.Revision for each time it was filed. The stream sequence is left
// out: the corpus's partitions interleave differently from run to run. A
// letter filed again after a failure is JetStream's duplicate, dropped
// by its message ID; one stored twice is an extra results.Revision.
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

// chaosGen is the corpus: events an hour old, out of order within a
// second (the contracts' bound is two), duplicate IDs, a hot key, and
// now and then a timestamp two days ahead, filed as a dead letter or on
// the side output. No late
// events and no idle partition: whether an event is late, or a partition
// idle, depends on when things happen, and a run's results must not.
func (r *pipelineRun) chaosGen(o chaosOptions) nexmarkgen.Config {
	in := r.c.Ingress
	return nexmarkgen.Config{
		Stream: in.Stream, SubjectPrefix: in.SubjectPrefix, Retention: in.Retention.D(), DuplicateWindow: ingress.Duplicates(in),
		Producer: "chaos", Rate: o.rate, Replicas: r.replicas,
		Gen: nexmark.Config{Seed: 5, FirstEventTime: o.first, EventsPerSecond: 50,
			Partitions: in.Partitions, KeyGroups: r.c.State.KeyGroups, OutOfOrder: time.Second, Events: uint64(o.events),
			Hard: nexmark.HardCases{DuplicateEvery: 13, HotKeyRatio: 0.3, FutureEvery: 499, FutureBy: 48 * time.Hour, IdlePartition: -1}},
	}
}

// chaosMessages is how many messages the corpus of gen and its flush
// events are.
func chaosMessages(gen nexmarkgen.Config) int {
	g, err := nexmark.NewGenerator(gen.Gen)
	if err != nil {
		return 0
	}
	n := 0
	for _, ok := g.Next(); ok; _, ok = g.Next() {
		n++
	}
	return n + gen.Gen.Partitions
}

// publishThroughKills publishes the corpus of gen, resuming after every
// failure — a broker killed mid-batch — from what was acknowledged (the
// message IDs drop what is stored twice), then a person event a minute
// after the corpus on every partition, whose event time closes every
// window of it.
func (r *pipelineRun) publishThroughKills(ctx context.Context, gen nexmarkgen.Config) error {
	last := gen.Gen.FirstEventTime
	g, err := nexmark.NewGenerator(gen.Gen)
	if err != nil {
		return err
	}
	for m, ok := g.Next(); ok; m, ok = g.Next() {
		if t := m.Event.Time(); t.After(last) && !g.Future(m.Index) {
			last = t
		}
	}
	retry := func(what string, f func() error) error {
		for deadline := time.Now().Add(2 * time.Minute); ; {
			err := f()
			if err == nil || ctx.Err() != nil {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: %w", what, err)
			}
			select {
			case <-time.After(200 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	err = retry("publish the corpus", func() error {
		n, err := nexmarkgen.Publish(ctx, r.js, gen, time.Now, nil)
		gen.Start += n
		return err
	})
	if err != nil {
		return err
	}
	flush := last.Add(time.Minute)
	layout := keygroup.Layout{Groups: gen.Gen.KeyGroups, Partitions: gen.Gen.Partitions}
	for p := range gen.Gen.Partitions {
		// Its ID's key group is the partition's, as the generator's events'
		// are: an instance of two that owns the partition owns the ID.
		id := fmt.Sprintf("flush-%d", p)
		for k := 0; layout.Partition([]byte(id)) != p; k++ {
			id = fmt.Sprintf("flush-%d-%d", p, k)
		}
		ev := nexmark.Event{ID: id, Kind: nexmark.KindPerson, Key: "99999", TS: flush.UnixMilli(),
			Person: &nexmark.Person{ID: 99999, Name: "flush", DateTime: flush.UnixMilli()}}
		data, err := ev.Encode()
		if err != nil {
			return err
		}
		msg := &nats.Msg{Subject: gen.Subject(p), Header: nats.Header{}, Data: data}
		msg.Header.Set(jetstream.MsgIDHeader, "chaos-flush-"+fmt.Sprint(p))
		if err := retry("publish a flush event", func() error {
			_, err := r.js.PublishMsg(ctx, msg)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// freePort is a TCP port nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
