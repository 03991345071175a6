package harness

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/pkg/ingress"
	"github.com/weirflow/weir/pkg/record"
)

// resultAt is one result of a latency run: the window's maximum timestamp
// (the result's event time) and when the result edge stored it.
type resultAt struct{ window, stored time.Time }

// stageTimes is where one window's result waited: for each stage, when it
// held what the result needed, as the broker's stored times tell.
type stageTimes struct {
	due time.Time
	// ingress is when every ingress subject held an event making the
	// window due (its event time at or past due).
	ingress time.Time
	// watermark is, per edge, when every partition of it held a
	// watermark at or past the window; first and last bound its records
	// at the window's time, n of them.
	watermark   []time.Time
	first, last []time.Time
	n           []int
	results     []time.Time
}

// stages writes, for a latency run of a windowed query, where each
// window's result waited: read back from every stream of the run — the
// ingress, each framed edge and the results — the times the broker stored
// what the result needed, in ms after the result was due. It reads every
// message the run stored, so only runs with -profile make it.
func (r *pipelineRun) stages(ctx context.Context, results []resultAt, w io.Writer) error {
	ooo := r.c.Progress.OutOfOrderness.D()
	byWindow := map[time.Time]*stageTimes{}
	var windows []time.Time
	for _, res := range results {
		s, ok := byWindow[res.window]
		if !ok {
			s = &stageTimes{due: res.window.Add(ooo)}
			byWindow[res.window] = s
			windows = append(windows, res.window)
		}
		s.results = append(s.results, res.stored)
	}
	slices.SortFunc(windows, time.Time.Compare)
	var edges []string
	for _, op := range r.c.Operators[:len(r.c.Operators)-1] {
		if e, ok := r.c.Edge(op.Output); ok && !e.JSON() && !slices.Contains(edges, e.Name) {
			edges = append(edges, e.Name)
		}
	}
	for _, s := range byWindow {
		s.watermark = make([]time.Time, len(edges))
		s.first, s.last, s.n = make([]time.Time, len(edges)), make([]time.Time, len(edges)), make([]int, len(edges))
	}
	// The ingress: per subject, the first event at or past each due time.
	dec, err := ingress.NewDecoder(ingress.ConfigOf(r.c))
	if err != nil {
		return err
	}
	next := map[string]int{} // per subject, the first window it has not yet made due
	for _, name := range r.c.Ingress.StreamNames() {
		err := readStream(ctx, r.js, name, func(m jetstream.Msg, meta *jetstream.MsgMetadata) {
			rec, err := dec.Decode(ingress.Message{Stream: name, Subject: m.Subject(), Header: m.Headers(), Data: m.Data(), Seq: meta.Sequence.Stream, Stored: meta.Timestamp}, meta.Timestamp)
			if err != nil {
				return
			}
			i := next[m.Subject()]
			for ; i < len(windows) && !rec.Time.Before(byWindow[windows[i]].due); i++ {
				s := byWindow[windows[i]]
				s.ingress = later(s.ingress, meta.Timestamp)
			}
			next[m.Subject()] = i
		})
		if err != nil {
			return fmt.Errorf("ingress %s: %w", name, err)
		}
	}
	for e, name := range edges {
		stream, err := r.js.StreamNameBySubject(ctx, r.c.EdgeSubject(name, 0))
		if err != nil {
			return fmt.Errorf("edge %s: %w", name, err)
		}
		next := map[string]int{}
		err = readStream(ctx, r.js, stream, func(m jetstream.Msg, meta *jetstream.MsgMetadata) {
			recs, err := edge.DecodeFrame(m.Data())
			if err != nil {
				return
			}
			for _, rec := range recs {
				switch rec.Kind {
				case record.Watermark:
					i := next[m.Subject()]
					for ; i < len(windows) && !rec.Time.Before(windows[i]); i++ {
						s := byWindow[windows[i]]
						s.watermark[e] = later(s.watermark[e], meta.Timestamp)
					}
					next[m.Subject()] = i
				case record.Data:
					if s, ok := byWindow[rec.Time]; ok {
						if s.n[e] == 0 || meta.Timestamp.Before(s.first[e]) {
							s.first[e] = meta.Timestamp
						}
						s.last[e] = later(s.last[e], meta.Timestamp)
						s.n[e]++
					}
				}
			}
		})
		if err != nil {
			return fmt.Errorf("edge %s: %w", name, err)
		}
	}
	// An edge whose records at a window's time were all stored before it
	// was due carries the input, not the window's panes: no column.
	panes := make([]bool, len(edges))
	for e := range edges {
		for _, s := range byWindow {
			panes[e] = panes[e] || (s.n[e] > 0 && !s.first[e].Before(s.due))
		}
	}
	fmt.Fprintf(w, "%s: where each window's result waited, ms after it was due (its end plus out_of_orderness %s):\n", r.query, ooo)
	fmt.Fprintf(w, "ingress: every ingress subject held an event that makes it due; EDGE wm: every partition of the edge held a\n")
	fmt.Fprintf(w, "watermark past the window; EDGE panes: the first and last of the edge's records at the window's time;\n")
	fmt.Fprintf(w, "results: the first, middle and last result\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"window", "ingress"}
	for e, name := range edges {
		head = append(head, name+" wm")
		if panes[e] {
			head = append(head, name+" panes")
		}
	}
	fmt.Fprintln(tw, strings.Join(append(head, "results", ""), "\t"))
	ms := func(s *stageTimes, t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%+d", t.Sub(s.due).Milliseconds())
	}
	for _, win := range windows {
		s := byWindow[win]
		row := []string{win.UTC().Format("15:04:05.000"), ms(s, s.ingress)}
		for e := range edges {
			row = append(row, ms(s, s.watermark[e]))
			if panes[e] {
				recs := "-"
				if s.n[e] > 0 {
					recs = fmt.Sprintf("%s..%s (%d)", ms(s, s.first[e]), ms(s, s.last[e]), s.n[e])
				}
				row = append(row, recs)
			}
		}
		slices.SortFunc(s.results, time.Time.Compare)
		n := len(s.results)
		row = append(row, fmt.Sprintf("%s, %s, %s (%d)", ms(s, s.results[0]), ms(s, s.results[n/2]), ms(s, s.results[n-1]), n))
		fmt.Fprintln(tw, strings.Join(append(row, ""), "\t"))
	}
	return tw.Flush()
}

// later returns the later of a and b, b if a is zero.
func later(a, b time.Time) time.Time {
	if a.IsZero() || b.After(a) {
		return b
	}
	return a
}

// readStream calls fn with every message the stream holds now, in order.
func readStream(ctx context.Context, js jetstream.JetStream, name string, fn func(jetstream.Msg, *jetstream.MsgMetadata)) error {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return err
	}
	last := st.CachedInfo().State.LastSeq
	if last == 0 {
		return nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	var seen uint64
	for {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return err
		}
		got := false
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			got, seen = true, meta.Sequence.Stream
			fn(m, meta)
			if meta.Sequence.Stream >= last {
				return nil
			}
		}
		if err := batch.Error(); err != nil {
			return err
		}
		if !got {
			return fmt.Errorf("stream %s: no message past %d of %d within 5 s", name, seen, last)
		}
	}
}
