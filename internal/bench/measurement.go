package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// Measurement is one figure of a benchmark run: how fast one mode carried
// one query's events, what CPU it took and what memory it held. With -json
// `weir bench nexmark` prints one per line.
type Measurement struct {
	Query  string `json:"query"`
	Mode   string `json:"mode"`
	Events int64  `json:"events"`
	// Seconds is the measured interval; EventsPerSec is Events over it.
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
	// CPUSeconds is the CPU time weir's processes spent in the interval,
	// read from /proc; the broker's is BrokerCPUSeconds, apart. Zero where
	// the work ran inside the benchmark's own process, which also measures.
	CPUSeconds       float64 `json:"cpu_seconds"`
	EventsPerCPUSec  float64 `json:"events_per_cpu_sec"`
	BrokerCPUSeconds float64 `json:"broker_cpu_seconds"`
	// EventsPerTotalCPUSec is Events over CPUSeconds and BrokerCPUSeconds
	// together: the cost of an event where weir's design puts the broker
	// on every hop.
	EventsPerTotalCPUSec float64 `json:"events_per_cpu_sec_with_broker"`
	// Latency from an event to its result, where measured: null otherwise.
	P50ms *float64 `json:"p50_ms"`
	P99ms *float64 `json:"p99_ms"`
	Maxms *float64 `json:"max_ms"`
	// PeakRSSBytes is the largest peak resident memory of weir's
	// processes; PeakRSS names each process's.
	PeakRSSBytes int64            `json:"peak_rss_bytes"`
	PeakRSS      map[string]int64 `json:"peak_rss,omitempty"`
	// Checkpoints completed in the interval, their mean and longest
	// duration from trigger to commit.
	Checkpoints      int     `json:"checkpoints,omitempty"`
	CheckpointMeanMs float64 `json:"checkpoint_mean_ms,omitempty"`
	CheckpointMaxMs  float64 `json:"checkpoint_max_ms,omitempty"`
	Note             string  `json:"note,omitempty"`
}

// Rate fills EventsPerSec, EventsPerCPUSec and EventsPerTotalCPUSec from
// Events, d, CPUSeconds and BrokerCPUSeconds.
func (m *Measurement) Rate(d time.Duration) {
	m.Seconds = d.Seconds()
	if d > 0 {
		m.EventsPerSec = float64(m.Events) / d.Seconds()
	}
	if m.CPUSeconds > 0 {
		m.EventsPerCPUSec = float64(m.Events) / m.CPUSeconds
	}
	if all := m.CPUSeconds + m.BrokerCPUSeconds; all > 0 {
		m.EventsPerTotalCPUSec = float64(m.Events) / all
	}
}

// Latencies fills P50ms, P99ms and Maxms from samples; it sorts them.
func (m *Measurement) Latencies(samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	ms := func(d time.Duration) *float64 { v := float64(d.Microseconds()) / 1000; return &v }
	m.P50ms = ms(Percentile(samples, 50))
	m.P99ms = ms(Percentile(samples, 99))
	m.Maxms = ms(samples[len(samples)-1])
}

// Percentile is the p-th percentile of sorted samples, nearest rank.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// WriteJSON writes ms as JSON lines.
func WriteJSON(w io.Writer, ms []Measurement) error {
	enc := json.NewEncoder(w)
	for _, m := range ms {
		if err := enc.Encode(m); err != nil {
			return err
		}
	}
	return nil
}

// WriteTable writes ms as a table for people.
func WriteTable(w io.Writer, ms []Measurement) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "query\tmode\tevents\tevents/s\tCPU s\tevents/CPU-s\tbroker CPU s\twith broker\tp50 ms\tp99 ms\tmax ms\tpeak RSS MiB\tcheckpoints\t")
	opt := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f", *v)
	}
	num := func(v float64) string {
		if v == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f", v)
	}
	for _, m := range ms {
		cps := "-"
		if m.Checkpoints > 0 {
			cps = fmt.Sprintf("%d (mean %.0f, max %.0f ms)", m.Checkpoints, m.CheckpointMeanMs, m.CheckpointMaxMs)
		}
		rss := "-"
		if m.PeakRSSBytes > 0 {
			rss = fmt.Sprintf("%.0f", float64(m.PeakRSSBytes)/(1<<20))
		}
		cpu := "-"
		if m.CPUSeconds > 0 {
			cpu = fmt.Sprintf("%.2f", m.CPUSeconds)
		}
		bcpu := "-"
		if m.BrokerCPUSeconds > 0 {
			bcpu = fmt.Sprintf("%.2f", m.BrokerCPUSeconds)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", m.Query, m.Mode, m.Events,
			num(m.EventsPerSec), cpu, num(m.EventsPerCPUSec), bcpu, num(m.EventsPerTotalCPUSec), opt(m.P50ms), opt(m.P99ms), opt(m.Maxms), rss, cps)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, m := range ms {
		if m.Note != "" {
			if _, err := fmt.Fprintf(w, "  %s %s: %s\n", m.Query, m.Mode, m.Note); err != nil {
				return err
			}
		}
	}
	return nil
}
