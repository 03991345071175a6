package test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/nexmark"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/pkg/window"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
	q5 "github.com/weirflow/weir/services/nexmark-q5"
	q7 "github.com/weirflow/weir/services/nexmark-q7"
)

// startOperators runs every operator of service in the contract and returns
// their runtimes by operator ID.
func startOperators(t *testing.T, url string, c *contracts.Contract, service string, factories map[string]stream.Factory) map[string]*stream.Runtime {
	t.Helper()
	return startOperatorsLogging(t, url, c, service, factories, testLogger(t))
}

// startOperatorsLogging is startOperators with the operators logging to
// logger.
func startOperatorsLogging(t *testing.T, url string, c *contracts.Contract, service string, factories map[string]stream.Factory, logger *slog.Logger) map[string]*stream.Runtime {
	t.Helper()
	var ids []string
	for _, op := range c.Operators {
		if op.Service == service {
			ids = append(ids, op.ID)
		}
	}
	rts, _ := runOperators(t, url, c, ids, t.TempDir(), factories, logger)
	return rts
}

// TestIdlePartitionThenLateData silences one ingress partition of q7 for
// longer than the idle timeout: the watermark does not wait for it. When
// the partition speaks again with its held-back, now old events, those
// within the allowed lateness update their windows as LATE panes, and
// those beyond it go to the side output with their coordinates.
func TestIdlePartitionThenLateData(t *testing.T) {
	if testing.Short() {
		t.Skip("paced in wall-clock time")
	}
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c, err := contracts.Shipped("nexmark-q7")
	if err != nil {
		t.Fatal(err)
	}
	// 100 events per second of event time, published at 500 per second:
	// partition 2 falls silent from event 1000 (10s) to 4500 (45s), seven
	// seconds of wall-clock time, more than the 2s idle timeout.
	first := time.Now().Add(-time.Hour).Truncate(10 * time.Second)
	gen := nexmarkgen.Config{
		Stream: c.Ingress.Stream, SubjectPrefix: c.Ingress.SubjectPrefix, Retention: c.Ingress.Retention.D(),
		Producer: "gen-idle", Rate: 500,
		Gen: nexmark.Config{
			Seed: 3, FirstEventTime: first, EventsPerSecond: 100,
			Partitions: c.Ingress.Partitions, KeyGroups: c.State.KeyGroups,
			OutOfOrder: 200 * time.Millisecond, Events: 6000,
			Hard: nexmark.HardCases{IdlePartition: 2, IdleFrom: 1000, IdleTo: 4500},
		},
	}
	rts := startOperators(t, srv.ClientURL(), c, q7.Service, q7.Factories())
	var published atomic.Uint64
	pubErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := nexmarkgen.EnsureStream(ctx, js, gen); err != nil {
			pubErr <- err
			return
		}
		_, err := nexmarkgen.Publish(ctx, js, gen, time.Now, func(n uint64) { published.Store(n) })
		pubErr <- err
	}()

	// While partition 2 is silent the watermark moves on without it.
	silentSince := first.Add(10 * time.Second)
	streamtest.CheckFor(t, 60*time.Second, func() error {
		wm := rts["q7-max"].Stats().Watermark
		if n := published.Load(); n >= 4400 {
			t.Fatalf("partition 2 speaks again (published %d) and the watermark %v never passed its silence at %v", n, wm, silentSince)
		}
		if !wm.After(silentSince.Add(10 * time.Second)) {
			return fmt.Errorf("watermark %v", wm)
		}
		return nil
	})
	if err := <-pubErr; err != nil {
		t.Fatal(err)
	}
	streamtest.CheckFor(t, 60*time.Second, func() error {
		if s := rts["q7-max"].Stats(); s.SideOutput == 0 {
			return fmt.Errorf("no side output yet (in %d)", s.In)
		}
		return nil
	})
	late := 0
	streamtest.CheckFor(t, 30*time.Second, func() error {
		late = 0
		for _, p := range resultPanes(t, js, c) {
			if p.Info.Timing == window.Late {
				late++
			}
		}
		if late == 0 {
			return fmt.Errorf("no LATE pane")
		}
		return nil
	})
	letters := sideLetters(t, js, c)
	if len(letters) == 0 {
		t.Fatal("no side-output letter in the stream")
	}
	for _, l := range letters {
		if l.At.Stream != "NEXMARK" || l.At.Seq == 0 || l.Reason == "" {
			t.Fatalf("side output without coordinate or reason: %+v", l)
		}
	}
	t.Logf("%d late panes, %d side outputs, e.g. %s: %s", late, len(letters), letters[0].At, letters[0].Reason)
}

// logged records the messages of a logger, for a test to look for one.
type logged struct {
	mu   sync.Mutex
	msgs []loggedMsg
}

type loggedMsg struct {
	at  time.Time
	msg string
}

func (l *logged) Enabled(context.Context, slog.Level) bool { return true }
func (l *logged) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, loggedMsg{r.Time, r.Message})
	return nil
}
func (l *logged) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logged) WithGroup(string) slog.Handler      { return l }

// between lists the times msg was logged in [from, to].
func (l *logged) between(msg string, from, to time.Time) []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Time
	for _, m := range l.msgs {
		if m.msg == msg && !m.at.Before(from) && !m.at.After(to) {
			out = append(out, m.at)
		}
	}
	return out
}

// faultCorpus is the corpus of the broker-fault tests, 800 events of
// q7's input in every partition: before the fault, the first 400; during
// or after it, the rest.
func faultCorpus(c *contracts.Contract, producer string) (before, after nexmarkgen.Config) {
	before = nexmarkgen.Config{
		Stream: c.Ingress.Stream, SubjectPrefix: c.Ingress.SubjectPrefix, Retention: c.Ingress.Retention.D(),
		Producer: producer,
		Gen: nexmark.Config{Seed: 4, FirstEventTime: time.Now().Add(-time.Hour).Truncate(10 * time.Second), EventsPerSecond: 100,
			Partitions: c.Ingress.Partitions, KeyGroups: c.State.KeyGroups, Events: 400, Hard: nexmark.HardCases{IdlePartition: -1}},
	}
	after = before
	after.Start, after.Gen.Events = 400, 800
	return before, after
}

// awaitRead waits until rt has read n records.
func awaitRead(t *testing.T, rt *stream.Runtime, n int64) {
	t.Helper()
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if s := rt.Stats(); s.In < n {
			return fmt.Errorf("%s read %d of %d", rt.Producer(), s.In, n)
		}
		return nil
	})
}

// TestABrokerOutageMakesNoInputIdle stops the broker under q7 for longer
// than its idle timeout, with events still to come in every partition.
// Found by weir chaos (q5, unaligned, seed 20261202): nothing could be
// read while the broker was away, yet the inputs were marked idle for the
// silence; once it was back, the first partition read carried the
// watermark past the others' records, still in the broker, and windows
// fired without them — counted only in the later windows they also fall
// in, with no side output. No input may be marked idle for the broker's
// outage, nor at once after it.
func TestABrokerOutageMakesNoInputIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("stops the broker for seconds")
	}
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c, err := contracts.Shipped("nexmark-q7")
	if err != nil {
		t.Fatal(err)
	}
	idle := c.Progress.IdleTimeout.D()
	log := &logged{}
	first := startOperatorsLogging(t, srv.ClientURL(), c, q7.Service, q7.Factories(), slog.New(log))[c.Operators[0].ID]
	before, after := faultCorpus(c, "gen-outage")
	publish(t, js, before)
	awaitRead(t, first, 400)

	// The outage: longer than the idle timeout.
	stopped := time.Now()
	if err := srv.RestartAfter(idle + 2*time.Second); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	// Events in every partition again, within the idle timeout of the
	// broker's return.
	js = srv.JetStream(t)
	publish(t, js, after)
	awaitRead(t, first, 800)
	if at := log.between("inputs idle", stopped, back.Add(idle/2)); len(at) > 0 {
		t.Fatalf("inputs marked idle %v after the broker stopped at %v and %v before it was back at %v + half the idle timeout",
			at[0].Sub(stopped), stopped.Format(time.RFC3339Nano), back.Add(idle/2).Sub(at[0]), back.Format(time.RFC3339Nano))
	}
}

// runOperators runs the operators ids of c, instance 0, with their state
// under dir, until stop is called or the test ends; it returns their
// runtimes by ID.
func runOperators(t *testing.T, url string, c *contracts.Contract, ids []string, dir string, factories map[string]stream.Factory, logger *slog.Logger) (map[string]*stream.Runtime, func()) {
	t.Helper()
	rts := map[string]*stream.Runtime{}
	list, err := stream.Runtimes(stream.Config{NATSURL: url, Contract: c, DataDir: dir,
		Instance: "0", TickInterval: 20 * time.Millisecond, Logger: logger}, "", factories, ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		rts[id] = list[i]
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- stream.RunGroup(ctx, list...) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%v: %v", ids, err)
			}
		})
	}
	t.Cleanup(stop)
	return rts, stop
}

// TestAWriterStoppedPastTheIdleTimeoutIsNotIdle stops the writers of
// q5's counts edge — q5-key and q5-count — for longer than the idle
// timeout, with half the corpus still to come, while q5-max, their
// reader, runs on. Found by weir chaos (q5 aligned, seed 1): the service
// killed and its restart held up by the broker's, q5-max marked its
// inputs idle for their silence; when q5-count wrote again, the first
// partition q5-max read carried the watermark past the counts the others
// still held, and 9 to 12 windows never came out. An edge partition is
// idle when its writer says so, never for its silence, and every window
// comes out equal to the reference.
func TestAWriterStoppedPastTheIdleTimeoutIsNotIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("stops operators for seconds")
	}
	t.Parallel()
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c, err := contracts.Shipped("nexmark-q5")
	if err != nil {
		t.Fatal(err)
	}
	idle := c.Progress.IdleTimeout.D()
	gen := corpusConfig(c)
	half := gen
	half.Gen.Events = gen.Gen.Events / 2
	publish(t, js, half)

	log := &logged{}
	dir := t.TempDir()
	writers := []string{"q5-key", "q5-count"}
	rts, _ := runOperators(t, srv.ClientURL(), c, []string{"q5-max"}, dir, q5.Factories(), slog.New(log))
	_, stop := runOperators(t, srv.ClientURL(), c, writers, dir, q5.Factories(), slog.New(log))
	reader := rts["q5-max"]
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if s := reader.Stats(); s.Out == 0 {
			return fmt.Errorf("q5-max has emitted nothing (in %d, watermark %v)", s.In, s.Watermark)
		}
		return nil
	})
	stop()
	stopped := time.Now()
	rest := gen
	rest.Start = half.Gen.Events
	publish(t, js, rest)
	script := corpusScript(t, js, c, gen, q5Input)
	time.Sleep(idle + idle/2)
	restarted := time.Now()
	runOperators(t, srv.ClientURL(), c, writers, dir, q5.Factories(), slog.New(log))
	if at := log.between("inputs idle", stopped, restarted); len(at) > 0 {
		t.Errorf("q5-max marked its inputs idle %v after their writers stopped", at[0].Sub(stopped))
	}
	checkQ5(t, js, c, reference(t, c, script).hot)
}

// TestABrokerThatStallsMakesNoInputIdle stalls the broker under q7 —
// its clients' connections stay open and nothing answers, as when the
// broker process is paused — for longer than the idle timeout, while
// events it holds wait for every partition. Found by weir chaos (q11
// aligned, seed 1, the broker paused for 9.1s): the connection was never
// lost, so q11-key took the silence for idleness and marked its four
// inputs idle; once the broker answered, the first partition read carried
// the watermark past the others' records and q11's sessions closed
// early: 120 extra results, 15 different, 4 missing. An ingress input is
// idle only once the broker, asked after its silence passed the timeout,
// says it holds nothing more for it.
func TestABrokerThatStallsMakesNoInputIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("stalls the broker for seconds")
	}
	srv := natstest.Run(t)
	front := srv.Front(t)
	js := srv.JetStream(t)
	c, err := contracts.Shipped("nexmark-q7")
	if err != nil {
		t.Fatal(err)
	}
	idle := c.Progress.IdleTimeout.D()
	log := &logged{}
	first := startOperatorsLogging(t, front.URL(), c, q7.Service, q7.Factories(), slog.New(log))[c.Operators[0].ID]
	before, after := faultCorpus(c, "gen-stall")
	publish(t, js, before)
	awaitRead(t, first, 400)

	// The stall, longer than the idle timeout; the broker takes events
	// for every partition meanwhile, from a client not behind the front.
	front.Stall()
	stalled := time.Now()
	publish(t, js, after)
	time.Sleep(time.Until(stalled.Add(idle + 2*time.Second)))
	front.Resume()
	resumed := time.Now()
	awaitRead(t, first, 800)
	if at := log.between("inputs idle", stalled, resumed.Add(idle/2)); len(at) > 0 {
		t.Fatalf("inputs marked idle %v into the broker's stall of %v", at[0].Sub(stalled), resumed.Sub(stalled))
	}
}
