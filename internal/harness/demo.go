package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/dispatcher"
	"github.com/weirflow/weir/internal/catalog"
	"github.com/weirflow/weir/internal/cli"
	"github.com/weirflow/weir/internal/nexmark"
	ingresspkg "github.com/weirflow/weir/pkg/ingress"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/services/coordinator"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
	"github.com/weirflow/weir/services/provider"
)

// demoState is kept in the data directory so that a demo resumed with
// --data continues the same event stream.
type demoState struct {
	Seed           int64     `json:"seed"`
	FirstEventTime time.Time `json:"first_event_time"`
}

// demo runs an embedded NATS server, the Nexmark generator and the chosen
// pipelines in one process and prints progress every second.
func (h *Harness) demo(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cat := h.Catalog
	names := cat.Names()
	sort.Strings(names)
	fs := cli.NewFlags("weir demo", getenv)
	duration, dataDir, rate, port, seed := new(time.Duration), new(string), new(float64), new(int), new(int64)
	query, verbose, status := new(string), new(bool), new(string)
	fs.Duration(duration, "duration", "WEIR_DEMO_DURATION", 0, "stop after this long (0: until interrupted)")
	fs.String(dataDir, "data", "WEIR_DATA_DIR", "", "keep NATS and operator state in this directory between runs (default: a temporary directory)")
	fs.Float64(rate, "rate", "WEIR_RATE", 2000, "events per second the generator publishes")
	fs.Int(port, "port", "WEIR_NATS_PORT", 4222, "port of the embedded NATS server (0: any free port)")
	fs.Int64(seed, "seed", "WEIR_SEED", 1, "generator seed (a resumed --data directory keeps its own)")
	fs.String(query, "query", "WEIR_QUERY", "dedup", "pipelines to run, comma-separated, or all: "+strings.Join(names, ", "))
	fs.Bool(verbose, "v", "WEIR_VERBOSE", false, "log the services' messages to stderr")
	fs.String(status, "status", "WEIR_STATUS_ADDR", "127.0.0.1:8080", "address of the first pipeline's status page (empty: none)")
	profile := new(string)
	fs.String(profile, "profile", "WEIR_DEMO_PROFILE", "", "write CPU and block profiles of the whole process to FILE.cpu.pprof and FILE.block.pprof")
	providerAddr := new(string)
	fs.String(providerAddr, "provider", "WEIR_PROVIDER_LISTEN", "127.0.0.1:8090", "address of the payment-provider simulator, for pipelines with an outbox (taken: any free port)")
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	var chosen []catalog.Query
	if *query == "all" {
		for _, n := range names {
			q, _ := cat.Lookup(n)
			chosen = append(chosen, q)
		}
	} else {
		for _, n := range strings.Split(*query, ",") {
			q, ok := cat.Lookup(n)
			if !ok {
				fmt.Fprintf(stderr, "weir demo: unknown query %q (have %s, all)\n", n, strings.Join(names, ", "))
				return cli.ExitError(2)
			}
			chosen = append(chosen, q)
		}
	}
	if *profile != "" {
		stop, err := startProfiles(*profile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	dir, cleanup, err := cli.WorkDir(*dataDir, "weir-demo-")
	if err != nil {
		return err
	}
	defer cleanup()
	st, err := loadDemoState(dir, *seed)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if *verbose {
		logger = slog.New(slog.NewTextHandler(stderr, nil))
	}

	srv, err := startServer(filepath.Join(dir, "nats"), *port)
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	nc, js, err := connect(srv.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()

	// Every pipeline reads the same ingress; the first contract describes it.
	var rts []*stream.Runtime
	var coordinators []*coordinator.Coordinator
	var dispatchers []*dispatcher.Dispatcher
	var prov *demoProvider
	var ingress *contracts.Contract
	fmt.Fprintf(stdout, "weir demo: NATS at %s (JetStream in %s, every write synced)\n", srv.ClientURL(), filepath.Join(dir, "nats"))
	for _, p := range chosen {
		c, err := p.LoadContract()
		if err != nil {
			return err
		}
		if ingress == nil {
			ingress = c
		}
		prts, err := stream.Runtimes(stream.Config{NATSURL: srv.ClientURL(), Contract: c, DataDir: filepath.Join(dir, c.Pipeline),
			Instance: "demo", Logger: logger}, p.Service, p.Factories, nil)
		if err != nil {
			return err
		}
		rts = append(rts, prts...)
		statusAddr := ""
		if len(coordinators) == 0 {
			statusAddr = *status
		}
		co, err := coordinator.New(coordinator.Config{NATSURL: srv.ClientURL(), Contract: c, Holder: "demo", Logger: logger, StatusAddr: statusAddr})
		if err != nil {
			return err
		}
		coordinators = append(coordinators, co)
		fmt.Fprintf(stdout, "pipeline %s (%s): results: %s\n", c.Pipeline, c.File, fmt.Sprintf(p.Results, srv.ClientURL()))
		fmt.Fprintf(stdout, "  checkpoints every %s: weir checkpoint list -nats %s -pipeline %s\n", c.Recovery.CheckpointInterval, srv.ClientURL(), c.Pipeline)
		if c.Sink.Effect == contracts.EffectOutbox {
			if prov == nil {
				if prov, err = startProvider(*providerAddr, filepath.Join(dir, "provider.journal")); err != nil {
					return err
				}
				defer prov.Close()
			}
			d, err := startDispatcher(ctx, js, c, prov.URL, logger)
			if err != nil {
				return err
			}
			dispatchers = append(dispatchers, d)
			fmt.Fprintf(stdout, "  effects: a dispatcher performs each intent once at the provider simulator; charges made: curl -s %s/effects\n", prov.URL)
			fmt.Fprintf(stdout, "  outcomes: weir effects list -nats %s -pipeline %s\n", srv.ClientURL(), c.Pipeline)
		}
	}

	gen := nexmarkgen.Config{
		Stream:          ingress.Ingress.Stream,
		Streams:         ingress.Ingress.Streams,
		SubjectPrefix:   ingress.Ingress.SubjectPrefix,
		Retention:       ingress.Ingress.Retention.D(),
		DuplicateWindow: ingresspkg.Duplicates(ingress.Ingress),
		Rate:            *rate,
		Producer:        "demo",
		// The embedded server takes batches of natstest.MaxBatch: at tens of
		// thousands of events a second, ten times fewer writes and fsyncs
		// than the default 1,000 (docs/BENCHMARKS.md).
		Batch: natstest.MaxBatch,
		// By stream sequence, without a Nats-Msg-Id for the broker to
		// remember: it stores them faster (docs/BENCHMARKS.md), and events
		// published beside the generator (nats pub, the ingest gateway)
		// are stored between its batches.
		Sequenced: true,
		Gen: nexmark.Config{
			Seed:            st.Seed,
			FirstEventTime:  st.FirstEventTime,
			EventsPerSecond: *rate,
			Partitions:      ingress.Ingress.Partitions,
			KeyGroups:       ingress.State.KeyGroups,
			OutOfOrder:      time.Second,
			Hard: nexmark.HardCases{
				DuplicateEvery: 20,
				LateEvery:      499,
				LateBy:         4 * time.Second,
				FutureEvery:    997,
				FutureBy:       time.Hour,
				IdlePartition:  -1,
				HotKeyRatio:    0.1,
			},
		},
	}
	ingressStreams, err := nexmarkgen.EnsureStream(ctx, js, gen)
	if err != nil {
		return err
	}
	for _, st := range ingressStreams {
		if why := nexmarkgen.Unbatched(st); why != "" {
			fmt.Fprintf(stdout, "warning: %s\n", why)
		}
	}
	// Resume where a previous run stopped.
	if gen.Start, err = nexmarkgen.Resume(ctx, js, gen); err != nil {
		return err
	}
	if gen.Start > 0 {
		fmt.Fprintf(stdout, "resuming: the generator published %d events before\n", gen.Start)
	}

	runCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	var wg sync.WaitGroup
	published := &counter{}
	runErrs := make(chan error, 2+len(coordinators)+len(dispatchers))
	for _, d := range dispatchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.Run(runCtx); err != nil && runCtx.Err() == nil {
				runErrs <- fmt.Errorf("dispatcher: %w", err)
			}
		}()
	}
	for _, co := range coordinators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := co.Run(runCtx); err != nil && runCtx.Err() == nil {
				runErrs <- fmt.Errorf("coordinator: %w", err)
			}
		}()
	}
	genStart := time.Now()
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, err := nexmarkgen.Publish(runCtx, js, gen, time.Now, published.set)
		if err != nil && runCtx.Err() == nil {
			runErrs <- fmt.Errorf("nexmark-gen: %w", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := stream.RunGroup(runCtx, rts...); err != nil && runCtx.Err() == nil {
			runErrs <- err
		}
	}()

	if len(coordinators) > 0 && *status != "" {
		// The status server starts with the coordinator; say where it is
		// once it listens.
		go func() {
			for i := 0; i < 50 && runCtx.Err() == nil; i++ {
				if u := coordinators[0].StatusURL(); u != "" {
					fmt.Fprintf(stdout, "status page: %s   (or: weir status -nats %s -pipeline %s -watch 1s)\n", u, srv.ClientURL(), ingress.Pipeline)
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	err = progress(runCtx, stdout, published, rts, prov, runErrs)
	took := time.Since(genStart)
	stopAll()
	wg.Wait()
	fmt.Fprintf(stdout, "stopped after %d events generated in %s (%.0f/s)\n", published.get(), took.Round(100*time.Millisecond), float64(published.get())/took.Seconds())
	for _, rt := range rts {
		s := rt.Stats()
		fmt.Fprintf(stdout, "  %-14s in %d, out %d, dead letters %d, side output %d\n", s.Operator, s.In, s.Out, s.DeadLettered, s.SideOutput)
	}
	if prov != nil {
		fmt.Fprintf(stdout, "  provider       %d charges made, in %d requests\n", len(prov.Effects()), prov.Requests())
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

// progress prints a line a second: events generated, and for each operator
// records in and out with rates, its watermark and its state keys.
func progress(ctx context.Context, w io.Writer, published *counter, rts []*stream.Runtime, prov *demoProvider, errs <-chan error) error {
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := start
	lastPub := int64(0)
	lastIn := make([]int64, len(rts))
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			return err
		case now := <-tick.C:
			dt := now.Sub(last).Seconds()
			pub := published.get()
			var b strings.Builder
			// The generator's count moves a stored batch at a time, so the
			// last second's rate jumps; the rate since the start does not.
			fmt.Fprintf(&b, "%5s  generated %d (%.0f/s, %.0f/s since the start)", now.Sub(start).Round(time.Second), pub, float64(pub-lastPub)/dt, float64(pub)/now.Sub(start).Seconds())
			for i, rt := range rts {
				s := rt.Stats()
				fmt.Fprintf(&b, " | %s %d→%d (%.0f/s)", s.Operator, s.In, s.Out, float64(s.In-lastIn[i])/dt)
				if !s.Watermark.IsZero() {
					fmt.Fprintf(&b, " wm %s", s.Watermark.Format("15:04:05"))
				}
				keys := int64(0)
				for _, n := range s.StateKeys {
					keys += n
				}
				if keys > 0 {
					fmt.Fprintf(&b, " keys %d", keys)
				}
				if s.DeadLettered+s.SideOutput > 0 {
					fmt.Fprintf(&b, " dlq %d side %d", s.DeadLettered, s.SideOutput)
				}
				lastIn[i] = s.In
			}
			if prov != nil {
				fmt.Fprintf(&b, " | charged %d", len(prov.Effects()))
			}
			fmt.Fprintln(w, b.String())
			lastPub, last = pub, now
		}
	}
}

// demoProvider is the payment-provider simulator the demo's dispatchers
// call, served on a local port.
type demoProvider struct {
	*provider.Provider
	URL string
	srv *http.Server
}

// startProvider serves the simulator on addr, or on any free port of its
// host if that one is taken, keeping its record in the journal file, so a
// demo resumed with -data knows the charges it made before.
func startProvider(addr, journal string) (*demoProvider, error) {
	pr, err := provider.Open(journal)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		host, _, _ := net.SplitHostPort(addr)
		if l, err = net.Listen("tcp", net.JoinHostPort(host, "0")); err != nil {
			pr.Close()
			return nil, fmt.Errorf("provider simulator: %w", err)
		}
	}
	p := &demoProvider{Provider: pr, URL: "http://" + l.Addr().String()}
	p.srv = &http.Server{Handler: p.Provider, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(l) }()
	return p, nil
}

// Close stops serving and closes the journal.
func (p *demoProvider) Close() { _ = p.srv.Close(); _ = p.Provider.Close() }

// startDispatcher makes the dispatcher of an outbox pipeline, calling the
// provider at url.
func startDispatcher(ctx context.Context, js jetstream.JetStream, c *contracts.Contract, url string, logger *slog.Logger) (*dispatcher.Dispatcher, error) {
	cfg, err := dispatcher.ForContract(c, url)
	if err != nil {
		return nil, err
	}
	cfg.Logger = logger.With("service", "dispatcher", "pipeline", c.Pipeline)
	return dispatcher.New(ctx, js, cfg)
}

// startServer starts the embedded server on port, or on any free port if
// that one is taken.
func startServer(dir string, port int) (*natstest.Server, error) {
	if port != 0 {
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
			port = 0
		} else {
			l.Close()
		}
	}
	return natstest.Start(natstest.Options{Dir: dir, Port: port, ServerName: "weir-demo"})
}

func loadDemoState(dir string, seed int64) (demoState, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return demoState{}, err
	}
	p := filepath.Join(dir, "demo.json")
	var st demoState
	if b, err := os.ReadFile(p); err == nil {
		if err := json.Unmarshal(b, &st); err != nil {
			return demoState{}, fmt.Errorf("demo state %s: %w", p, err)
		}
		return st, nil
	}
	st = demoState{Seed: seed, FirstEventTime: time.Now().UTC().Truncate(time.Second)}
	b, _ := json.Marshal(st)
	return st, os.WriteFile(p, b, 0o644)
}

// counter is the generator's published count, read by the progress loop.
type counter struct {
	mu sync.Mutex
	n  int64
}

func (c *counter) set(n uint64) { c.mu.Lock(); c.n = int64(n); c.mu.Unlock() }
func (c *counter) get() int64   { c.mu.Lock(); defer c.mu.Unlock(); return c.n }
