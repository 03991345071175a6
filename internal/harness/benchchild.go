package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/weirflow/weir/internal/bench"
	"github.com/weirflow/weir/internal/cli"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/services/coordinator"
)

// The processes of a benchmark. `weir bench nexmark` runs the broker, each
// service and the coordinator as processes of their own, as a deployment
// does, so that each one's CPU time and peak memory can be read from /proc.
// They are this same executable, started as `weir bench child ROLE`.

// childInstance is the instance name of every operator a benchmark runs.
const childInstance = "bench"

// benchChild runs one process of a benchmark: broker, service or
// coordinator. It says it is up with one line on stdout — the broker its
// client URL — and runs until it is signalled.
func (h *Harness) benchChild(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return cli.UsageOf("usage: weir bench child broker|service|coordinator [flags] (started by weir bench nexmark)\n", args, stdout, stderr)
	}
	role := args[0]
	fs := cli.NewFlags("weir bench child "+role, getenv)
	dir, url, query, service := new(string), new(string), new(string), new(string)
	instance, operators, holder := new(string), new(string), new(string)
	interval, timeout := new(time.Duration), new(time.Duration)
	fs.String(dir, "dir", "WEIR_BENCH_DIR", "", "storage directory")
	fs.String(url, "nats", "NATS_URL", "", "NATS server URL")
	fs.String(query, "query", "WEIR_QUERY", "", "the query whose pipeline to run")
	fs.String(service, "service", "WEIR_SERVICE", "", "the service to run")
	fs.String(instance, "instance", "WEIR_INSTANCE", childInstance, "the service's instance name")
	fs.String(operators, "operators", "WEIR_OPERATORS", "", "run only these operators of the service, comma-separated (default: all)")
	fs.String(holder, "holder", "WEIR_HOLDER", childInstance, "the coordinator's name in the lease")
	fs.Duration(interval, "interval", "WEIR_CHECKPOINT_INTERVAL", 0, "checkpoint interval (0: the contract's)")
	fs.Duration(timeout, "timeout", "WEIR_CHECKPOINT_TIMEOUT", 0, "checkpoint timeout; the lease lasts 2s longer (0: the coordinator's default)")
	profile, effect, mode := new(string), new(string), new(string)
	port, clusterPort, replicas, streams := new(int), new(int), new(int), new(int)
	name, routes := new(string), new(string)
	fs.String(name, "name", "WEIR_NATS_NAME", "weir-bench", "the broker's server name")
	fs.Int(clusterPort, "cluster-port", "WEIR_NATS_CLUSTER_PORT", 0, "the broker's route port, making it a node of a cluster with -routes (0: a broker alone)")
	fs.String(routes, "routes", "WEIR_NATS_ROUTES", "", "the cluster's route URLs, comma-separated, this broker's own among them")
	fs.Int(replicas, "replicas", "WEIR_REPLICAS", 1, "replicas of the streams and buckets the processes create (3 on a three-node cluster)")
	fs.String(effect, "effect", "WEIR_BENCH_EFFECT", "", "sink effect to run the contract with (default: the contract's)")
	fs.String(mode, "checkpoint-mode", "WEIR_CHECKPOINT_MODE", "", "checkpoint mode to run the contract with, aligned or unaligned (default: the contract's)")
	fs.Int(streams, "ingress-streams", "WEIR_INGRESS_STREAMS", 0, "streams to place the contract's ingress over (default: the contract's)")
	fs.Int(port, "port", "WEIR_NATS_PORT", 0, "the broker's port (0: any free one)")
	fs.String(profile, "profile", "WEIR_BENCH_PROFILE", "", "on SIGUSR1 start CPU and block profiles; on SIGUSR2 (or exit) write them to FILE.cpu.pprof and FILE.block.pprof, and the heap's to FILE.heap.pprof")
	if err := cli.Parse(fs, args[1:], stdout, stderr); err != nil {
		return err
	}
	if *profile != "" {
		defer profileOnSignal(*profile, stderr)()
	}
	if role == "broker" {
		o := natstest.Options{Dir: *dir, Port: *port, ServerName: *name}
		if *clusterPort != 0 {
			o.ClusterName, o.ClusterPort, o.Routes = "weir-chaos", *clusterPort, *routes
		}
		srv, err := natstest.Start(o)
		if err != nil {
			return err
		}
		defer srv.Shutdown()
		fmt.Fprintln(stdout, srv.ClientURL())
		<-ctx.Done()
		return nil
	}
	p, ok := h.Catalog.Lookup(*query)
	if !ok {
		return fmt.Errorf("bench child: unknown query %q", *query)
	}
	c, err := p.LoadContract()
	if err != nil {
		return err
	}
	if c, err = withEffect(c, *effect); err != nil {
		return err
	}
	if c, err = withMode(c, *mode); err != nil {
		return err
	}
	if c, err = withStreams(c, *streams); err != nil {
		return err
	}
	// Warnings by default; WEIR_LOG_LEVEL=info or debug when a chaos
	// run's logs must say what every process did.
	level := slog.LevelWarn
	if v := getenv("WEIR_LOG_LEVEL"); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			return fmt.Errorf("bench child: WEIR_LOG_LEVEL: %w", err)
		}
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	switch role {
	case "coordinator":
		if getenv("GOMEMLIMIT") == "" {
			debug.SetMemoryLimit(coordinator.Memory)
		}
		co, err := coordinator.New(coordinator.Config{NATSURL: *url, Contract: c, Holder: *holder, Interval: *interval, Timeout: *timeout, Replicas: *replicas, Logger: logger})
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, "up")
		return ignoreCancel(co.Run(ctx))
	case "service":
		if getenv("GOMEMLIMIT") == "" {
			// As a deployed service's: weir chaos holds each process to
			// the memory its operators declare.
			stream.LimitProcessMemory()
		}
		var ids []string // all of the service's
		if *operators != "" {
			ids = strings.Split(*operators, ",")
		}
		rts, err := stream.Runtimes(stream.Config{NATSURL: *url, Contract: c, DataDir: *dir, Instance: *instance, Replicas: *replicas, Logger: logger},
			*service, p.Factories, ids)
		if err != nil {
			return fmt.Errorf("bench child: %w", err)
		}
		fmt.Fprintln(stdout, "up")
		return ignoreCancel(stream.RunGroup(ctx, rts...))
	}
	return fmt.Errorf("bench child: unknown role %q", role)
}

func ignoreCancel(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// child is a running process of a benchmark.
type child struct {
	name string
	args []string // after `bench child`
	cmd  *exec.Cmd
	log  string // its stderr, a file
	done chan struct{}
	err  error // after done
}

// spawn starts `exe bench child args…` and returns once it has printed its
// first line, which it returns.
func spawn(ctx context.Context, exe, logDir, name string, args ...string) (*child, string, error) {
	c := &child{name: name, args: args, log: filepath.Join(logDir, name+".log"), done: make(chan struct{})}
	// Appended to: a process started again (weir chaos) keeps its log.
	logf, err := os.OpenFile(c.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, "", err
	}
	defer logf.Close()
	c.cmd = exec.Command(exe, append([]string{"bench", "child"}, args...)...)
	c.cmd.Stderr = logf
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("bench: start %s: %w", name, err)
	}
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(out)
		line, _ := r.ReadString('\n')
		lines <- strings.TrimSpace(line)
		io.Copy(io.Discard, r)
	}()
	go func() { c.err = c.cmd.Wait(); close(c.done) }()
	select {
	case line := <-lines:
		if line != "" {
			return c, line, nil
		}
		<-c.done
	case <-c.done:
	case <-ctx.Done():
		c.stop()
		return nil, "", ctx.Err()
	case <-time.After(time.Minute):
	}
	c.stop()
	return nil, "", fmt.Errorf("bench: %s did not come up (%v): %s", name, c.err, c.tail())
}

// usage reads the process's CPU time and peak memory.
func (c *child) usage() (bench.Usage, error) { return bench.ReadUsage(c.cmd.Process.Pid) }

// stop signals the process to stop and waits for it, killing it after 20s.
func (c *child) stop() error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	var exit *exec.ExitError
	if c.err != nil && !errors.As(c.err, &exit) || exit != nil && exit.ExitCode() > 0 {
		return fmt.Errorf("bench: %s: %v: %s", c.name, c.err, c.tail())
	}
	return nil
}

// kill ends the process with SIGKILL, as a crash would, and waits for it.
func (c *child) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// pause stops the process with SIGSTOP for d, as a long garbage
// collection, a swapped-out page or a frozen VM would, then lets it go on
// with SIGCONT.
func (c *child) pause(ctx context.Context, d time.Duration) error {
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); errors.Is(err, os.ErrProcessDone) {
		return nil // ended on its own: weir chaos starts it again
	} else if err != nil {
		return fmt.Errorf("pause %s: %w", c.name, err)
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("resume %s: %w", c.name, err)
	}
	return ctx.Err()
}

// dataDir is the storage directory the process was started with (-dir),
// "" if none.
func (c *child) dataDir() string {
	if i := slices.Index(c.args, "-dir"); i >= 0 && i+1 < len(c.args) {
		return c.args[i+1]
	}
	return ""
}

// failed returns the process's error if it has ended.
func (c *child) failed() error {
	select {
	case <-c.done:
		return fmt.Errorf("bench: %s ended (%v): %s", c.name, c.err, c.tail())
	default:
		return nil
	}
}

// tail is the end of the process's log.
func (c *child) tail() string {
	b, _ := os.ReadFile(c.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// profileOnSignal profiles the measured span of a benchmark alone, not the
// process's start: SIGUSR1 starts a CPU profile and block sampling
// (startProfiles), SIGUSR2 writes them, and so does the returned stop if
// they are still running. Each file appears under its name only once
// written whole, which the benchmark waits for.
func profileOnSignal(prefix string, log io.Writer) (stop func()) {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
	var mu sync.Mutex
	var end func()
	finish := func() {
		if end != nil {
			end()
			end = nil
		}
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case s := <-sig:
				mu.Lock()
				if s == syscall.SIGUSR2 {
					finish()
				} else if end == nil {
					var err error
					if end, err = startProfiles(prefix); err != nil {
						fmt.Fprintln(log, "profile:", err)
					}
				}
				mu.Unlock()
			}
		}
	}()
	return func() {
		signal.Stop(sig)
		close(done)
		mu.Lock()
		defer mu.Unlock()
		finish()
	}
}

// startProfiles starts a CPU profile into prefix.cpu.pprof and records
// blocking events; stop writes the block profile into prefix.block.pprof
// and the heap profile (what is live as of the last collection, and what
// was allocated since the process started) into prefix.heap.pprof.
func startProfiles(prefix string) (stop func(), _ error) {
	cpu, err := os.Create(prefix + ".cpu.pprof.part")
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		cpu.Close()
		return nil, err
	}
	// One blocking event sampled per 100µs blocked.
	runtime.SetBlockProfileRate(100_000)
	return func() {
		pprof.StopCPUProfile()
		runtime.SetBlockProfileRate(0)
		if cpu.Close() == nil {
			os.Rename(prefix+".cpu.pprof.part", prefix+".cpu.pprof")
		}
		if f, err := os.Create(prefix + ".block.pprof"); err == nil {
			_ = pprof.Lookup("block").WriteTo(f, 0)
			f.Close()
		}
		if f, err := os.Create(prefix + ".heap.pprof"); err == nil {
			_ = pprof.Lookup("heap").WriteTo(f, 0)
			f.Close()
		}
	}, nil
}
