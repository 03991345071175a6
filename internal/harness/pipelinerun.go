package harness

import (
	"context"
	"fmt"
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
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/internal/status"
	"github.com/weirflow/weir/pkg/ingress"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
)

// pipelineRun is one measurement's broker and pipeline.
type pipelineRun struct {
	b      *nexmarkBench
	query  string
	c      *contracts.Contract
	p      catalog.Query
	dir    string
	broker *child
	// peers are the other nodes of a cluster the broker is one of (weir
	// chaos -cluster); nil for a broker alone. replicas is how many
	// copies of every stream and bucket the processes make: the nodes'.
	peers    []*child
	replicas int
	url      string
	nc       *nats.Conn
	js       jetstream.JetStream
	procs    []*child // services, then the coordinators
	// profile, if set, prefixes the profiles the processes write.
	profile string
	// mode is the checkpoint mode the processes run the contract with;
	// "" the contract's.
	mode string
	// holders name the coordinators start runs in their lease: one, or
	// with a standby (weir chaos) two. Empty: one, "bench".
	holders []string
	// timeout is the coordinators' checkpoint timeout (0: their default).
	timeout time.Duration
	// instances are the instances a rescale (weir chaos) has assigned
	// operators, and extra the processes of those beyond the first; nil
	// while every operator runs as one instance, childInstance.
	instances map[string][]string
	extra     []*child
}

// coordinators is how many coordinators the run has: the last of procs.
func (r *pipelineRun) coordinators() int { return max(1, len(r.holders)) }

// profiled is a process's arguments, with -profile when the run profiles.
func (r *pipelineRun) profiled(name string, args ...string) []string {
	if r.profile == "" {
		return args
	}
	return append(args, "-profile", r.profile+name)
}

// open starts a fresh broker for query q measured in mode, and creates its
// ingress.
func (b *nexmarkBench) open(ctx context.Context, q, mode string) (*pipelineRun, error) {
	return b.openOn(ctx, q, mode, 0)
}

// openOn is open with the broker on ports[0] (0: any free one) or, given
// more ports, a cluster of as many brokers, one on each, every stream and
// bucket replicated to all of them.
func (b *nexmarkBench) openOn(ctx context.Context, q, mode string, ports ...int) (*pipelineRun, error) {
	p, ok := b.cat.Lookup(q)
	if !ok {
		return nil, fmt.Errorf("unknown query %q", q)
	}
	c, err := p.LoadContract()
	if err != nil {
		return nil, err
	}
	if c, err = withEffect(c, b.effect); err != nil {
		return nil, err
	}
	if c, err = withStreams(c, b.streams); err != nil {
		return nil, err
	}
	r := &pipelineRun{b: b, query: q, c: c, p: p, dir: b.scratch(), replicas: 1}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, err
	}
	if b.profile != "" && (mode == modePreloaded || mode == modeLatency) {
		if err := os.MkdirAll(b.profile, 0o755); err != nil {
			return nil, err
		}
		r.profile = filepath.Join(b.profile, q+"-")
		if mode == modeLatency {
			r.profile += "latency-"
		}
	}
	if len(ports) < 2 {
		port := 0
		if len(ports) == 1 {
			port = ports[0]
		}
		r.broker, r.url, err = spawn(ctx, b.exe, r.dir, "broker", r.profiled("broker", "broker", "-dir", filepath.Join(r.dir, "nats"), "-port", strconv.Itoa(port))...)
	} else {
		err = r.startCluster(ctx, ports)
	}
	if err != nil {
		r.close()
		return nil, err
	}
	// Reconnecting as the services do: a broker weir chaos restarts is
	// back within a second, and the generator must be too.
	r.nc, r.js, err = connect(r.url, nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		r.close()
		return nil, err
	}
	// A cluster answers once it has elected its leaders.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
		_, err = nexmarkgen.EnsureStream(ctx, r.js, r.gen(0, 0))
		if err == nil || r.peers == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// startCluster starts a broker on each client port, as the nodes of one
// cluster routing to each other, and makes the first r.broker.
func (r *pipelineRun) startCluster(ctx context.Context, ports []int) error {
	var routes, urls []string
	var routePorts []int
	for range ports {
		p, err := freePort()
		if err != nil {
			return err
		}
		routePorts = append(routePorts, p)
		routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(p))
	}
	for i, port := range ports {
		name := "broker-" + strconv.Itoa(i)
		ch, url, err := spawn(ctx, r.b.exe, r.dir, name, "broker", "-dir", filepath.Join(r.dir, "nats-"+strconv.Itoa(i)),
			"-port", strconv.Itoa(port), "-name", "weir-"+strconv.Itoa(i), "-cluster-port", strconv.Itoa(routePorts[i]), "-routes", strings.Join(routes, ","))
		if err != nil {
			return err
		}
		if i == 0 {
			r.broker = ch
		} else {
			r.peers = append(r.peers, ch)
		}
		urls = append(urls, url)
	}
	r.url, r.replicas = strings.Join(urls, ","), len(ports)
	return nil
}

// brokers are the run's brokers: one, or a cluster's nodes.
func (r *pipelineRun) brokers() []**child {
	return append([]**child{&r.broker}, pointers(r.peers)...)
}

// gen is the generator of the run's events: n of them at rate (0: as fast
// as they are stored), event times from first, or an hour ago if zero.
func (r *pipelineRun) gen(n int, rate float64) nexmarkgen.Config {
	first, ooo, eps := time.Now().Add(-time.Hour), time.Second, 1000.0
	if rate > 0 {
		// Event time follows the wall clock, so that latency is the time
		// from an event's due moment to its result.
		first, ooo, eps = time.Now(), 0, rate
	}
	in := r.c.Ingress
	return nexmarkgen.Config{
		Stream: in.Stream, Streams: in.Streams, SubjectPrefix: in.SubjectPrefix, Retention: in.Retention.D(), DuplicateWindow: ingress.Duplicates(in),
		Producer: "bench", Rate: rate, Replicas: r.replicas,
		Gen: nexmark.Config{Seed: 1, FirstEventTime: first, EventsPerSecond: eps,
			Partitions: in.Partitions, KeyGroups: r.c.State.KeyGroups, OutOfOrder: ooo,
			Events: uint64(n), Hard: nexmark.HardCases{IdlePartition: -1}},
	}
}

// publish stores the run's n events into the ingress at rate.
func (r *pipelineRun) publish(ctx context.Context, n int, rate float64) error {
	got, err := nexmarkgen.Publish(ctx, r.js, r.gen(n, rate), time.Now, nil)
	if err == nil && got != uint64(n) {
		err = fmt.Errorf("generator stored %d of %d events", got, n)
	}
	return err
}

// start starts the pipeline's services and coordinator and waits until
// every operator instance says it is ready.
func (r *pipelineRun) start(ctx context.Context) error {
	var services []string
	for _, op := range r.c.Operators {
		if !slices.Contains(services, op.Service) {
			services = append(services, op.Service)
		}
	}
	for _, s := range services {
		ch, _, err := spawn(ctx, r.b.exe, r.dir, s, r.profiled(s, "service", "-query", r.query, "-service", s, "-replicas", strconv.Itoa(r.replicas),
			"-nats", r.url, "-dir", filepath.Join(r.dir, s), "-effect", r.b.effect, "-checkpoint-mode", r.mode, "-ingress-streams", strconv.Itoa(r.b.streams))...)
		if err != nil {
			return err
		}
		r.procs = append(r.procs, ch)
	}
	holders, name := r.holders, func(string) string { return "coordinator" }
	if len(holders) == 0 {
		holders = []string{childInstance}
	} else {
		name = func(h string) string { return "coordinator-" + h }
	}
	for _, h := range holders {
		co, _, err := spawn(ctx, r.b.exe, r.dir, name(h), r.profiled(name(h), "coordinator", "-query", r.query, "-nats", r.url, "-holder", h, "-replicas", strconv.Itoa(r.replicas),
			"-interval", r.b.interval.String(), "-timeout", r.timeout.String(), "-effect", r.b.effect, "-checkpoint-mode", r.mode, "-ingress-streams", strconv.Itoa(r.b.streams))...)
		if err != nil {
			return err
		}
		r.procs = append(r.procs, co)
	}
	for deadline := time.Now().Add(time.Minute); ; {
		st, err := r.stats(ctx)
		if err == nil && !slices.ContainsFunc(st, func(s status.Stats) bool { return !s.Ready }) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pipeline not ready after a minute: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stats asks every operator instance for its Stats, in contract order.
func (r *pipelineRun) stats(ctx context.Context) ([]status.Stats, error) {
	for _, p := range r.procs {
		if err := p.failed(); err != nil {
			return nil, err
		}
	}
	out := make([]status.Stats, len(r.c.Operators))
	for i, op := range r.c.Operators {
		st, err := status.RequestStats(ctx, r.nc, r.c.Pipeline, op.ID, childInstance)
		if err != nil {
			return nil, fmt.Errorf("stats of %s: %w", op.ID, err)
		}
		out[i] = st
	}
	return out, nil
}

// consumed is how many ingress events the first operator has handled.
func consumed(st []status.Stats) int64 {
	return st[0].In + st[0].DeadLettered + st[0].SideOutput
}

// drained reports whether every operator has handled all n events, or all
// its upstream emitted.
func drained(st []status.Stats, n int, transactional bool) bool {
	if consumed(st) < int64(n) {
		return false
	}
	// A transactional sink's results count once released.
	if last := st[len(st)-1]; transactional && last.Released < last.Out {
		return false
	}
	for i := 1; i < len(st); i++ {
		if st[i].In+st[i].DeadLettered+st[i].SideOutput < st[i-1].Out {
			return false
		}
	}
	return true
}

// waitDrained polls the operators until they have handled n events.
func (r *pipelineRun) waitDrained(ctx context.Context, n int) error {
	for deadline := time.Now().Add(30 * time.Minute); ; {
		st, err := r.stats(ctx)
		if err != nil {
			return err
		}
		if drained(st, n, r.c.Sink.Effect == contracts.EffectTransactional) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not drained after 30 minutes: first operator at %d of %d", consumed(st), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// profiledProcs are the processes started with -profile.
func (r *pipelineRun) profiledProcs() []*child {
	var ps []*child
	for _, p := range append([]*child{r.broker}, r.procs...) {
		if r.profile != "" && slices.Contains(p.args, "-profile") {
			ps = append(ps, p)
		}
	}
	return ps
}

// profileSpan starts (SIGUSR1) or ends (SIGUSR2) the profiles of a
// profiled run's processes (profileOnSignal), so that they hold the
// measured span alone.
func (r *pipelineRun) profileSpan(sig syscall.Signal) error {
	for _, p := range r.profiledProcs() {
		if sig == syscall.SIGUSR1 {
			os.Remove(r.profile + p.name + ".cpu.pprof") // an earlier run's
		}
		if err := p.cmd.Process.Signal(sig); err != nil {
			return fmt.Errorf("profile %s: %w", p.name, err)
		}
	}
	return nil
}

// costs waits for the profiles the processes write at the span's end and
// writes the run's cost model, per stage and process over the events
// handled, into the profile directory and the benchmark's log.
func (r *pipelineRun) costs(events int64) error {
	files := map[string]string{}
	for _, p := range r.profiledProcs() {
		f := r.profile + p.name + ".cpu.pprof"
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if _, err := os.Stat(f); err == nil {
				break
			} else if time.Now().After(deadline) {
				return fmt.Errorf("profile of %s: %w", p.name, err)
			}
		}
		files[p.name] = f
	}
	c, err := bench.ReadCosts(files, events)
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: CPU per event over %d events, by stage (internal/bench.Costs)\n", r.query, events)
	if err := c.WriteTable(&b); err != nil {
		return err
	}
	fmt.Fprint(r.b.log, b.String())
	return os.WriteFile(r.profile+"costs.txt", []byte(b.String()), 0o644)
}

// reading is one reading of the run's processes.
type reading struct {
	at     time.Time
	weir   time.Duration // CPU of the services and the coordinator
	broker time.Duration
	self   time.Duration // CPU of this process
	rss    map[string]int64
}

func (r *pipelineRun) usage() (reading, error) {
	u := reading{at: time.Now(), rss: map[string]int64{}}
	for _, p := range append([]*child{r.broker}, r.procs...) {
		pu, err := p.usage()
		if err != nil {
			return u, fmt.Errorf("usage of %s: %w", p.name, err)
		}
		if p == r.broker {
			u.broker = pu.CPU
		} else {
			u.weir += pu.CPU
		}
		u.rss[p.name] = pu.PeakRSS
	}
	self, err := bench.ReadUsage(os.Getpid())
	u.self = self.CPU
	return u, err
}

// between fills m's rate, CPU, memory and checkpoints from two readings.
func (r *pipelineRun) between(ctx context.Context, m *bench.Measurement, from, to reading) error {
	m.CPUSeconds = (to.weir - from.weir).Seconds()
	m.BrokerCPUSeconds = (to.broker - from.broker).Seconds()
	m.Rate(to.at.Sub(from.at))
	m.PeakRSS = map[string]int64{}
	for name, v := range to.rss {
		if name == "broker" {
			continue
		}
		m.PeakRSS[name] = v
		m.PeakRSSBytes = max(m.PeakRSSBytes, v)
	}
	store, err := checkpoint.Open(ctx, r.js, r.c.Pipeline, 0) // as deployed: a tool never refuses a scale
	if err != nil {
		return err
	}
	recs, err := store.Records(ctx)
	if err != nil {
		return err
	}
	var total time.Duration
	for _, rec := range recs {
		if rec.Status != checkpoint.Complete || rec.Triggered.Before(from.at) || rec.Completed.After(to.at) {
			continue
		}
		m.Checkpoints++
		total += rec.Duration()
		m.CheckpointMaxMs = max(m.CheckpointMaxMs, float64(rec.Duration().Microseconds())/1000)
	}
	if m.Checkpoints > 0 {
		m.CheckpointMeanMs = float64(total.Microseconds()) / 1000 / float64(m.Checkpoints)
	}
	return nil
}
