package window

import (
	"fmt"
	"testing"
	"time"

	"github.com/weirflow/weir/pkg/record"
)

// BenchmarkWindowUpdate measures window state updates per second on real
// Pebble (in memory): each op processes one record of one of 1000 keys,
// committing a batch every 1000 records, while the watermark advances and
// fires due timers, as a runtime step would.
func BenchmarkWindowUpdate(b *testing.B) {
	for _, bc := range []struct {
		name string
		spec Spec
		agg  Aggregator
	}{
		{"tumbling-count", Spec{Kind: Tumbling, Size: time.Minute, OnTime: true, Accumulation: Accumulating}, Count()},
		{"sliding-max", Spec{Kind: Sliding, Size: time.Minute, Slide: 10 * time.Second, OnTime: true, EarlyCount: 100}, MaxBy("n")},
		{"session-retracting", Spec{Kind: Session, Gap: 30 * time.Second, OnTime: true, AllowedLateness: time.Minute,
			LateEach: true, Accumulation: Retracting}, Sum("n")},
	} {
		b.Run(bc.name, func(b *testing.B) { benchmarkUpdates(b, bc.spec, bc.agg, 10*time.Second, time.Minute, true) })
	}
}

// BenchmarkSlicedWindows is q5's shape (10s windows every 2s, one ON_TIME
// pane, a count), each key seeing an event every 200ms of event time and
// the watermark 4s behind, kept as slices and window by window, side by
// side.
func BenchmarkSlicedWindows(b *testing.B) {
	spec := Spec{Kind: Sliding, Size: 10 * time.Second, Slide: 2 * time.Second, OnTime: true}
	b.Run("slices", func(b *testing.B) { benchmarkUpdates(b, spec, Count(), 200*time.Millisecond, 4*time.Second, true) })
	b.Run("windows", func(b *testing.B) { benchmarkUpdates(b, spec, Count(), 200*time.Millisecond, 4*time.Second, false) })
}

// benchmarkUpdates processes records of 1000 keys, each key seeing one
// every gap of event time, with the watermark lag behind; sliced false keeps sliding windows window by
// window even where they could be sliced.
func benchmarkUpdates(b *testing.B, spec Spec, agg Aggregator, gap, lag time.Duration, sliced bool) {
	const keys, perBatch = 1000, 1000
	d := newDriver(b, spec, agg)
	d.op.sliced = d.op.sliced && sliced
	names := make([][]byte, keys)
	for i := range names {
		names[i] = fmt.Appendf(nil, "key-%04d", i)
	}
	windows := 1
	if spec.Kind == Sliding {
		windows = int(spec.Size / spec.Slide)
	}
	base := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	batch := make([]record.Record, 0, perBatch)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; {
		n := min(perBatch, b.N-i)
		batch = batch[:0]
		for j := range n {
			k := (i + j) % keys
			// Each key sees an event every gap of event time, a little out of order.
			t := base.Add(time.Duration((i+j)/keys)*gap - time.Duration(k%7)*gap/10)
			batch = append(batch, record.Record{Kind: record.Data, ID: "e", Key: names[k], Time: t, Value: []byte(`{"n":7}`)})
		}
		if err := d.h.ProcessAll(batch...); err != nil {
			b.Fatal(err)
		}
		i += n
		d.h.Out, d.h.Side = d.h.Out[:0], d.h.Side[:0]
		if err := d.h.Advance(base.Add(time.Duration(i/keys)*gap - lag)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*windows)/b.Elapsed().Seconds(), "updates/s")
}

// BenchmarkPane encodes a count pane and decodes it again, as q5-count does
// to emit it and q5-max to read it.
func BenchmarkPane(b *testing.B) {
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	p := Pane{
		Window:  Window{Start: start, End: start.Add(10 * time.Second)},
		Key:     "1001234",
		Info:    PaneInfo{Index: 0, Timing: OnTime, Final: true},
		Version: 1,
		Value:   []byte(`{"count":42}`),
	}
	b.ReportAllocs()
	for b.Loop() {
		raw, err := p.Encode()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := DecodePane(raw); err != nil {
			b.Fatal(err)
		}
	}
}
