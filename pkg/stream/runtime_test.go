package stream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/pkg/window"
)

// harness is an embedded JetStream with the NEXMARK ingress stream of the
// shipped dedup contract.
type harness struct {
	t   *testing.T
	srv *natstest.Server
	js  jetstream.JetStream
	c   *contracts.Contract
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	srv := natstest.Run(t)
	js, err := jetstream.New(srv.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := contracts.Shipped("nexmark-dedup")
	if err != nil {
		t.Fatal(err)
	}
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: c.Ingress.Stream, Subjects: []string{c.Ingress.SubjectPrefix + ".*"}, MaxAge: c.Ingress.Retention.D(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, srv: srv, js: js, c: c}
}

// publish sends one event per key to partition i mod 4.
func (h *harness) publish(keys ...string) {
	h.t.Helper()
	ts := time.Now().Add(-time.Minute).UnixMilli()
	for i, k := range keys {
		data := fmt.Sprintf(`{"id":"id-%s","key":%q,"ts":%d}`, k, k, ts)
		if _, err := h.js.Publish(context.Background(), h.c.Ingress.Subject(i%h.c.Ingress.Partitions), []byte(data)); err != nil {
			h.t.Fatal(err)
		}
	}
}

// publishAt sends one event to partition p, its ID and key id, at event
// time at.
func (h *harness) publishAt(p int, id string, at time.Time) {
	h.t.Helper()
	data := fmt.Sprintf(`{"id":%q,"key":%q,"ts":%d}`, id, id, at.UnixMilli())
	if _, err := h.js.Publish(context.Background(), h.c.Ingress.Subject(p), []byte(data)); err != nil {
		h.t.Fatal(err)
	}
}

// run runs op as operator id until the test ends or stop is called.
func (h *harness) run(c *contracts.Contract, id string, op operator.Operator, dir string) (*stream.Runtime, func()) {
	h.t.Helper()
	rt, err := stream.New(stream.Config{
		NATSURL: h.srv.ClientURL(), Contract: c, DataDir: dir, Operator: id, Instance: "0",
		TickInterval: 10 * time.Millisecond,
	}, op)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				h.t.Errorf("%s: %v", id, err)
			}
		})
	}
	h.t.Cleanup(stop)
	return rt, stop
}

// records reads every data record of an edge.
func (h *harness) records(edgeName string) []record.Record {
	h.t.Helper()
	ctx := context.Background()
	st, err := h.js.Stream(ctx, edge.StreamName(h.c.Pipeline, edgeName))
	if err != nil {
		return nil
	}
	info, _ := st.Info(ctx)
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []record.Record
	for seq := uint64(0); seq < info.State.LastSeq; {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			h.t.Fatal(err)
		}
		meta, _ := m.Metadata()
		seq = meta.Sequence.Stream
		recs, err := edge.DecodeFrame(m.Data())
		if err != nil {
			h.t.Fatal(err)
		}
		for _, r := range recs {
			if r.Kind == record.Data {
				out = append(out, r)
			}
		}
	}
	return out
}

func (h *harness) letters() []deadletter.Letter {
	h.t.Helper()
	ctx := context.Background()
	st, err := h.js.Stream(ctx, deadletter.StreamName(h.c.Pipeline))
	if err != nil {
		return nil
	}
	info, _ := st.Info(ctx)
	cons, _ := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	var out []deadletter.Letter
	for i := uint64(0); i < info.State.Msgs; i++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			h.t.Fatal(err)
		}
		l, err := deadletter.Parse(m)
		if err != nil {
			h.t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

type seenOp struct{ families []string }

func (o seenOp) Families() []string { return o.families }
func (o seenOp) Process(c operator.Env, r record.Record) error {
	return c.Emit(r)
}

func TestNewRefusesBadContractsAndConfig(t *testing.T) {
	base := stream.Config{NATSURL: "nats://127.0.0.1:1", DataDir: t.TempDir(), Operator: "dedup", Instance: "0"}

	bad := base
	bad.ContractPath = "../../contracts/testdata/bad-dedup-ttl.yaml"
	_, err := stream.New(bad, seenOp{})
	if !errors.Is(err, contracts.ErrInvalid) || !strings.Contains(err.Error(), "refusing to start") {
		t.Fatalf("bad contract: err = %v, want a refusal wrapping contracts.ErrInvalid", err)
	}

	undeclared := base
	undeclared.ContractPath = "../../contracts/nexmark-dedup.yaml"
	if _, err := stream.New(undeclared, seenOp{families: []string{"nope"}}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("undeclared family: err = %v, want a refusal naming it", err)
	}

	unknownOp := undeclared
	unknownOp.Operator = "nobody"
	if _, err := stream.New(unknownOp, seenOp{}); err == nil {
		t.Fatal("unknown operator ID accepted")
	}

	if _, err := stream.New(stream.Config{}, seenOp{}); err == nil ||
		!strings.Contains(err.Error(), "NATS_URL") || !strings.Contains(err.Error(), "WEIR_DATA_DIR") {
		t.Fatalf("empty config: err = %v, want every missing setting named", err)
	}
}

func TestParseConfigFlagsOverrideEnvironment(t *testing.T) {
	env := map[string]string{"NATS_URL": "nats://env:4222", "WEIR_CONTRACT": "c.yaml", "WEIR_DATA_DIR": "/d", "WEIR_INSTANCE": "i-1"}
	c, err := stream.ParseConfig("x", "dedup", []string{"-nats", "nats://flag:4222"}, func(k string) string { return env[k] }, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if c.NATSURL != "nats://flag:4222" || c.ContractPath != "c.yaml" || c.DataDir != "/d" || c.Instance != "i-1" || c.Operator != "dedup" {
		t.Fatalf("config = %+v", c)
	}
	if _, err := stream.ParseConfig("x", "dedup", []string{"-instance", "a.b"}, func(string) string { return "" }, &strings.Builder{}); err == nil {
		t.Fatal("instance with a dot accepted")
	}
}

// classifyOp exercises the error classes: poison records, a transient
// failure retried in place, and a state bound crossed.
type classifyOp struct {
	flaky atomic.Int32
}

func (o *classifyOp) Families() []string { return []string{"seen"} }

func (o *classifyOp) Process(c operator.Env, r record.Record) error {
	switch string(r.Key) {
	case "poison":
		return operator.Poison("payload.kind", errors.New("unknown kind"))
	case "flaky":
		if o.flaky.Add(1) == 1 {
			return operator.Retry(errors.New("provider busy"), 10*time.Millisecond)
		}
	}
	if err := c.Value("seen").Set([]byte("x")); err != nil {
		return err
	}
	return c.Emit(r)
}

func TestPoisonRetryAndStateBound(t *testing.T) {
	h := newHarness(t)
	c, _ := contracts.Shipped("nexmark-dedup")
	c.State.Families[0].MaxKeys = 20
	c.State.Families[0].OnLimit = "dead-letter"
	var keys []string
	for i := 0; i < 30; i++ {
		keys = append(keys, "k"+strconv.Itoa(i))
	}
	keys = append(keys, "poison", "flaky")
	h.publish(keys...)

	op := &classifyOp{}
	rt, _ := h.run(c, "dedup", op, t.TempDir())
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if s := rt.Stats(); s.Out+s.DeadLettered != 32 {
			return fmt.Errorf("out %d + dead %d, want 32", s.Out, s.DeadLettered)
		}
		return nil
	})
	s := rt.Stats()
	if s.Out != 20 || s.DeadLettered != 12 || s.Retries < 1 {
		t.Fatalf("stats %+v: want 20 out (the bound), 12 dead letters (1 poison + 11 over the bound), a retry", s)
	}
	if got := len(h.records("deduped")); got != 20 {
		t.Fatalf("edge holds %d records, want 20", got)
	}
	fields := map[string]int{}
	for _, l := range h.letters() {
		fields[l.Field]++
		if l.At.Stream != "NEXMARK" || l.At.Seq == 0 || len(l.Payload) == 0 {
			t.Errorf("letter %+v lacks its coordinate or payload", l)
		}
		if l.Contract != c.Fingerprint() {
			t.Errorf("letter %+v does not name the contract it was judged by (%s)", l, c.Fingerprint())
		}
	}
	if fields["payload.kind"] != 1 || fields["state.seen"] != 11 {
		t.Fatalf("letters by field %v, want payload.kind:1 state.seen:11", fields)
	}
	if op.flaky.Load() != 2 {
		t.Fatalf("flaky record processed %d times, want 2 (one retry)", op.flaky.Load())
	}
}

// timerOp sets a processing-time timer per record and emits when it fires.
type timerOp struct{}

func (timerOp) Process(c operator.Env, r record.Record) error {
	return c.SetTimer(state.ProcessingTime, c.Now().Add(5*time.Millisecond), "ping")
}

func (timerOp) OnTimer(c operator.Env, t state.Timer) error {
	return c.Emit(record.Record{ID: "timer-" + string(t.Key), Key: t.Key, Time: t.Time, Value: []byte(`{}`)})
}

func TestProcessingTimersFireOnce(t *testing.T) {
	h := newHarness(t)
	h.publish("a", "b", "c")
	rt, _ := h.run(h.c, "dedup", timerOp{}, t.TempDir())
	got := map[string]int{}
	streamtest.CheckFor(t, 30*time.Second, func() error {
		got = map[string]int{}
		for _, r := range h.records("deduped") {
			got[r.ID]++
		}
		if len(got) < 3 {
			return fmt.Errorf("output %v", got)
		}
		return nil
	})
	if n := rt.Stats().TimersFired; n != 3 {
		t.Fatalf("%d timers fired, want 3", n)
	}
	for _, id := range []string{"timer-id-a", "timer-id-b", "timer-id-c"} {
		if got[id] != 1 {
			t.Fatalf("output %v: want %s once", got, id)
		}
	}
}

// etOp sets an event-time timer at each record's time and emits when it
// fires.
type etOp struct{}

func (etOp) Process(c operator.Env, r record.Record) error {
	if !c.Watermark().IsZero() && !r.Time.After(c.Watermark()) {
		return c.SideOutput(r, "late: at or before the watermark "+c.Watermark().String())
	}
	return c.SetTimer(state.EventTime, r.Time, "fire")
}

func (etOp) OnTimer(c operator.Env, t state.Timer) error {
	if t.Time.After(c.Watermark()) {
		return fmt.Errorf("timer at %v fired before the watermark %v passed it", t.Time, c.Watermark())
	}
	return c.Emit(record.Record{ID: "fired-" + string(t.Key), Key: t.Key, Time: t.Time, Value: []byte(`{}`)})
}

// cancelOp sets two timers per record at its time, "a" and "b"; a's
// callback cancels b.
// fireAll runs op as operator dedup over records k0…k(n-1) at base, then
// carries the watermark an hour past them and waits until fired timers
// fired, and half a second more for a stray one; it returns the runtime,
// stopped.
func (h *harness) fireAll(op operator.Operator, base time.Time, n int, fired int64) *stream.Runtime {
	h.t.Helper()
	c, _ := contracts.Shipped("nexmark-dedup")
	c.Progress.OutOfOrderness = contracts.Duration{Duration: time.Second}
	for i := range n {
		h.publishAt(i%4, fmt.Sprintf("k%d", i), base)
	}
	rt, stop := h.run(c, "dedup", op, h.t.TempDir())
	defer stop()
	streamtest.CheckFor(h.t, 2*time.Minute, func() error {
		if s := rt.Stats(); s.In < int64(n) {
			return fmt.Errorf("%d records in, want %d", s.In, n)
		}
		return nil
	})
	for p := range 4 {
		h.publishAt(p, fmt.Sprintf("later%d", p), base.Add(time.Hour))
	}
	streamtest.CheckFor(h.t, 2*time.Minute, func() error {
		if f := rt.Stats().TimersFired; f < fired {
			return fmt.Errorf("%d timers fired, want %d", f, fired)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond)
	stop()
	return rt
}

type cancelOp struct{}

func (cancelOp) Process(c operator.Env, r record.Record) error {
	if err := c.SetTimer(state.EventTime, r.Time, "a"); err != nil {
		return err
	}
	return c.SetTimer(state.EventTime, r.Time, "b")
}

func (cancelOp) OnTimer(c operator.Env, t state.Timer) error {
	if t.Name == "a" {
		if err := c.DeleteTimer(state.EventTime, t.Time, "b"); err != nil {
			return err
		}
	}
	return c.Emit(record.Record{ID: t.Name + "-" + string(t.Key), Key: t.Key, Time: t.Time, Value: []byte(`{}`)})
}

// TestACancelledTimerDoesNotFire: a timer that the callback of an earlier
// one in the same firing cancels does not fire, though both were due
// together. A step fetches the due timers in one list (up to its budget),
// so the cancellation happens after the list was read.
func TestACancelledTimerDoesNotFire(t *testing.T) {
	h := newHarness(t)
	const n = 100
	rt := h.fireAll(cancelOp{}, time.Now().Add(-time.Hour).Truncate(time.Second), n, n)
	var a, b int
	for _, r := range h.records("deduped") {
		switch {
		case strings.HasPrefix(r.ID, "a-"):
			a++
		case strings.HasPrefix(r.ID, "b-"):
			b++
		}
	}
	if a != n || b != 0 || rt.Stats().TimersFired != n {
		t.Fatalf("%d a and %d b results, %d timers fired; want %d a, no b, %d fired", a, b, rt.Stats().TimersFired, n, n)
	}
}

// chainOp sets one timer "a" per key, two seconds apart by key; each a's
// callback sets a "c" one second after it: earlier than the next a.
type chainOp struct{ base time.Time }

func (o chainOp) Process(c operator.Env, r record.Record) error {
	if !strings.HasPrefix(string(r.Key), "k") {
		return nil // what carries the watermark
	}
	i, err := strconv.Atoi(strings.TrimPrefix(string(r.Key), "k"))
	if err != nil {
		return err
	}
	return c.SetTimer(state.EventTime, o.base.Add(time.Duration(2*i)*time.Second), "a")
}

func (chainOp) OnTimer(c operator.Env, t state.Timer) error {
	if t.Name == "a" {
		if err := c.SetTimer(state.EventTime, t.Time.Add(time.Second), "c"); err != nil {
			return err
		}
	}
	// One key for all: one output partition, in the order emitted.
	return c.Emit(record.Record{ID: t.Name + "-" + string(t.Key), Key: []byte("all"), Time: t.Time, Value: []byte(`{}`)})
}

// TestATimerSetWhileFiringFiresInTimeOrder: the watermark passes every
// timer at once; a callback sets a timer earlier than the others still
// due, and it fires before them — though the step had fetched them as one
// list before the callback ran.
func TestATimerSetWhileFiringFiresInTimeOrder(t *testing.T) {
	h := newHarness(t)
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	const n = 50
	h.fireAll(chainOp{base: base}, base, n, 2*n)
	var got []string
	for _, r := range h.records("deduped") {
		if strings.HasPrefix(r.ID, "a-") || strings.HasPrefix(r.ID, "c-") {
			got = append(got, r.ID)
		}
	}
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("a-k%d", i), fmt.Sprintf("c-k%d", i))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("fired in the order\n%v\nwant\n%v", got, want)
	}
}

// TestWatermarksIdlenessAndEventTimers: a silent partition holds the
// watermark until the idle timeout, then the others carry it; event-time
// timers fire only once the watermark passes them, before the watermark is
// forwarded, and forwarded watermarks never go backwards.
func TestWatermarksIdlenessAndEventTimers(t *testing.T) {
	h := newHarness(t)
	c, _ := contracts.Shipped("nexmark-dedup")
	c.Progress.IdleTimeout = contracts.Duration{Duration: 300 * time.Millisecond}
	c.Progress.OutOfOrderness = contracts.Duration{Duration: time.Second}
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	pub := h.publishAt
	// Partition 3 speaks once, early, then falls silent.
	pub(3, "p3-0", base)
	for i := 1; i <= 20; i++ {
		for p := 0; p < 3; p++ {
			pub(p, fmt.Sprintf("p%d-%d", p, i), base.Add(time.Duration(i)*time.Second))
		}
	}
	rt, stop := h.run(c, "dedup", etOp{}, t.TempDir())
	// Partitions 0..2 keep talking (an operator whose inputs are all idle is
	// idle itself and holds its watermark), one event time step per 50ms.
	feed := make(chan struct{})
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 21; ; i++ {
			select {
			case <-feed:
				return
			case <-tick.C:
			}
			for p := 0; p < 3; p++ {
				pub(p, fmt.Sprintf("p%d-%d", p, i), base.Add(time.Duration(i)*time.Second))
			}
		}
	}()
	// Until partition 3 is idle, it holds the watermark below its only
	// event; then the others carry it and every timer up to 19s fires.
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if n := rt.Stats().TimersFired; n < 1+3*18 {
			return fmt.Errorf("%d timers fired, want at least %d", n, 1+3*18)
		}
		return nil
	})
	close(feed)
	<-fed
	stop()
	ctx := context.Background()
	st, _ := h.js.Stream(ctx, edge.StreamName(c.Pipeline, "deduped"))
	cons, _ := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	info, _ := st.Info(ctx)
	lastWM := map[string]time.Time{}
	pendingFired := map[string][]time.Time{}
	var idles, wms int
	for i := uint64(0); i < info.State.Msgs; i++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		recs, _ := edge.DecodeFrame(m.Data())
		for _, r := range recs {
			switch r.Kind {
			case record.Watermark:
				wms++
				if !r.Time.After(lastWM[m.Subject()]) {
					t.Fatalf("%s: watermark %v after %v: not increasing", m.Subject(), r.Time, lastWM[m.Subject()])
				}
				for _, ft := range pendingFired[m.Subject()] {
					if ft.After(r.Time) {
						t.Fatalf("a timer at %v was emitted before watermark %v: it fired early", ft, r.Time)
					}
				}
				pendingFired[m.Subject()] = nil
				lastWM[m.Subject()] = r.Time
			case record.Idle:
				idles++
			case record.Data:
				pendingFired[m.Subject()] = append(pendingFired[m.Subject()], r.Time)
			}
		}
	}
	want := base.Add(19*time.Second - time.Millisecond)
	for p := 0; p < 4; p++ {
		subj := fmt.Sprintf("weir.nexmark.deduped.%d", p)
		if lastWM[subj].Before(want) {
			t.Errorf("%s: last watermark %v, want at least %v", subj, lastWM[subj], want)
		}
	}
	if wms == 0 {
		t.Fatal("no watermark was forwarded")
	}
	t.Logf("%d watermark records, %d idle markers, %d msgs", wms, idles, info.State.Msgs)
}

// acceptOp sets an event-time timer at each record's time, late or not —
// as an operator accepting late records into a window does — and emits
// when it fires.
type acceptOp struct{}

func (acceptOp) Process(c operator.Env, r record.Record) error {
	return c.SetTimer(state.EventTime, r.Time, "fire")
}

func (acceptOp) OnTimer(c operator.Env, t state.Timer) error {
	return c.Emit(record.Record{ID: "fired-" + string(t.Key), Key: t.Key, Time: t.Time, Value: []byte(`{}`)})
}

// TestATimerBehindTheWatermarkFires: a late record whose operator sets a
// timer at its time, behind the watermark already forwarded, with no
// record after it. Found by weir chaos (q5 aligned, seed 1): q5-max took
// a window's counts after its watermark had passed the window and set the
// timer that emits it; the watermark never rose again — every input was
// done — and the window's result never came out. The timer fires in the
// step that set it.
func TestATimerBehindTheWatermarkFires(t *testing.T) {
	h := newHarness(t)
	c, _ := contracts.Shipped("nexmark-dedup")
	c.Progress.OutOfOrderness = contracts.Duration{Duration: time.Second}
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	pub := h.publishAt
	for i := 0; i <= 20; i++ {
		for p := 0; p < c.Ingress.Partitions; p++ {
			pub(p, fmt.Sprintf("p%d-%d", p, i), base.Add(time.Duration(i)*time.Second))
		}
	}
	rt, _ := h.run(c, "dedup", acceptOp{}, t.TempDir())
	// Every partition at 20s: the watermark is 19s less a millisecond,
	// and the timers up to it have fired.
	wm := base.Add(19*time.Second - time.Millisecond)
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if s := rt.Stats(); s.Watermark.Before(wm) || s.TimersFired < 4*19 {
			return fmt.Errorf("watermark %v, %d timers fired; want %v and %d", s.Watermark, s.TimersFired, wm, 4*19)
		}
		return nil
	})
	// The late record: its timer, at 5s, is fourteen seconds behind the
	// watermark, and nothing comes after it.
	pub(0, "late", base.Add(5*time.Second))
	streamtest.CheckFor(t, 30*time.Second, func() error {
		for _, r := range h.records("deduped") {
			if r.ID == "fired-late" {
				return nil
			}
		}
		return fmt.Errorf("the late record's timer has not fired (watermark %v)", rt.Stats().Watermark)
	})
}

// TestAlignmentPausesAPartitionFarAhead: a partition whose watermark runs
// more than the alignment drift ahead of the others is paused — its
// records wait in the stream, not in memory — and resumes once the others
// catch up.
func TestAlignmentPausesAPartitionFarAhead(t *testing.T) {
	h := newHarness(t)
	c, _ := contracts.Shipped("nexmark-dedup")
	c.Progress.AlignmentDrift = contracts.Duration{Duration: time.Minute}
	c.Overload.FetchBatch = 16
	c.Overload.MaxAckPending = 32
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
	pub := func(p, i int, at time.Time) {
		data := fmt.Sprintf(`{"id":"p%d-%d","key":"k","ts":%d}`, p, i, at.UnixMilli())
		if _, err := h.js.Publish(context.Background(), c.Ingress.Subject(p), []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	// Partition 0 is an hour ahead; the others start at base.
	const ahead = 400
	for i := 0; i < ahead; i++ {
		pub(0, i, base.Add(time.Hour+time.Duration(i)*time.Second))
	}
	for p := 1; p < 4; p++ {
		pub(p, 0, base)
	}
	rt, _ := h.run(c, "dedup", seenOp{}, t.TempDir())
	streamtest.CheckFor(t, 30*time.Second, func() error {
		s := rt.Stats()
		if len(s.Paused) != 1 || s.Paused[0] != "ingress/0" || s.In < 3 {
			return fmt.Errorf("paused %v after %d records, want ingress/0 paused", s.Paused, s.In)
		}
		return nil
	})
	// While paused, partition 0's records stay in the stream: the instance
	// holds at most a fetch batch, its reader slot and one step of them.
	held := rt.Stats().In
	if held >= ahead {
		t.Fatalf("read all %d records of the paused partition", held)
	}
	if held > 3+3*int64(c.Overload.FetchBatch)+2 {
		t.Fatalf("read %d records while partition 0 was paused: more than the bounds allow", held)
	}
	// The others catch up to within the drift: partition 0 resumes and
	// everything is read.
	for p := 1; p < 4; p++ {
		pub(p, 1, base.Add(time.Hour+ahead*time.Second))
	}
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if s := rt.Stats(); s.In != ahead+6 || len(s.Paused) != 0 {
			return fmt.Errorf("read %d of %d, paused %v", s.In, ahead+6, s.Paused)
		}
		return nil
	})
}

// TestMissingIngressSaysWhatToDo: a source operator started before its
// ingress stream exists says which stream and subjects it needs and how to
// get them; asked to, it creates the stream from the contract and runs.
func TestMissingIngressSaysWhatToDo(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c, err := contracts.Shipped("nexmark-dedup")
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.Config{NATSURL: srv.ClientURL(), Contract: c, DataDir: t.TempDir(), Operator: "dedup", Instance: "0"}
	rt, err := stream.New(cfg, operator.Func(func(env operator.Env, r record.Record) error { return env.Emit(r) }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = rt.Run(ctx)
	for _, want := range []string{"ingress stream NEXMARK does not exist", "nexmark.events.0 … nexmark.events.3",
		"nats stream add NEXMARK --subjects 'nexmark.events.*'", "-create-ingress"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v\nwant it to say %q", err, want)
		}
	}

	cfg.CreateIngress = true
	rt, err = stream.New(cfg, operator.Func(func(env operator.Env, r record.Record) error { return env.Emit(r) }))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	rctx, stop := context.WithCancel(ctx)
	go func() { done <- rt.Run(rctx) }()
	for !rt.Ready() {
		select {
		case err := <-done:
			t.Fatalf("with -create-ingress: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, c.Ingress.Stream)
	if err != nil {
		t.Fatalf("the ingress stream was not created: %v", err)
	}
	if cfg := st.CachedInfo().Config; cfg.MaxAge != c.Ingress.Retention.D() || cfg.Subjects[0] != "nexmark.events.*" || cfg.Storage != jetstream.FileStorage {
		t.Fatalf("created %+v, not what the contract describes", cfg)
	}
}

// TestNoDeadLetterStreamStops: an operator declared without a dead-letter
// stream (operators[].dead_letter: false) stops at a poison record, naming
// it, files nothing, and does not move its position past the record.
func TestNoDeadLetterStreamStops(t *testing.T) {
	h := newHarness(t)
	c, _ := contracts.Shipped("nexmark-dedup")
	for i := range c.Operators {
		if c.Operators[i].ID == "publish" {
			c.Operators[i].DeadLetter = false
		}
	}
	h.publish("a", "poison", "b")
	up, _ := h.run(c, "dedup", seenOp{families: []string{"seen"}}, t.TempDir())
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if s := up.Stats(); s.Out != 3 {
			return fmt.Errorf("dedup out %d, want 3", s.Out)
		}
		return nil
	})
	dir := t.TempDir()
	// Twice over the same state: the position did not pass the record, so
	// a restart meets it again.
	for run := 1; run <= 2; run++ {
		rt, err := stream.New(stream.Config{
			NATSURL: h.srv.ClientURL(), Contract: c, DataDir: dir, Operator: "publish", Instance: "0",
			TickInterval: 10 * time.Millisecond,
		}, poisonOp{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = rt.Run(ctx)
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil || timedOut || !strings.Contains(err.Error(), "dead_letter: false") ||
			!strings.Contains(err.Error(), `"id-poison"`) || !strings.Contains(err.Error(), "payload.kind") {
			t.Fatalf("run %d: %v, want it to stop naming the poison record, its field and dead_letter: false", run, err)
		}
		if s := rt.Stats(); s.DeadLettered != 0 {
			t.Fatalf("run %d: stats %+v: want nothing filed", run, s)
		}
	}
	if l := h.letters(); len(l) != 0 {
		t.Fatalf("%d dead letters filed, want none", len(l))
	}
}

// poisonOp passes records on and calls the one keyed "poison" poison.
type poisonOp struct{}

func (poisonOp) Process(c operator.Env, r record.Record) error {
	if string(r.Key) == "poison" {
		return operator.Poison("payload.kind", errors.New("unknown kind"))
	}
	return c.Emit(r)
}

// TestRefusesFramesOverTheServersMaxPayload: frames the contract allows
// but the connected server would refuse stop the service at start.
func TestRefusesFramesOverTheServersMaxPayload(t *testing.T) {
	h := newHarness(t)
	c, _ := contracts.Shipped("nexmark-dedup")
	c.Overload.FrameMaxBytes = 9 << 20 // the embedded server takes 8 MiB
	rt, err := stream.New(stream.Config{NATSURL: h.srv.ClientURL(), Contract: c, DataDir: t.TempDir(), Operator: "dedup", Instance: "0"}, seenOp{families: []string{"seen"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rt.Run(ctx); err == nil || !strings.Contains(err.Error(), "refusing to start") || !strings.Contains(err.Error(), "max_payload 8388608") {
		t.Fatalf("Run: %v, want a refusal naming the server's max_payload", err)
	}
}

// TestRefusesWindowStateExpiringBeforeItsWindow: a window family's TTL
// that lints clean (over out_of_orderness plus allowed lateness) but is
// shorter than the operator's window plus lateness is refused at start.
func TestRefusesWindowStateExpiringBeforeItsWindow(t *testing.T) {
	c, err := contracts.Shipped("nexmark-q7")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := window.FromContract(window.Spec{Kind: window.Tumbling, Size: time.Minute}, c.Emission)
	if err != nil {
		t.Fatal(err)
	}
	op, err := window.New(spec, window.Count(), c.State.Families[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.Config{NATSURL: "nats://127.0.0.1:1", Contract: c, DataDir: t.TempDir(), Operator: "q7-max", Instance: "0"}
	c.State.Families[0].TTL = contracts.Duration{Duration: 30 * time.Second} // > 2s + 5s: lint is content
	if ps := c.Lint(); len(ps) > 0 {
		t.Fatalf("the edited contract should lint clean: %v", ps)
	}
	if _, err := stream.New(cfg, op); err == nil || !strings.Contains(err.Error(), "refusing to start") || !strings.Contains(err.Error(), "1m7s") {
		t.Fatalf("New: %v, want a refusal naming the 1m7s the windows need", err)
	}
	c.State.Families[0].TTL = contracts.Duration{Duration: 2 * time.Minute}
	if _, err := stream.NewChained(cfg, op, map[string]operator.Operator{"q7-key": operator.Func(func(operator.Env, record.Record) error { return nil })}); err != nil {
		t.Fatalf("New with a TTL over the window's needs: %v", err)
	}
}

// TestATimerBurstFiresInBoundedSteps: a watermark that passes a thousand
// timers at once fires them over several steps, each holding at most
// maxStepTimers results, and forwards the watermark only behind the last.
// (It takes a second alone; CI, running the compose stack beside it, once
// read 901 of the thousand in 30 s: the waits allow two minutes.)
func TestATimerBurstFiresInBoundedSteps(t *testing.T) {
	h := newHarness(t)
	c, _ := contracts.Shipped("nexmark-dedup")
	c.Overload.FetchBatch = 16 // a step fires at most 8×16 timers
	c.Progress.OutOfOrderness = contracts.Duration{Duration: time.Second}
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	const n = 1000
	for i := range n {
		data := fmt.Sprintf(`{"id":"k%d","key":"k%d","ts":%d}`, i, i, base.UnixMilli())
		if _, err := h.js.Publish(context.Background(), c.Ingress.Subject(i%4), []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	rt, stop := h.run(c, "dedup", etOp{}, t.TempDir())
	streamtest.CheckFor(t, 2*time.Minute, func() error {
		if s := rt.Stats(); s.In < n {
			return fmt.Errorf("%d records in, want %d", s.In, n)
		}
		return nil
	})
	if f := rt.Stats().TimersFired; f != 0 {
		t.Fatalf("%d timers fired before the watermark passed them", f)
	}
	// One event an hour later on every partition moves the watermark past
	// all thousand timers at once.
	for p := range 4 {
		data := fmt.Sprintf(`{"id":"late%d","key":"late%d","ts":%d}`, p, p, base.Add(time.Hour).UnixMilli())
		if _, err := h.js.Publish(context.Background(), c.Ingress.Subject(p), []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	streamtest.CheckFor(t, 2*time.Minute, func() error {
		if f := rt.Stats().TimersFired; f < n {
			return fmt.Errorf("%d timers fired, want %d", f, n)
		}
		return nil
	})
	stop()
	s := rt.Stats()
	recs := h.records("deduped")
	seen := map[string]int{}
	var bytes int
	for _, r := range recs {
		seen[r.ID]++
		bytes += len(r.Value) + len(r.ID) + len(r.Key)
	}
	if len(seen) != n || len(recs) != n {
		t.Fatalf("%d results, %d distinct, want %d once each", len(recs), len(seen), n)
	}
	// Unbounded, one step would have staged all thousand results.
	if s.StepOutputMax == 0 || s.StepOutputMax > int64(bytes)/2 {
		t.Fatalf("the largest step staged %d bytes of output, for %d bytes of results in all: the burst was not split", s.StepOutputMax, bytes)
	}
	// Every result precedes the first watermark past its time.
	ctx := context.Background()
	st, _ := h.js.Stream(ctx, edge.StreamName(c.Pipeline, "deduped"))
	cons, _ := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	info, _ := st.Info(ctx)
	forwarded := map[string]time.Time{}
	for i := uint64(0); i < info.State.Msgs; i++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		rs, _ := edge.DecodeFrame(m.Data())
		for _, r := range rs {
			switch r.Kind {
			case record.Watermark:
				forwarded[m.Subject()] = r.Time
			case record.Data:
				if wm := forwarded[m.Subject()]; !r.Time.After(wm) {
					t.Fatalf("result %s at %v follows watermark %v on %s", r.ID, r.Time, wm, m.Subject())
				}
			}
		}
	}
	t.Logf("%d results, largest step output %d of %d bytes", len(recs), s.StepOutputMax, bytes)
}

// TestRefusesIngressLimitsShorterThanItsRetention: an ingress stream
// whose message limit keeps, at the arrival rate the contract declares,
// less than the retention the contract relies on is refused at start.
func TestRefusesIngressLimitsShorterThanItsRetention(t *testing.T) {
	srv := natstest.Run(t)
	js, err := jetstream.New(srv.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := contracts.Shipped("nexmark-dedup")
	c.Capacity.ArrivalRate = 1000
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: c.Ingress.Stream, Subjects: []string{c.Ingress.SubjectPrefix + ".*"}, MaxAge: c.Ingress.Retention.D(), MaxMsgs: 60000,
	})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := stream.New(stream.Config{NATSURL: srv.ClientURL(), Contract: c, DataDir: t.TempDir(), Operator: "dedup", Instance: "0"}, seenOp{families: []string{"seen"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rt.Run(ctx); err == nil || !strings.Contains(err.Error(), "refusing to start") || !strings.Contains(err.Error(), "keep records only 1m0s") {
		t.Fatalf("Run: %v, want a refusal saying the limits keep records a minute", err)
	}
}

// TestRefusesAnIngressDuplicateWindowShorterThanDeclared: an ingress
// stream that remembers message IDs for less than the contract's
// ingress.duplicate_window (weir creates a stream with it, and does not
// change one that exists) is refused at start, with the command that
// fixes it.
func TestRefusesAnIngressDuplicateWindowShorterThanDeclared(t *testing.T) {
	srv := natstest.Run(t)
	js, err := jetstream.New(srv.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := contracts.Shipped("nexmark-dedup")
	if c.Ingress.DuplicateWindow.D() != 20*time.Second {
		t.Fatalf("the shipped contract declares duplicate_window %s, the test expects 20s", c.Ingress.DuplicateWindow)
	}
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: c.Ingress.Stream, Subjects: []string{c.Ingress.SubjectPrefix + ".*"}, MaxAge: c.Ingress.Retention.D(), Duplicates: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := stream.New(stream.Config{NATSURL: srv.ClientURL(), Contract: c, DataDir: t.TempDir(), Operator: "dedup", Instance: "0"}, seenOp{families: []string{"seen"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rt.Run(ctx); err == nil || !strings.Contains(err.Error(), "refusing to start") || !strings.Contains(err.Error(), "--dupe-window 20s") {
		t.Fatalf("Run: %v, want a refusal naming the declared window and the fix", err)
	}
}

// TestADiskFaultStopsTheOperatorAndLosesNothing: when the disk refuses the
// state store's log (a full disk, injected with Pebble's errorfs over the
// real file system), the operator stops with an error that says so —
// state.ErrDisk, naming the store — rather than a panic, and acknowledges
// nothing it could not commit. Started again on the same directory once
// the disk has room, it resumes at its last commit: every event reaches
// the edge exactly once.
func TestADiskFaultStopsTheOperatorAndLosesNothing(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	var full atomic.Bool
	var refused atomic.Int64
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && strings.HasSuffix(op.Path, ".log") && op.Kind == errorfs.OpFileWrite {
			refused.Add(1)
			return fmt.Errorf("injected: %w", syscall.ENOSPC)
		}
		return nil
	}))
	keys := func(from, to int) []string {
		var k []string
		for i := from; i < to; i++ {
			k = append(k, "k"+strconv.Itoa(i))
		}
		return k
	}
	h.publish(keys(0, 40)...)
	rt, err := stream.New(stream.Config{
		NATSURL: h.srv.ClientURL(), Contract: h.c, DataDir: dir, Faults: &stream.Faults{StateFS: fs}, Operator: "dedup", Instance: "0",
		TickInterval: 10 * time.Millisecond,
	}, seenOp{families: []string{"seen"}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rt.Run(t.Context()) }()
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if n := len(h.records("deduped")); n != 40 {
			return fmt.Errorf("%d records on the edge, want 40", n)
		}
		return nil
	})

	full.Store(true)
	h.publish(keys(40, 80)...)
	select {
	case err := <-done:
		if !errors.Is(err, state.ErrDisk) || !strings.Contains(err.Error(), "no space left on device") || !strings.Contains(err.Error(), dir) {
			t.Fatalf("the operator stopped with %v, want state.ErrDisk naming the cause and %s", err, dir)
		}
		t.Logf("stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("the operator still runs 30 s after its disk filled (%d writes refused)", refused.Load())
	}

	full.Store(false)
	h.run(h.c, "dedup", seenOp{families: []string{"seen"}}, dir)
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if n := len(h.records("deduped")); n < 80 {
			return fmt.Errorf("%d records on the edge, want 80", n)
		}
		return nil
	})
	seen := map[string]int{}
	for _, r := range h.records("deduped") {
		seen[string(r.Key)]++
	}
	for _, k := range keys(0, 80) {
		if seen[k] != 1 {
			t.Errorf("key %s reached the edge %d times, want once", k, seen[k])
		}
	}
	if len(seen) != 80 {
		t.Errorf("%d distinct keys on the edge, want 80", len(seen))
	}
}

// TestAStartWaitsForConsumersTheBrokerCannotCreateYet: an operator that
// starts while the broker cannot create its consumers waits and tries
// again, as a running reader whose broker went away does, instead of
// stopping. weir chaos found it: a rescale's restart that landed while a
// restarted broker was still recovering its streams timed the consumers'
// creation out, and the service's process ended. Here the input stream's
// consumer limit refuses them until it is raised: meanwhile the operator
// is not ready and does not stop; afterwards it reads every event.
func TestAStartWaitsForConsumersTheBrokerCannotCreateYet(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	s, err := h.js.Stream(ctx, h.c.Ingress.Stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxConsumers = 1
	if _, err := h.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	h.publish("a", "b", "c", "d")
	rt, err := stream.New(stream.Config{
		NATSURL: h.srv.ClientURL(), Contract: h.c, DataDir: t.TempDir(), Operator: "dedup", Instance: "0",
		TickInterval: 10 * time.Millisecond,
	}, seenOp{families: []string{"seen"}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	// The first of its four consumers was created, the others refused.
	streamtest.CheckFor(t, 30*time.Second, func() error {
		info, err := s.Info(ctx)
		if err != nil || info.State.Consumers < 1 {
			return fmt.Errorf("%v consumers of the input (%v)", info, err)
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("the operator stopped while its consumers were refused: %v", err)
	case <-time.After(time.Second): // long enough for several attempts
	}
	if rt.Ready() {
		t.Fatal("the operator says it is ready with one of its four consumers")
	}

	cfg.MaxConsumers = -1
	if _, err := h.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if n := len(h.records("deduped")); n != 4 {
			return fmt.Errorf("%d records on the edge, want 4", n)
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("the operator stopped: %v", err)
	default:
	}
}

// TestANewHostBeforeTheFirstCheckpointLosesNothing moves both operators of
// the dedup pipeline to new hosts — their state gone — before any
// checkpoint was taken, and more input arrives meanwhile. Each starts over
// from the beginning of its input as a new generation, and the restarted
// publish operator reads none of the lost generation's frames: every event
// reaches the sink. weir chaos found it losing 1,880 of 2,998 results: the
// new generation's frames had the lost one's message IDs, and JetStream
// dropped them as duplicates though they held other records.
func TestANewHostBeforeTheFirstCheckpointLosesNothing(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	keys := func(from, to int) []string {
		var k []string
		for i := from; i < to; i++ {
			k = append(k, "k"+strconv.Itoa(i))
		}
		return k
	}
	sink := func() (uint64, error) {
		s, err := h.js.Stream(ctx, edge.StreamName(h.c.Pipeline, "events"))
		if err != nil {
			return 0, err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return 0, err
		}
		return info.State.Msgs, nil
	}
	h.publish(keys(0, 40)...)
	_, stopDedup := h.run(h.c, "dedup", seenOp{families: []string{"seen"}}, t.TempDir())
	_, stopPublish := h.run(h.c, "publish", seenOp{}, t.TempDir())
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if n, err := sink(); n != 40 {
			return fmt.Errorf("%d events at the sink, want 40 (%v)", n, err)
		}
		return nil
	})
	stopDedup()
	stopPublish()

	h.publish(keys(40, 80)...)
	h.run(h.c, "dedup", seenOp{families: []string{"seen"}}, t.TempDir())
	h.run(h.c, "publish", seenOp{}, t.TempDir())
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if n, err := sink(); n != 80 {
			return fmt.Errorf("%d events at the sink, want 80 (%v)", n, err)
		}
		return nil
	})
}
