package test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/status"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/producer"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/dedup"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
)

// whileFile reports, checking at most every 100 ms, whether a file
// exists: a switch a test flips for a child process.
func whileFile(file string) func() bool {
	var mu sync.Mutex
	var checked time.Time
	var on bool
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(checked) > 100*time.Millisecond {
			_, err := os.Stat(file)
			on, checked = err == nil, time.Now()
		}
		return on
	}
}

// TestSlowSinkChild runs the operator WEIR_OPERATOR of the dedup service
// as a service process does (stream.Main), its publish operator slowed
// while the file WEIR_TEST_SLOW names exists.
func TestSlowSinkChild(t *testing.T) {
	if os.Getenv("WEIR_TEST_CHILD") != "slow-sink" {
		t.Skip("runs only as a child process of TestSlowSinkKeepsMemoryBounded")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fs := dedup.Factories()
	publish := fs["publish"]
	fs["publish"] = func(c *contracts.Contract) (operator.Operator, error) {
		o, err := publish(c)
		return throttled{Operator: o, per: 2 * time.Millisecond, while: whileFile(os.Getenv("WEIR_TEST_SLOW"))}, err
	}
	if err := stream.Main(ctx, "dedup", dedup.Version, nil, os.Getenv, os.Stderr, fs); err != nil {
		t.Fatal(err)
	}
}

// TestSlowSinkKeepsMemoryBounded runs the dedup pipeline as processes —
// dedup, publish and a coordinator checkpointing every second — and makes
// its sink, the publish operator, about a hundred times slower than it is
// while events arrive faster than it then takes them: its input lag rises,
// no process's resident memory, read from /proc, passes the bound the
// process declares, and once the sink is fast again the backlog drains
// and every event comes out exactly once.
func TestSlowSinkKeepsMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs processes for half a minute")
	}
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	nc := srv.Connect(t)
	c := loadContract(t)
	// Events of 8 KiB: the backlog (some 300 MiB on each stream) is larger
	// than any process's bound, so buffering it would show.
	const events, pad = 40000, 8 << 10
	dir := t.TempDir()
	slow := filepath.Join(dir, "slow")
	if err := os.WriteFile(slow, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	env := func(extra ...string) []string {
		return append(append(os.Environ(), "NATS_URL="+srv.ClientURL(), "WEIR_CONTRACT="+contractPath(t),
			"WEIR_INSTANCE=0", "GOMEMLIMIT="), extra...)
	}
	procs := map[string]*exec.Cmd{
		"dedup":       exec.Command(os.Args[0], "-test.run=^TestSlowSinkChild$"),
		"publish":     exec.Command(os.Args[0], "-test.run=^TestSlowSinkChild$"),
		"coordinator": exec.Command(os.Args[0], "-test.run=^TestCoordinatorChild$"),
	}
	procs["dedup"].Env = env("WEIR_TEST_CHILD=slow-sink", "WEIR_OPERATOR=dedup", "WEIR_DATA_DIR="+filepath.Join(dir, "dedup"))
	procs["publish"].Env = env("WEIR_TEST_CHILD=slow-sink", "WEIR_OPERATOR=publish", "WEIR_DATA_DIR="+filepath.Join(dir, "publish"), "WEIR_TEST_SLOW="+slow)
	procs["coordinator"].Env = env("WEIR_TEST_CHILD=coordinator", "WEIR_CHECKPOINT_INTERVAL=1s")
	for name, cmd := range procs {
		if testing.Verbose() {
			cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			if err := cmd.Wait(); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}()
	}
	// Resident memory, sampled from outside the processes.
	peak := map[string]int64{}
	var peakMu sync.Mutex
	sampling, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			for name, cmd := range procs {
				if rss, err := procStatus(cmd.Process.Pid, "VmRSS"); err == nil {
					peakMu.Lock()
					peak[name] = max(peak[name], rss)
					peakMu.Unlock()
				}
			}
			select {
			case <-sampling:
				return
			case <-tick.C:
			}
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := publishPadded(ctx, js, c, events, pad); err != nil {
		t.Fatal(err)
	}
	// While the sink is slow the backlog waits in its input stream: dedup
	// has passed every event on, and publish has taken fewer than half.
	var s status.Status
	streamtest.CheckFor(t, time.Minute, func() error {
		var err error
		if s, err = status.Gather(ctx, nc, js, c); err != nil {
			return err
		}
		if o := operatorStatus(s, "dedup"); o.Out < int64(events) {
			return fmt.Errorf("dedup has passed on %d of %d events", o.Out, events)
		}
		return nil
	})
	publish := operatorStatus(s, "publish")
	if publish.In >= int64(events)/2 || publish.Lag == 0 {
		t.Fatalf("the slow sink has taken %d of %d events and is %d messages behind: it was not slow", publish.In, events, publish.Lag)
	}
	lagged := publish.Lag
	slowFor := time.Now()
	if err := os.Remove(slow); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for i := range events {
		want[fmt.Sprintf("e%d", i)] = true
	}
	streamtest.CheckFor(t, 2*time.Minute, func() error {
		return sinkExactlyOnce(t, js, c, want)
	})
	drained := time.Since(slowFor)

	// The bounds each process declares, from the status it answers.
	s, err := status.Gather(ctx, nc, js, c)
	if err != nil {
		t.Fatal(err)
	}
	bound := map[string]int64{}
	for _, o := range s.Operators {
		for _, in := range o.Instances {
			bound[o.ID] += in.Stats.Memory
		}
	}
	for _, co := range s.Coordinators {
		bound["coordinator"] = max(bound["coordinator"], co.Memory)
	}
	close(sampling)
	<-sampled
	for name, cmd := range procs {
		// The kernel's own peak, beside the samples.
		if hwm, err := procStatus(cmd.Process.Pid, "VmHWM"); err == nil {
			peak[name] = max(peak[name], hwm)
		}
		if bound[name] == 0 {
			t.Errorf("%s declares no memory bound", name)
			continue
		}
		if peak[name] > bound[name] {
			t.Errorf("%s: resident memory reached %d MiB, over the %d MiB it declares", name, peak[name]>>20, bound[name]>>20)
		}
		t.Logf("%s: peak resident %d MiB of %d MiB declared", name, peak[name]>>20, bound[name]>>20)
	}
	t.Logf("publish was %d messages behind; drained in %v once the sink was fast", lagged, drained.Round(time.Millisecond))
}

// procStatus reads a memory figure (VmRSS, VmHWM) of a process from
// /proc/<pid>/status, in bytes.
func procStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		return kb << 10, err
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

func operatorStatus(s status.Status, id string) status.Operator {
	for _, o := range s.Operators {
		if o.ID == id {
			return o
		}
	}
	return status.Operator{}
}

// publishPadded publishes n events, each with a pad of that many bytes,
// round-robin over the ingress partitions, in atomic batches.
func publishPadded(ctx context.Context, js jetstream.JetStream, c *contracts.Contract, n, pad int) error {
	cfg := genConfig(c, 0)
	if _, err := nexmarkgen.EnsureStream(ctx, js, cfg); err != nil {
		return err
	}
	filler := strings.Repeat("x", pad)
	ts := time.Now().Add(-time.Hour).UnixMilli()
	for first := 0; first < n; first += 1000 {
		var msgs []*nats.Msg
		for i := first; i < min(first+1000, n); i++ {
			m := nats.NewMsg(c.Ingress.Subject(i % c.Ingress.Partitions))
			m.Data = fmt.Appendf(nil, `{"id":"e%d","key":"k%d","ts":%d,"pad":%q}`, i, i%1000, ts+int64(i), filler)
			m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("e%d", i))
			msgs = append(msgs, m)
		}
		if _, err := producer.Publish(ctx, js, msgs, 1000, 4); err != nil {
			return err
		}
	}
	return nil
}
