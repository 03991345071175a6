package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/cli"
	"github.com/weirflow/weir/internal/results"
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
the failure-free one revision by revision, as weir compare does: none may
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
		return s + fmt.Sprintf("all equal revision by revision, settled %.1fs after the last fault; peak memory %d of %d MiB declared", o.Settled, peak>>20, budget>>20)
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
