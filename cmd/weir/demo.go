package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/nexmark"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/services/dedup"
	"github.com/weirflow/weir/services/nexmark-gen"
)

// demoState is kept in the data directory so that a demo resumed with
// --data continues the same event stream.
type demoState struct {
	Seed           int64     `json:"seed"`
	FirstEventTime time.Time `json:"first_event_time"`
}

// demo runs an embedded NATS server, the Nexmark generator and the dedup
// operator in one process and prints progress every second.
func demo(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("weir demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	duration := fs.Duration("duration", 0, "stop after this long (0: until interrupted)")
	dataDir := fs.String("data", "", "keep NATS and operator state in this directory between runs (default: a temporary directory)")
	rate := fs.Float64("rate", 2000, "events per second the generator publishes")
	port := fs.Int("port", 4222, "port of the embedded NATS server (0: any free port)")
	seed := fs.Int64("seed", 1, "generator seed (a resumed --data directory keeps its own)")
	verbose := fs.Bool("v", false, "log the services' messages to stderr")
	if err := fs.Parse(args); err != nil {
		return exitError(2)
	}
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	dir := *dataDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "weir-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	st, err := loadDemoState(dir, *seed)
	if err != nil {
		return err
	}
	contract, err := contracts.Shipped("nexmark-dedup")
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
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}

	gen := nexmarkgen.Config{
		Stream:        contract.Ingress.Stream,
		SubjectPrefix: contract.Ingress.SubjectPrefix,
		Retention:     contract.Ingress.Retention.D(),
		Rate:          *rate,
		Producer:      "demo",
		Gen: nexmark.Config{
			Seed:            st.Seed,
			FirstEventTime:  st.FirstEventTime,
			EventsPerSecond: *rate,
			Partitions:      contract.Ingress.Partitions,
			KeyGroups:       contract.State.KeyGroups,
			OutOfOrder:      time.Second,
			Hard: nexmark.HardCases{
				DuplicateEvery: 20,
				FutureEvery:    997,
				FutureBy:       time.Hour,
				IdlePartition:  -1,
			},
		},
	}
	ingress, err := nexmarkgen.EnsureStream(ctx, js, gen)
	if err != nil {
		return err
	}
	info, err := ingress.Info(ctx)
	if err != nil {
		return err
	}
	gen.Start = info.State.Msgs // resume where a previous run stopped

	op := dedup.New()
	rt, err := stream.New(stream.Config{
		NATSURL:  srv.ClientURL(),
		Contract: contract,
		DataDir:  filepath.Join(dir, "dedup"),
		Operator: "dedup",
		Instance: "demo",
		Version:  dedup.Version,
		Logger:   logger,
	}, op)
	if err != nil {
		return err
	}

	fmt.Fprintf(stdout, "weir demo: NATS at %s (JetStream in %s, every write synced)\n", srv.ClientURL(), filepath.Join(dir, "nats"))
	fmt.Fprintf(stdout, "pipeline %s: nexmark-gen → %s → edge %s; contract %s\n", contract.Pipeline, contract.Ingress.Stream, "deduped", contract.File)
	fmt.Fprintf(stdout, "read results: weir tail -nats %s -pipeline %s -edge deduped\n", srv.ClientURL(), contract.Pipeline)
	if gen.Start > 0 {
		fmt.Fprintf(stdout, "resuming: the ingress stream already holds %d events\n", gen.Start)
	}

	runCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	var wg sync.WaitGroup
	var published, runErrs = newCounter(), make(chan error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, err := nexmarkgen.Publish(runCtx, js, gen, time.Now, func(n uint64) { published.set(int64(n)) })
		if err != nil && runCtx.Err() == nil {
			runErrs <- fmt.Errorf("nexmark-gen: %w", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := rt.Run(runCtx); err != nil && runCtx.Err() == nil {
			runErrs <- fmt.Errorf("dedup: %w", err)
		}
	}()

	err = progress(runCtx, stdout, published, op, rt, runErrs)
	stopAll()
	wg.Wait()
	s := rt.Stats()
	fmt.Fprintf(stdout, "stopped: %d events generated, %d passed dedup, %d duplicates dropped, %d dead letters\n",
		published.get(), s.Out, op.Duplicates(), s.DeadLettered)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

func progress(ctx context.Context, w io.Writer, published *counter, op *dedup.Operator, rt *stream.Runtime, errs <-chan error) error {
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lastPub, lastIn, lastOut int64
	last := start
	fmt.Fprintf(w, "%6s  %22s  %22s  %22s  %10s  %8s  %10s\n", "time", "generated", "dedup in", "dedup out", "duplicates", "dead", "state keys")
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			return err
		case now := <-tick.C:
			s := rt.Stats()
			dt := now.Sub(last).Seconds()
			pub := published.get()
			rate := func(n, prev int64) string { return fmt.Sprintf("%d (%.0f/s)", n, float64(n-prev)/dt) }
			fmt.Fprintf(w, "%6s  %22s  %22s  %22s  %10d  %8d  %10d\n",
				now.Sub(start).Round(time.Second), rate(pub, lastPub), rate(s.In, lastIn), rate(s.Out, lastOut),
				op.Duplicates(), s.DeadLettered, s.StateKeys[dedup.Family])
			lastPub, lastIn, lastOut, last = pub, s.In, s.Out, now
		}
	}
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

type counter struct {
	mu sync.Mutex
	n  int64
}

func newCounter() *counter     { return &counter{} }
func (c *counter) set(n int64) { c.mu.Lock(); c.n = n; c.mu.Unlock() }
func (c *counter) get() int64  { c.mu.Lock(); defer c.mu.Unlock(); return c.n }
