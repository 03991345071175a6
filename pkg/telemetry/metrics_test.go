package telemetry

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
)

// scrape GETs url and parses the Prometheus text format.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value finds the series of family name whose labels include want and
// returns its value: a counter's or gauge's value, a histogram's count.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// gauges are what the test's runtime stand-in publishes through atomics.
type gauges struct {
	latestEventMs, watermarkMs, inputWmMs atomic.Int64
	keys, size, pending, lag              atomic.Int64
}

func TestRuntimeMetricsEndpoint(t *testing.T) {
	tel, err := Start(context.Background(), Config{ServiceName: "weir-dedup", Instance: "dedup-0", MetricsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	url := tel.MetricsURL()
	if url == "" || url == "http://127.0.0.1:0/metrics" {
		t.Fatalf("MetricsURL %q does not name the bound port", url)
	}
	rm, err := NewRuntimeMetrics(tel.Meter("github.com/weirflow/weir/pkg/stream"),
		attribute.String("operator", "dedup"), attribute.String("instance", "dedup-0"))
	if err != nil {
		t.Fatal(err)
	}

	now := time.Unix(1_800_000_000, 0)
	var g gauges
	g.latestEventMs.Store(now.Add(-3 * time.Second).UnixMilli())
	g.watermarkMs.Store(now.Add(-5 * time.Second).UnixMilli())
	g.inputWmMs.Store(now.Add(-4 * time.Second).UnixMilli())
	g.keys.Store(10)
	g.size.Store(4096)
	g.pending.Store(2)
	g.lag.Store(100)
	rm.Observe(func(o Observation) {
		o.EventTimeLag(now, time.UnixMilli(g.latestEventMs.Load()))
		o.Watermark(time.UnixMilli(g.watermarkMs.Load()))
		o.InputWatermark("ingress/0", time.UnixMilli(g.inputWmMs.Load()))
		o.StateKeys("seen", g.keys.Load())
		o.StateSize("", g.size.Load())
		o.PendingSinkEpochs(g.pending.Load())
		o.PartitionLag("ingress/0", g.lag.Load())
	})

	record := func() {
		ctx := context.Background()
		rm.In(ctx, "ingress/0", 5, 500)
		rm.Out(ctx, "deduped/1", 4, 400)
		rm.DeadLettered(ctx, 1)
		rm.SideOutput(ctx, 1)
		rm.OnTime(ctx, 3)
		rm.LateAccepted(ctx, 1)
		rm.LateDropped(ctx, 1)
		rm.TimersFired(ctx, 2)
		rm.Step(ctx, 3*time.Millisecond)
		rm.Busy(ctx, 250*time.Millisecond)
		rm.Idle(ctx, 500*time.Millisecond)
		rm.Backpressured(ctx, 100*time.Millisecond)
		rm.Checkpoint(ctx, CheckpointStats{StartDelay: time.Millisecond, Alignment: 2 * time.Millisecond,
			Snapshot: 10 * time.Millisecond, Upload: 20 * time.Millisecond, Size: 1 << 20})
		rm.CheckpointFailed(ctx)
		rm.Restored(ctx, time.Second)
		rm.Replayed(ctx, 7)
		rm.SinkCommitted(ctx, 40*time.Millisecond)
	}

	base := map[string]string{"operator": "dedup", "instance": "dedup-0"}
	with := func(k, v string) map[string]string {
		m := map[string]string{k: v}
		for bk, bv := range base {
			m[bk] = bv
		}
		return m
	}
	in, out := with("partition", "ingress/0"), with("partition", "deduped/1")
	// The Prometheus names of every instrument, and the value after one
	// and after two rounds of record (counters move; gauges are as set).
	type want struct {
		name   string
		labels map[string]string
		one    float64
		two    float64
	}
	wants := []want{
		{"weir_records_in_total", in, 5, 10},
		{"weir_records_out_total", out, 4, 8},
		{"weir_bytes_in_total", in, 500, 1000},
		{"weir_bytes_out_total", out, 400, 800},
		{"weir_records_dead_lettered_total", base, 1, 2},
		{"weir_records_side_output_total", base, 1, 2},
		{"weir_records_on_time_total", base, 3, 6},
		{"weir_records_late_accepted_total", base, 1, 2},
		{"weir_records_late_dropped_total", base, 1, 2},
		{"weir_timers_fired_total", base, 2, 4},
		{"weir_step_duration_seconds", base, 1, 2},
		{"weir_busy_time_seconds_total", base, 0.25, 0.5},
		{"weir_idle_time_seconds_total", base, 0.5, 1},
		{"weir_backpressured_time_seconds_total", base, 0.1, 0.2},
		{"weir_checkpoint_duration_seconds", base, 1, 2},
		{"weir_checkpoint_start_delay_seconds", base, 1, 2},
		{"weir_checkpoint_alignment_duration_seconds", base, 1, 2},
		{"weir_checkpoint_snapshot_duration_seconds", base, 1, 2},
		{"weir_checkpoint_upload_duration_seconds", base, 1, 2},
		{"weir_checkpoint_size_bytes", base, 1 << 20, 1 << 20},
		{"weir_checkpoint_failures_total", base, 1, 2},
		{"weir_restore_duration_seconds", base, 1, 2},
		{"weir_replay_records_total", base, 7, 14},
		{"weir_sink_commit_duration_seconds", base, 1, 2},
		{"weir_event_time_lag_seconds", base, 3, 1},
		{"weir_operator_watermark_seconds", base, 1_799_999_995, 1_800_000_000},
		{"weir_input_watermark_seconds", in, 1_799_999_996, 1_799_999_999},
		{"weir_state_keys", with("family", "seen"), 10, 20},
		{"weir_state_size_bytes", base, 4096, 8192},
		{"weir_sink_pending_epochs", base, 2, 0},
		{"weir_partition_lag", in, 100, 50},
	}

	// Before anything is recorded the counters without a partition are
	// there at zero.
	fams := scrape(t, url)
	if v, ok := value(fams, "weir_records_dead_lettered_total", base); !ok || v != 0 {
		t.Fatalf("weir_records_dead_lettered_total before recording: %v %v; want 0", v, ok)
	}
	if fams["target_info"] == nil {
		t.Fatal("no target_info")
	}

	record()
	fams = scrape(t, url)
	for _, w := range wants {
		v, ok := value(fams, w.name, w.labels)
		if !ok {
			t.Errorf("%s%v is not exposed", w.name, w.labels)
		} else if !near(v, w.one) {
			t.Errorf("%s%v = %v, want %v", w.name, w.labels, v, w.one)
		}
	}

	record()
	g.latestEventMs.Store(now.Add(-time.Second).UnixMilli())
	g.watermarkMs.Store(now.UnixMilli())
	g.inputWmMs.Store(now.Add(-time.Second).UnixMilli())
	g.keys.Store(20)
	g.size.Store(8192)
	g.pending.Store(0)
	g.lag.Store(50)
	fams = scrape(t, url)
	for _, w := range wants {
		if v, _ := value(fams, w.name, w.labels); !near(v, w.two) {
			t.Errorf("after more work %s%v = %v, want %v", w.name, w.labels, v, w.two)
		}
	}

	// Closed, the metrics stop reading the runtime's gauges.
	if err := rm.Close(); err != nil {
		t.Fatal(err)
	}
	fams = scrape(t, url)
	if _, ok := value(fams, "weir_state_keys", base); ok {
		t.Error("weir_state_keys still exposed after Close")
	}

	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.Get(url); err == nil {
		resp.Body.Close()
		t.Fatal("metrics endpoint still answers after Shutdown")
	}
}

func near(a, b float64) bool {
	d := a - b
	return d < 1e-6*max(1, b) && d > -1e-6*max(1, b)
}

// TestRuntimeMetricsSeparateByAttributes runs two runtimes on one meter.
func TestRuntimeMetricsSeparateByAttributes(t *testing.T) {
	tel, err := Start(context.Background(), Config{ServiceName: "demo", MetricsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	m := tel.Meter("weir")
	a, err := NewRuntimeMetrics(m, attribute.String("operator", "a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewRuntimeMetrics(m, attribute.String("operator", "b"))
	if err != nil {
		t.Fatal(err)
	}
	a.In(context.Background(), "p", 1, 1)
	b.In(context.Background(), "p", 2, 2)
	a.Observe(func(o Observation) { o.PendingSinkEpochs(3) })
	b.Observe(func(o Observation) { o.PendingSinkEpochs(4) })
	fams := scrape(t, tel.MetricsURL())
	for op, want := range map[string]float64{"a": 1, "b": 2} {
		if v, _ := value(fams, "weir_records_in_total", map[string]string{"operator": op}); v != want {
			t.Errorf("operator %s records in = %v, want %v", op, v, want)
		}
		if v, _ := value(fams, "weir_sink_pending_epochs", map[string]string{"operator": op}); v != want+2 {
			t.Errorf("operator %s pending epochs = %v, want %v", op, v, want+2)
		}
	}
}

// TestRuntimeMetricsConcurrent records and scrapes at once; run with -race.
func TestRuntimeMetricsConcurrent(t *testing.T) {
	tel, err := Start(context.Background(), Config{ServiceName: "s", MetricsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	rm, err := NewRuntimeMetrics(tel.Meter("weir"))
	if err != nil {
		t.Fatal(err)
	}
	var keys atomic.Int64
	rm.Observe(func(o Observation) { o.StateKeys("f", keys.Load()) })
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				rm.In(context.Background(), []string{"a", "b", "c"}[(w+i)%3], 1, 10)
				keys.Add(1)
			}
		}()
	}
	for range 5 {
		scrape(t, tel.MetricsURL())
	}
	wg.Wait()
	var total float64
	fams := scrape(t, tel.MetricsURL())
	for _, p := range []string{"a", "b", "c"} {
		v, _ := value(fams, "weir_records_in_total", map[string]string{"partition": p})
		total += v
	}
	if total != 800 {
		t.Fatalf("records in %v, want 800", total)
	}
	if v, _ := value(fams, "weir_state_keys", nil); v != 800 {
		t.Fatalf("state keys %v, want 800", v)
	}
}

func TestNilRuntimeMetrics(t *testing.T) {
	var rm *RuntimeMetrics
	ctx := context.Background()
	rm.In(ctx, "p", 1, 1)
	rm.Step(ctx, time.Second)
	rm.Checkpoint(ctx, CheckpointStats{})
	rm.Observe(func(Observation) {})
	if err := rm.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestShutdownTwice(t *testing.T) {
	tel, err := Start(context.Background(), Config{ServiceName: "s", MetricsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := tel.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
