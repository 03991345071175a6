package harness

import (
	"context"
	"errors"
	"fmt"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/bench"
	"github.com/weirflow/weir/internal/catalog"
	"github.com/weirflow/weir/internal/cli"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/producer"
)

const (
	modeFetchAck  = "c-fetch-ack"      // the physical limit: raw fetch and ack of the ingress
	modeReadWrite = "c-read-write"     // the floor of one synced result per event: the ingress read and stored again
	modeHop       = "c-framed-hop"     // the physical limit: one framed edge hop of as many records
	modeHand      = "d-hand-written"   // a nats.go consumer computing the query in memory, no guarantees
	modePreloaded = "b-preloaded"      // end to end from a preloaded ingress
	modeLatency   = "latency"          // event-to-result latency at half the sustained rate
	modeLive      = "a-live"           // fed by the benchmark's generator while it runs
	modeAtomic    = "e-atomic"         // ingest: weir's producer path
	modeOneByOne  = "e-one-per-msg"    // ingest: one message per publish
	modeSequenced = "e-sequenced"      // ingest: the producer path by stream sequence, no message IDs
	modeStreams   = "e-atomic-streams" // ingest: the producer path, the partitions over -ingest-streams streams
)

var benchModes = []string{modeFetchAck, modeReadWrite, modeHop, modeHand, modePreloaded, modeLatency, modeLive, modeAtomic, modeStreams, modeSequenced, modeOneByOne}

// ingestModes are the modes of ingest, in the order they run unless
// -modes orders them.
var ingestModes = []string{modeAtomic, modeStreams, modeSequenced, modeOneByOne}

const benchNexmarkUsage = `usage: weir bench nexmark [-query Q,…|all] [-events N] [-modes M,…] [-latency-rate R] [-effects E,…] [-streams N,…] [-ingest-streams N] [-cluster N] [-json] [-dir DIR]

Runs Nexmark queries the way they are deployed — the broker, every service
and the coordinator as processes of their own, every write synced, checkpoints
on — and measures, side by side in one run:

  c-fetch-ack    raw JetStream fetch and ack of the same ingress messages
  c-read-write   the same read, each message stored again in a synced
                 stream in atomic batches: the floor of a query that
                 writes one result per event (q0, dedup)
  c-framed-hop   one framed edge hop of as many records
  d-hand-written what a user writes by hand: one nats.go consumer, state in
                 maps, results on core NATS; none of weir's guarantees
  b-preloaded    the pipeline end to end over a preloaded ingress
  a-live         the pipeline fed by the benchmark's generator as it runs
  latency        event-to-result latency at half the lower of the
                 b-preloaded and a-live rates (or at -latency-rate), for
                 -latency-span
  e-atomic       ingest: the producer path (atomic batches)
  e-atomic-streams
                 ingest: the same, the ingress's partitions placed over
                 -ingest-streams streams (partition p in stream p mod N),
                 each stream's messages in batches of their own; with
                 -cluster N the ingest modes run on a cluster of N brokers,
                 every stream replicated to each, and the note names the
                 node leading each stream
  e-sequenced    ingest: the producer path by stream sequence (no message
                 IDs; each batch states the sequence it follows)
  e-one-per-msg  ingest: one message per publish

With -effects at-least-once,transactional every query runs once per sink
effect, side by side, its measurements labelled query/effect; a
transactional run counts an event as handled once its result is released.
With -streams 1,4 every query runs once with its ingress over each number
of streams (ingress.streams), labelled query/streams=N: the pipeline modes
(b-preloaded, a-live, latency) only, the baselines reading one stream.

CPU seconds are read from /proc for weir's processes (the broker's apart);
peak memory is each process's VmHWM.
`

// benchNexmarkCmd is `weir bench nexmark`.
func (h *Harness) benchNexmarkCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cat := h.Catalog
	fs := cli.NewFlags("weir bench nexmark", getenv)
	queries, modes, dir := new(string), new(string), new(string)
	events := new(int)
	asJSON := new(bool)
	interval, span := new(time.Duration), new(time.Duration)
	latencyRate := new(int)
	profile, effects := new(string), new(string)
	ingestStreams, nodes := new(int), new(int)
	streams := new(string)
	fs.String(effects, "effects", "WEIR_BENCH_EFFECTS", "", "sink effects to run each query with, comma-separated (default: each contract's): at-least-once, transactional")
	fs.String(queries, "query", "WEIR_QUERY", "all", "queries, comma-separated, or all: "+strings.Join(benchable(cat).Names(), ", "))
	fs.Int(events, "events", "WEIR_BENCH_EVENTS", 100000, "events per query and mode")
	fs.String(modes, "modes", "WEIR_BENCH_MODES", strings.Join(benchModes, ","), "modes to run, comma-separated")
	fs.Bool(asJSON, "json", "WEIR_BENCH_JSON", false, "print one JSON object per measurement")
	fs.String(dir, "dir", "WEIR_BENCH_DIR", "", "scratch directory for storage and the processes' logs (default: a temporary directory)")
	fs.Int(ingestStreams, "ingest-streams", "WEIR_BENCH_INGEST_STREAMS", 4, "streams the ingress's partitions are placed over in mode "+modeStreams)
	fs.String(streams, "streams", "WEIR_BENCH_STREAMS", "", "run each query with its ingress over each of these numbers of streams, comma-separated (default: the contract's); pipeline modes only")
	fs.Int(nodes, "cluster", "WEIR_BENCH_CLUSTER", 1, "brokers of the ingest modes: 1, or the nodes of a cluster with every stream replicated to each")
	fs.String(profile, "profile", "WEIR_BENCH_PROFILE", "", "write each process's CPU, block and heap profiles of modes b-preloaded and latency into DIR, with a cost model per stage (QUERY-costs.txt, QUERY-latency-costs.txt) and, for a windowed query, where each window's result waited (QUERY-latency-stages.txt)")
	fs.Duration(span, "latency-span", "WEIR_BENCH_LATENCY_SPAN", 30*time.Second, "how long the latency mode publishes")
	fs.Int(latencyRate, "latency-rate", "WEIR_BENCH_LATENCY_RATE", 0, "events per second the latency mode publishes (0: half the lower of the b-preloaded and a-live rates); set it to compare builds at one rate")
	fs.Duration(interval, "checkpoint-interval", "WEIR_CHECKPOINT_INTERVAL", 0, "checkpoint interval (0: each contract's)")
	if cli.WantsHelp(args) {
		fmt.Fprint(stdout, benchNexmarkUsage)
	}
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if *events < 1000 {
		return fmt.Errorf("bench nexmark: -events %d, want at least 1000", *events)
	}
	chosen, err := cat.Choose(*queries, func(q catalog.Query) bool { return q.Baseline != nil })
	if err != nil {
		return fmt.Errorf("bench nexmark: %w", err)
	}
	run := map[string]bool{}
	var ingesting []string // the ingest modes asked for, in the order asked
	for m := range strings.SplitSeq(*modes, ",") {
		if !slices.Contains(benchModes, m) {
			return fmt.Errorf("bench nexmark: unknown mode %q (have %s)", m, strings.Join(benchModes, ", "))
		}
		run[m] = true
		if slices.Contains(ingestModes, m) {
			ingesting = append(ingesting, m)
		}
	}
	if *ingestStreams < 1 {
		return fmt.Errorf("bench nexmark: -ingest-streams %d, want at least 1", *ingestStreams)
	}
	if *nodes < 1 || *nodes > 5 {
		return fmt.Errorf("bench nexmark: -cluster %d, want 1 to 5 brokers", *nodes)
	}
	chosenStreams := []int{0}
	if *streams != "" {
		chosenStreams = nil
		for v := range strings.SplitSeq(*streams, ",") {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return fmt.Errorf("bench nexmark: -streams %q: %q is not a number of streams", *streams, v)
			}
			chosenStreams = append(chosenStreams, n)
		}
		for m := range run {
			if !slices.Contains([]string{modePreloaded, modeLive, modeLatency}, m) && !slices.Contains(ingestModes, m) {
				return fmt.Errorf("bench nexmark: -streams runs the pipeline modes (%s, %s, %s), and %s reads one stream", modePreloaded, modeLive, modeLatency, m)
			}
		}
	}
	if *nodes > 1 && len(ingesting) < len(run) {
		return fmt.Errorf("bench nexmark: -cluster %d runs the ingest modes (%s) only", *nodes, strings.Join(ingestModes, ", "))
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	d, cleanup, err := cli.WorkDir(*dir, "weir-bench-")
	if err != nil {
		return err
	}
	defer cleanup()
	b := &nexmarkBench{cat: cat, exe: exe, dir: d, events: *events, interval: *interval, latencySpan: *span, latencyRate: *latencyRate, profile: *profile, ingestStreams: *ingestStreams, nodes: *nodes, log: stderr}
	var all []bench.Measurement
	emit := func(ms ...bench.Measurement) {
		all = append(all, ms...)
		if *asJSON {
			_ = bench.WriteJSON(stdout, ms)
		}
	}
	chosenEffects := []string{""}
	if *effects != "" {
		chosenEffects = strings.Split(*effects, ",")
		for _, e := range chosenEffects {
			if _, err := withEffect(&contracts.Contract{}, e); err != nil {
				return fmt.Errorf("bench nexmark: %w", err)
			}
		}
	}
	for _, q := range chosen {
		for _, e := range chosenEffects {
			for _, n := range chosenStreams {
				b.effect, b.streams = e, n
				ms, err := b.query(ctx, q.Name, run)
				emit(ms...)
				if err != nil {
					return fmt.Errorf("bench nexmark %s: %w", b.label(q.Name), err)
				}
			}
		}
	}
	if len(ingesting) > 0 {
		ms, err := b.ingest(ctx, ingesting)
		emit(ms...)
		if err != nil {
			return fmt.Errorf("bench nexmark ingest: %w", err)
		}
	}
	if !*asJSON {
		return bench.WriteTable(stdout, all)
	}
	return nil
}

// benchable are the queries of -query all: those with a hand-written
// baseline.
func benchable(cat catalog.Catalog) catalog.Catalog {
	var out catalog.Catalog
	for _, q := range cat {
		if q.Baseline != nil {
			out = append(out, q)
		}
	}
	return out
}

// nexmarkBench is one run of `weir bench nexmark`.
type nexmarkBench struct {
	cat      catalog.Catalog // the queries it can run
	exe      string
	dir      string
	events   int
	interval time.Duration
	// effect is the sink effect the query runs with; "" the contract's.
	effect string
	// streams is the streams the query's ingress is placed over
	// (ingress.streams); 0 the contract's.
	streams int
	// latencySpan is how long the latency mode publishes, whatever events
	// says: a window query has one result per window and key, and a short
	// run would close few windows.
	latencySpan time.Duration
	// latencyRate is the rate the latency mode publishes at; 0 for half
	// what the pipeline sustains.
	latencyRate int
	// profile, if set, is where mode b-preloaded's processes write their
	// CPU, block and heap profiles, as QUERY-PROCESS.cpu.pprof, .block.pprof
	// and .heap.pprof.
	profile string
	// ingestStreams is the streams of mode e-atomic-streams.
	ingestStreams int
	// nodes is the brokers of the ingest modes: 1, or a cluster's.
	nodes int
	log   io.Writer
	runs  int // processes' storage directories are numbered
}

// query measures query q in the modes asked for, each on a fresh broker.
func (b *nexmarkBench) query(ctx context.Context, q string, run map[string]bool) ([]bench.Measurement, error) {
	var ms []bench.Measurement
	measure := func(mode string, f func(*pipelineRun) (bench.Measurement, error)) error {
		if !run[mode] {
			return nil
		}
		fmt.Fprintf(b.log, "bench nexmark: %s %s…\n", q, mode)
		if mode == modeHop { // in this process, on a server of its own
			m, err := b.hop(ctx)
			if err != nil {
				return fmt.Errorf("%s: %w", mode, err)
			}
			m.Query, m.Mode = b.label(q), mode
			ms = append(ms, m)
			return nil
		}
		r, err := b.open(ctx, q, mode)
		if err != nil {
			return err
		}
		m, err := f(r)
		if cerr := r.close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", mode, err)
		}
		m.Query, m.Mode = b.label(q), mode
		ms = append(ms, m)
		return nil
	}
	for _, m := range []struct {
		mode string
		f    func(*pipelineRun) (bench.Measurement, error)
	}{
		{modeFetchAck, func(r *pipelineRun) (bench.Measurement, error) { return r.fetchAck(ctx) }},
		{modeReadWrite, func(r *pipelineRun) (bench.Measurement, error) { return r.readWrite(ctx) }},
		{modeHop, nil},
		{modeHand, func(r *pipelineRun) (bench.Measurement, error) { return r.handWritten(ctx) }},
		{modePreloaded, func(r *pipelineRun) (bench.Measurement, error) { return r.preloaded(ctx) }},
	} {
		if err := measure(m.mode, m.f); err != nil {
			return ms, err
		}
	}
	if err := measure(modeLive, func(r *pipelineRun) (bench.Measurement, error) { return r.live(ctx) }); err != nil {
		return ms, err
	}
	if run[modeLatency] {
		// Half the most the pipeline sustains: the lower of its preloaded
		// rate and its rate fed live — the latency mode runs the generator
		// beside it too; without either, a rate it surely sustains.
		rate, from := 2000.0, "b-preloaded and a-live not run"
		sustained := math.Inf(1)
		for _, m := range ms {
			if (m.Mode == modePreloaded || m.Mode == modeLive) && m.EventsPerSec < sustained {
				sustained, rate, from = m.EventsPerSec, m.EventsPerSec/2, "half of "+m.Mode
			}
		}
		if b.latencyRate > 0 {
			rate, from = float64(b.latencyRate), "-latency-rate"
		}
		if err := measure(modeLatency, func(r *pipelineRun) (bench.Measurement, error) { return r.latency(ctx, rate, from) }); err != nil {
			return ms, err
		}
	}
	return ms, nil
}

// hop measures one framed edge hop of as many records as the query has
// events (internal/bench.Hop, in this process, on a server of its own).
func (b *nexmarkBench) hop(ctx context.Context) (bench.Measurement, error) {
	dir := b.scratch()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return bench.Measurement{}, err
	}
	res, err := bench.Hop(ctx, bench.HopConfig{Mode: bench.Framed, Records: b.events, Dir: dir})
	if err != nil {
		return bench.Measurement{}, err
	}
	m := bench.Measurement{Events: int64(b.events), Note: "publisher, broker and consumer in the benchmark's process; CPU not split"}
	m.Rate(res.Elapsed)
	return m, nil
}

// scratch is a new directory for one server's or process's storage.
func (b *nexmarkBench) scratch() string {
	b.runs++
	return filepath.Join(b.dir, fmt.Sprint(b.runs))
}

// fetchAck is mode c-fetch-ack: the ingress preloaded, then read raw.
func (r *pipelineRun) fetchAck(ctx context.Context) (bench.Measurement, error) {
	return r.inProcess(ctx, func() (string, error) {
		_, err := bench.FetchAndAck(ctx, r.js, r.c.Ingress.Stream, r.b.events)
		return "CPU is the benchmark process's, which only reads", err
	})
}

// readWrite is mode c-read-write: the ingress preloaded, then read and
// stored again.
func (r *pipelineRun) readWrite(ctx context.Context) (bench.Measurement, error) {
	return r.inProcess(ctx, func() (string, error) {
		_, err := bench.ReadAndWrite(ctx, r.js, r.c.Ingress.Stream, "BENCH_READ_WRITE", r.b.events)
		return "CPU is the benchmark process's, which only reads and writes", err
	})
}

// handWritten is mode d-hand-written: the ingress preloaded, then the query
// computed by internal/bench.HandWritten in this process.
func (r *pipelineRun) handWritten(ctx context.Context) (bench.Measurement, error) {
	if r.p.Baseline == nil {
		return bench.Measurement{}, fmt.Errorf("query %s has no hand-written baseline", r.query)
	}
	return r.inProcess(ctx, func() (string, error) {
		_, results, err := bench.HandWritten(ctx, r.nc, r.js, r.c.Ingress.Stream, r.p.Baseline(), "bench.hand."+r.query,
			r.b.events, r.c.Progress.OutOfOrderness.D())
		return fmt.Sprintf("%d results; CPU is the benchmark process's, which only runs the query", results), err
	})
}

// inProcess preloads the ingress and measures f, which reads it in this
// process: its CPU is this process's.
func (r *pipelineRun) inProcess(ctx context.Context, f func() (note string, err error)) (bench.Measurement, error) {
	if err := r.publish(ctx, r.b.events, 0); err != nil {
		return bench.Measurement{}, err
	}
	from, err := r.usage()
	if err != nil {
		return bench.Measurement{}, err
	}
	note, err := f()
	if err != nil {
		return bench.Measurement{}, err
	}
	to, err := r.usage()
	if err != nil {
		return bench.Measurement{}, err
	}
	m := bench.Measurement{Events: int64(r.b.events), CPUSeconds: (to.self - from.self).Seconds(),
		BrokerCPUSeconds: (to.broker - from.broker).Seconds(), Note: note}
	m.Rate(to.at.Sub(from.at))
	return m, nil
}

// preloaded is mode b-preloaded: the ingress preloaded, then the pipeline
// started and timed from the moment every operator is ready until it has
// handled every event; events handled before that moment do not count.
func (r *pipelineRun) preloaded(ctx context.Context) (bench.Measurement, error) {
	if err := r.publish(ctx, r.b.events, 0); err != nil {
		return bench.Measurement{}, err
	}
	if err := r.start(ctx); err != nil {
		return bench.Measurement{}, err
	}
	if err := r.profileSpan(syscall.SIGUSR1); err != nil {
		return bench.Measurement{}, err
	}
	from, err := r.usage()
	if err != nil {
		return bench.Measurement{}, err
	}
	st, err := r.stats(ctx)
	if err != nil {
		return bench.Measurement{}, err
	}
	early := consumed(st)
	if early >= int64(r.b.events) {
		// Nothing is left to time: a figure over no events would be noise.
		return bench.Measurement{}, fmt.Errorf("the pipeline handled all %d events before every operator was ready, so nothing was left to time: raise -events", r.b.events)
	}
	if err := r.waitDrained(ctx, r.b.events); err != nil {
		return bench.Measurement{}, err
	}
	to, err := r.usage()
	if err != nil {
		return bench.Measurement{}, err
	}
	if err := r.profileSpan(syscall.SIGUSR2); err != nil {
		return bench.Measurement{}, err
	}
	m := bench.Measurement{Events: int64(r.b.events) - early, Note: r.steps(ctx)}
	if r.profile != "" {
		if err := r.costs(m.Events); err != nil {
			return m, err
		}
	}
	return m, r.between(ctx, &m, from, to)
}

// steps says how many records each operator handled per step.
func (r *pipelineRun) steps(ctx context.Context) string {
	st, err := r.stats(ctx)
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, s := range st {
		if s.Steps > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", s.Operator, float64(s.In+s.DeadLettered+s.SideOutput)/float64(s.Steps)))
		}
	}
	return "records per step: " + strings.Join(parts, ", ")
}

// live is mode a-live: the pipeline running, the benchmark's generator
// publishes the events as fast as they are stored; timed from the first
// publish until the pipeline has handled the last.
func (r *pipelineRun) live(ctx context.Context) (bench.Measurement, error) {
	if err := r.start(ctx); err != nil {
		return bench.Measurement{}, err
	}
	from, err := r.usage()
	if err != nil {
		return bench.Measurement{}, err
	}
	if err := r.publish(ctx, r.b.events, 0); err != nil {
		return bench.Measurement{}, err
	}
	if err := r.waitDrained(ctx, r.b.events); err != nil {
		return bench.Measurement{}, err
	}
	to, err := r.usage()
	if err != nil {
		return bench.Measurement{}, err
	}
	m := bench.Measurement{Events: int64(r.b.events), Note: "the generator runs in the benchmark's process; its CPU is not counted"}
	return m, r.between(ctx, &m, from, to)
}

// latency is mode latency: the generator publishes at rate with event
// times that follow the wall clock, and each result's latency is the time
// from the moment it was due to the moment its message was stored in the
// result edge. A per-event result (dedup) is due at its event's time; a
// window's result (its event time is the window's end) at that time plus
// the watermark's out-of-orderness — the wait the contract asks for, not
// the engine's.
func (r *pipelineRun) latency(ctx context.Context, rate float64, from string) (bench.Measurement, error) {
	if err := r.start(ctx); err != nil {
		return bench.Measurement{}, err
	}
	sink := r.c.Operators[len(r.c.Operators)-1].Output
	name, err := r.js.StreamNameBySubject(ctx, r.c.EdgeSubject(sink, 0))
	if err != nil {
		return bench.Measurement{}, fmt.Errorf("result edge %s: %w", sink, err)
	}
	cons, err := r.js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return bench.Measurement{}, err
	}
	var due time.Duration
	if r.p.Windowed { // due when the watermark passes the window's end
		due = r.c.Progress.OutOfOrderness.D()
	}
	var samples []time.Duration
	var results []resultAt
	var bad error
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		meta, err := msg.Metadata()
		if err != nil {
			bad = err
			return
		}
		if edge.IsCommitMarker(msg.Headers()) {
			return
		}
		et, err := time.Parse(time.RFC3339Nano, msg.Headers().Get(edge.HeaderEventTime))
		if err != nil {
			bad = fmt.Errorf("result %d: %s: %w", meta.Sequence.Stream, edge.HeaderEventTime, err)
			return
		}
		samples = append(samples, meta.Timestamp.Sub(et.Add(due)))
		results = append(results, resultAt{window: et, stored: meta.Timestamp})
	})
	if err != nil {
		return bench.Measurement{}, err
	}
	n := max(int(rate*r.b.latencySpan.Seconds()), 1)
	if err := r.profileSpan(syscall.SIGUSR1); err != nil {
		cc.Stop()
		return bench.Measurement{}, err
	}
	start, err := r.usage()
	if err != nil {
		cc.Stop()
		return bench.Measurement{}, err
	}
	err = r.publish(ctx, n, rate)
	if err == nil {
		err = r.waitDrained(ctx, n)
	}
	end, uerr := r.usage()
	if perr := r.profileSpan(syscall.SIGUSR2); perr != nil {
		err = errors.Join(err, perr)
	} else if err == nil && r.profile != "" {
		err = r.costs(int64(n))
	}
	// The last windows fire once the watermark passes them; give results
	// in flight a moment to arrive.
	time.Sleep(time.Second)
	cc.Drain()
	<-cc.Closed()
	if err = errors.Join(err, uerr, bad); err != nil {
		return bench.Measurement{}, err
	}
	if r.profile != "" && r.p.Windowed && len(results) > 0 {
		var b strings.Builder
		if err := r.stages(ctx, results, &b); err != nil {
			return bench.Measurement{}, fmt.Errorf("latency stages: %w", err)
		}
		fmt.Fprint(r.b.log, b.String())
		if err := os.WriteFile(r.profile+"stages.txt", []byte(b.String()), 0o644); err != nil {
			return bench.Measurement{}, err
		}
	}
	m := bench.Measurement{Events: int64(n),
		Note: fmt.Sprintf("%d results at %.0f events/s (%s), from due time to stored", len(samples), rate, from)}
	m.Latencies(samples)
	return m, r.between(ctx, &m, start, end)
}

// close stops the run's processes, the pipeline first, and the broker.
func (r *pipelineRun) close() error {
	var errs []error
	for _, p := range slices.Backward(r.procs) {
		errs = append(errs, p.stop())
	}
	if r.nc != nil {
		r.nc.Close()
	}
	for _, b := range r.brokers() {
		if *b != nil {
			errs = append(errs, (*b).stop())
		}
	}
	return errors.Join(errs...)
}

// ingest is modes e-atomic, e-atomic-streams, e-sequenced and
// e-one-per-msg, in the order given: the same generated events stored
// into a fresh ingress each way, on one broker, side by side.
func (b *nexmarkBench) ingest(ctx context.Context, modes []string) ([]bench.Measurement, error) {
	fmt.Fprintln(b.log, "bench nexmark: ingest…")
	ports := []int{0}
	if b.nodes > 1 {
		ports = make([]int, b.nodes)
		for i := range ports {
			var err error
			if ports[i], err = freePort(); err != nil {
				return nil, err
			}
		}
	}
	r, err := b.openOn(ctx, "dedup", modeAtomic, ports...)
	if err != nil {
		return nil, err
	}
	defer r.close()
	cfg := r.gen(b.events, 0).WithDefaults()
	cfg.Stream, cfg.SubjectPrefix, cfg.Streams = "BENCH_INGEST", "bench-ingest."+cfg.SubjectPrefix, 0
	g, err := nexmark.NewGenerator(cfg.Gen)
	if err != nil {
		return nil, err
	}
	msgs := make([]*nats.Msg, 0, b.events)
	for m, ok := g.Next(); ok; m, ok = g.Next() {
		h := nats.Header{}
		h.Set(jetstream.MsgIDHeader, nexmarkgen.MsgID(cfg.Producer, m))
		h.Set(producer.Header, cfg.Producer)
		msgs = append(msgs, &nats.Msg{Subject: cfg.Subject(m.Partition), Header: h, Data: m.Payload})
	}
	sc := nexmarkgen.StreamConfig(cfg, 0)
	var ms []bench.Measurement
	for _, name := range modes {
		mode := map[string]bench.IngestMode{modeAtomic: bench.AtomicBatches, modeStreams: bench.AtomicBatches, modeSequenced: bench.Sequenced, modeOneByOne: bench.OnePerPublish}[name]
		from, err := r.usage()
		if err != nil {
			return ms, err
		}
		some, to, note := msgs, bench.One(sc), mode.String()
		if mode == bench.OnePerPublish {
			// Two orders of magnitude slower: its rate is steady long
			// before it has stored them all.
			some = msgs[:min(len(msgs), max(len(msgs)/20, 5000))]
		}
		if name == modeStreams {
			to = spread(cfg, b.ingestStreams)
			note = fmt.Sprintf("%s over %d streams, partition p in %s_<p mod %d>", note, len(to.Configs), sc.Name, len(to.Configs))
		}
		got, err := bench.Ingest(ctx, r.js, to, some, mode)
		if err != nil {
			return ms, err
		}
		if b.nodes > 1 {
			note += fmt.Sprintf("; %d replicas, leaders %s; broker CPU is the first node's", r.replicas, strings.Join(got.Leaders, ", "))
		}
		until, err := r.usage()
		if err != nil {
			return ms, err
		}
		m := bench.Measurement{Query: "ingest", Mode: name, Events: int64(len(some)),
			CPUSeconds: (until.self - from.self).Seconds(), BrokerCPUSeconds: (until.broker - from.broker).Seconds(),
			Note: note + "; CPU is the benchmark process's, which only publishes"}
		m.Rate(got.Took)
		ms = append(ms, m)
	}
	return ms, nil
}

// spread places the generated partitions of cfg over n streams, as a
// contract's ingress.streams does: partition p in <stream>_<p mod n>.
func spread(cfg nexmarkgen.Config, n int) bench.Streams {
	cfg.Streams = min(n, cfg.Gen.Partitions)
	to := bench.Streams{Configs: make([]jetstream.StreamConfig, cfg.Streams)}
	for i := range to.Configs {
		to.Configs[i] = nexmarkgen.StreamConfig(cfg, i)
	}
	stream := map[string]int{}
	for p := range cfg.Gen.Partitions {
		stream[cfg.Subject(p)] = p % cfg.Streams
	}
	to.Route = func(m *nats.Msg) int { return stream[m.Subject] }
	return to
}

// withEffect returns c with sink.effect set to effect ("": c as it is),
// and a transactional sink's held epochs bounded, linted.
func withEffect(c *contracts.Contract, effect string) (*contracts.Contract, error) {
	switch effect {
	case "":
		return c, nil
	case contracts.EffectAtLeastOnce, contracts.EffectTransactional:
	default:
		return nil, fmt.Errorf("unknown sink effect %q (have %s, %s)", effect, contracts.EffectAtLeastOnce, contracts.EffectTransactional)
	}
	if c.Pipeline == "" {
		return c, nil // checking the name only
	}
	cc := *c
	cc.Sink.Effect, cc.Sink.MaxPendingEpochs = effect, 0
	if effect == contracts.EffectTransactional {
		cc.Sink.MaxPendingEpochs = 4
	}
	if ps := cc.Lint(); len(ps) > 0 {
		return nil, fmt.Errorf("%s with sink effect %s: %v", c.File, effect, ps)
	}
	return &cc, nil
}

// withMode returns c with recovery.mode set to mode ("": c as it is).
func withMode(c *contracts.Contract, mode string) (*contracts.Contract, error) {
	switch mode {
	case "":
		return c, nil
	case contracts.CheckpointAligned, contracts.CheckpointUnaligned:
	default:
		return nil, fmt.Errorf("unknown checkpoint mode %q (have %s, %s)", mode, contracts.CheckpointAligned, contracts.CheckpointUnaligned)
	}
	cc := *c
	cc.Recovery.Mode = mode
	return &cc, nil
}

// label names a query's measurements: with its effect and its streams,
// when they are chosen.
func (b *nexmarkBench) label(q string) string {
	if b.effect != "" {
		q += "/" + b.effect
	}
	if b.streams > 0 {
		q += "/streams=" + strconv.Itoa(b.streams)
	}
	return q
}

// withStreams returns c with its ingress over n streams (0: c as it is),
// linted.
func withStreams(c *contracts.Contract, n int) (*contracts.Contract, error) {
	if n == 0 {
		return c, nil
	}
	cc := *c
	cc.Ingress.Streams = n
	if ps := cc.Lint(); len(ps) > 0 {
		return nil, fmt.Errorf("%s over %d streams: %v", c.File, n, ps)
	}
	return &cc, nil
}
