package test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/pkg/telemetry"
	"github.com/weirflow/weir/services/dedup"
)

// scrape reads a Prometheus text exposition into "name{labels}" → value.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out
}

// metric sums the series of a metric whose labels contain every filter.
func metric(m map[string]float64, name string, filters ...string) (float64, bool) {
	var sum float64
	found := false
	for k, v := range m {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		ok := true
		for _, f := range filters {
			ok = ok && strings.Contains(k, f)
		}
		if ok {
			sum += v
			found = true
		}
	}
	return sum, found
}

// TestMetricsExistAndMove runs the dedup pipeline with telemetry on and
// scrapes its Prometheus endpoint twice while events flow: the runtime's
// figures exist and move, and the event-time lag is positive and sane.
func TestMetricsExistAndMove(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c := loadContract(t)
	tel, err := telemetry.Start(context.Background(), telemetry.Config{
		ServiceName: "dedup", ServiceVersion: dedup.Version, Instance: "0", MetricsAddr: "127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	url := tel.MetricsURL()

	streamtest.Run(t, srv.ClientURL(), c, t.TempDir(), dedup.Factories(), func(cfg *stream.Config) { cfg.Telemetry = tel })

	// Each round waits until dedup has read nearly all its events and,
	// after the first, until the operator's watermark has passed the one
	// the previous round saw: the watermark is the least over the
	// partitions, and the last partition to be read holds it back a step
	// after the counts have moved (CI once scraped in between).
	var before float64
	round := func(events uint64, start uint64) map[string]float64 {
		cfg := genConfig(c, 4000)
		cfg.Start, cfg.Count = start, events
		publish(t, js, cfg)
		var m map[string]float64
		streamtest.CheckFor(t, 60*time.Second, func() error {
			m = scrape(t, url)
			in, _ := metric(m, "weir_records_in_total", `operator="dedup"`)
			if in < float64(start+events)*0.9 {
				return fmt.Errorf("dedup read %v of %d", in, start+events)
			}
			wm, ok := metric(m, "weir_operator_watermark_seconds", `operator="dedup"`)
			if !ok {
				return fmt.Errorf("no watermark yet")
			}
			if wm <= before {
				return fmt.Errorf("watermark %v, not yet past the previous round's %v", wm, before)
			}
			return nil
		})
		before, _ = metric(m, "weir_operator_watermark_seconds", `operator="dedup"`)
		return m
	}
	first := round(1500, 0)
	second := round(1500, 1500)

	for _, name := range []string{
		"weir_records_in_total", "weir_records_out_total", "weir_bytes_in_total", "weir_bytes_out_total",
		"weir_records_dead_lettered_total", "weir_step_duration_seconds_count", "weir_busy_time_seconds_total",
		"weir_idle_time_seconds_total", "weir_backpressured_time_seconds_total",
		"weir_operator_watermark_seconds", "weir_input_watermark_seconds", "weir_event_time_lag_seconds",
		"weir_state_keys", "weir_state_size_bytes", "weir_partition_lag", "weir_records_on_time_total",
		"weir_memory_budget_bytes", "weir_input_buffered_bytes", "weir_step_retries_total",
		"weir_timers_registered",
	} {
		if _, ok := metric(second, name); !ok {
			t.Errorf("metric %s is missing", name)
		}
	}
	// The watermark's move is what the second round waited for.
	for _, name := range []string{"weir_records_in_total", "weir_records_out_total", "weir_state_keys"} {
		a, _ := metric(first, name, `operator="dedup"`)
		b, _ := metric(second, name, `operator="dedup"`)
		if !(b > a) {
			t.Errorf("%s did not move: %v then %v", name, a, b)
		}
	}
	lag, _ := metric(second, "weir_event_time_lag_seconds", `operator="dedup"`)
	// The corpus's events are an hour old: the lag is about an hour.
	if lag <= 0 || lag > 2*3600 {
		t.Errorf("event-time lag %v s: want positive and about an hour", lag)
	}
	// The source lag and the families' bytes are measured on the step
	// loop's ticks (the heads every 5 s, the state a slice per tick): once
	// the pipeline has caught up, the lag is zero and the sweep has seen
	// the keys.
	streamtest.CheckFor(t, 30*time.Second, func() error {
		m := scrape(t, url)
		if lag, ok := metric(m, "weir_source_lag_seconds", `operator="dedup"`, `partition="ingress/0"`); !ok || lag != 0 {
			return fmt.Errorf("source lag of ingress/0: %v (reported: %v), want 0 once caught up", lag, ok)
		}
		if n, _ := metric(m, "weir_state_size_bytes", `operator="dedup"`, `family="seen"`); n < 1500*10 {
			return fmt.Errorf("family seen measured at %v bytes: want its 1500 and more keys", n)
		}
		return nil
	})
	if b, _ := metric(second, "weir_memory_budget_bytes", `operator="dedup"`); b < 64<<20 {
		t.Errorf("memory budget %v bytes: want the runtime's 64 MiB and more", b)
	}
	if n, _ := metric(second, "weir_input_watermark_seconds", `operator="dedup"`, `partition="ingress/0"`); n <= 0 {
		t.Errorf("no watermark for input ingress/0")
	}
}
