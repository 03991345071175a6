package main

import (
	bytespkg "bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/edge"
	"github.com/weirflow/weir/pkg/window"
)

// compareCmd is `weir compare`: two result generations of a pipeline —
// the live one and a replay, or a shadow — side by side, result by result
// and revision by revision: an extra early pane, a missing retraction or a
// different final value each show, not only different final values.
func compareCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, srv, pipeline := ctlFlags("weir compare", getenv)
	var contract, with, only, until string
	var asJSON bool
	fs.String(&contract, "contract", "WEIR_CONTRACT", "", "the pipeline's contract: a file or a shipped contract's name (default: the shipped contract of -pipeline)")
	fs.String(&with, "with", "WEIR_WITH", "", "the other generation's pipeline, e.g. <pipeline>-<generation> of weir replay")
	fs.String(&only, "edge", "WEIR_EDGE", "", "compare this result edge only (default: every json edge no operator reads)")
	fs.String(&until, "until", "WEIR_UNTIL", "", "compare only windows ending at or before this event time (RFC 3339): the source coordinate both generations reached")
	fs.Bool(&asJSON, "json", "WEIR_JSON", false, "print the comparison as one JSON object")
	if err := parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	c, err := statusContract(contract, *pipeline, fs.Given("pipeline"))
	if err != nil {
		return err
	}
	if with == "" {
		return fmt.Errorf("weir compare: -with names the generation to compare pipeline %s with", c.Pipeline)
	}
	var limit time.Time
	if until != "" {
		if limit, err = time.Parse(time.RFC3339Nano, until); err != nil {
			return fmt.Errorf("weir compare: -until %q: %w", until, err)
		}
	}
	if c.Sink.Effect == contracts.EffectVersionedUpsert && only == "" {
		return fmt.Errorf("weir compare: pipeline %s's results are a view (sink.effect versioned-upsert), which keeps only each window's newest pane: there are no revisions to compare; read both with weir view list -pipeline", c.Pipeline)
	}
	edges := resultEdges(c, only)
	if len(edges) == 0 {
		return fmt.Errorf("weir compare: contract %s has no json result edge to compare (named %q)", c.File, only)
	}
	nc, js, err := srv.connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	report := comparison{A: c.Pipeline, B: with}
	for _, e := range edges {
		a, err := revisionsOf(ctx, js, c.Pipeline, e, limit)
		if err != nil {
			return err
		}
		b, err := revisionsOf(ctx, js, with, e, limit)
		if err != nil {
			return err
		}
		report.Edges = append(report.Edges, compareEdge(e, a, b))
	}
	if asJSON {
		if err := json.NewEncoder(stdout).Encode(report); err != nil {
			return err
		}
	} else {
		report.print(stdout)
	}
	if !report.equal() {
		return exitError(1)
	}
	return nil
}

// resultEdges are the contract's json edges no operator reads — its
// results — or the one named.
func resultEdges(c *contracts.Contract, only string) []string {
	read := map[string]bool{}
	for _, op := range c.Operators {
		read[op.Input] = true
	}
	var out []string
	for _, e := range c.Edges {
		if (only == "" && e.Format == contracts.FormatJSON && !read[e.Name]) || e.Name == only {
			out = append(out, e.Name)
		}
	}
	return out
}

// revision is one emission of a result.
type revision struct {
	Seq   uint64          `json:"seq"`
	Value json.RawMessage `json:"value"`
	// Timing and Index say which firing of a window a pane was.
	Timing string `json:"timing,omitempty"`
	Index  uint64 `json:"index,omitempty"`
}

// revisionsOf reads a generation's result edge: per result — a window's
// key and bounds, or a record's ID — its revisions in the order stored.
// Windows ending after limit (when set) are left out.
func revisionsOf(ctx context.Context, js jetstream.JetStream, pipeline, edgeName string, limit time.Time) (map[string][]revision, error) {
	out, _, err := readRevisions(ctx, js, pipeline, edgeName, limit)
	return out, err
}

// readRevisions is revisionsOf, and also returns the IDs of the messages
// stored more than once (each once more for every repeat).
func readRevisions(ctx context.Context, js jetstream.JetStream, pipeline, edgeName string, limit time.Time) (_ map[string][]revision, repeated []string, _ error) {
	out := map[string][]revision{}
	st, err := js.Stream(ctx, edge.StreamName(pipeline, edgeName))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil, fmt.Errorf("weir compare: pipeline %s has no results on edge %s (no stream %s)", pipeline, edgeName, edge.StreamName(pipeline, edgeName))
	}
	if err != nil {
		return nil, nil, err
	}
	prefix := pipeline + "." + edgeName + "."
	seen := map[string]bool{}
	err = eachMessage(ctx, st, func(m jetstream.Msg, seq uint64) error {
		h := m.Headers()
		if edge.IsCommitMarker(h) {
			return nil
		}
		id, rev, end := resultOf(m.Data(), h, prefix)
		if !limit.IsZero() && end.After(limit) {
			return nil
		}
		// An at-least-once edge may store a message again once the
		// stream's duplicate window has passed: one revision still.
		mid := messageID(h)
		if id != "" && (mid == "" || !seen[mid]) {
			seen[mid] = true
			rev.Seq = seq
			out[id] = append(out[id], rev)
		} else if id != "" {
			repeated = append(repeated, mid)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("weir compare: %w", err)
	}
	return out, repeated, nil
}

// eachMessage calls fn with every message st held when it was looked up,
// in order, and its stream sequence. It reads with one ordered consumer as
// an iterator: Next on an ordered consumer makes a consumer for each
// message, and on a cluster soon asks one the cluster does not know yet
// ("no responders"). It fails when nothing comes for 30 s (a cluster
// under load may take that long to place the consumer).
func eachMessage(ctx context.Context, st jetstream.Stream, fn func(m jetstream.Msg, seq uint64) error) error {
	info := st.CachedInfo()
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	for {
		nctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		m, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		if err != nil {
			return fmt.Errorf("read %s: %w", info.Config.Name, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		if err := fn(m, meta.Sequence.Stream); err != nil {
			return err
		}
		if meta.Sequence.Stream >= info.State.LastSeq {
			return nil
		}
	}
}

// resultOf names a result message's result and its revision: a window
// pane is a revision of its window's result, key and bounds; any other
// record is its own result, named by its ID without the pipeline's prefix.
// end is a pane's window end, zero for any other record.
func resultOf(data []byte, h map[string][]string, prefix string) (id string, rev revision, end time.Time) {
	var compact bytespkg.Buffer
	if json.Compact(&compact, data) != nil {
		compact.Reset()
		compact.Write(data)
	}
	rev = revision{Value: compact.Bytes()}
	if p, err := window.DecodePane(data); err == nil && !p.Window.End.IsZero() {
		// A pane's final flag says how far the watermark had gone when it
		// fired — past the allowed lateness or not — which depends on how
		// the input was cut into steps; what the pane says does not. It is
		// left out of the comparison.
		p.Info.Final = false
		if b, err := p.Encode(); err == nil {
			rev.Value = b
		}
		rev.Timing, rev.Index = p.Info.Timing.String(), p.Info.Index
		return p.Key + " " + p.Window.String(), rev, p.Window.End
	}
	if id := messageID(h); id != "" {
		return strings.TrimPrefix(id, prefix), rev, time.Time{}
	}
	return string(rev.Value), rev, time.Time{}
}

// messageID is a result message's ID: what Nats-Msg-Id would have been
// on a transactional edge (Weir-Result-Id), else Nats-Msg-Id. Both start
// with the generation's pipeline and edge.
func messageID(h map[string][]string) string {
	for _, name := range []string{edge.HeaderResultID, jetstream.MsgIDHeader} {
		if vs := h[name]; len(vs) > 0 && vs[0] != "" {
			return vs[0]
		}
	}
	return ""
}

// difference is one result whose revisions differ.
type difference struct {
	Result string `json:"result"`
	// Kind is "value" (revision Revision differs), "extra" (B has
	// revisions A lacks, from Revision on) or "missing" (A has revisions
	// B lacks).
	Kind     string    `json:"kind"`
	Revision int       `json:"revision"`
	A        *revision `json:"a,omitempty"`
	B        *revision `json:"b,omitempty"`
}

// edgeComparison is the comparison of one result edge.
type edgeComparison struct {
	Edge       string       `json:"edge"`
	Results    int          `json:"results"`
	Equal      int          `json:"equal"`
	RevisionsA int          `json:"revisions_a"`
	RevisionsB int          `json:"revisions_b"`
	Differ     []difference `json:"differ,omitempty"`
	OnlyA      []string     `json:"only_a,omitempty"`
	OnlyB      []string     `json:"only_b,omitempty"`
}

// comparison is weir compare's report.
type comparison struct {
	A     string           `json:"a"`
	B     string           `json:"b"`
	Edges []edgeComparison `json:"edges"`
}

func (c comparison) equal() bool {
	for _, e := range c.Edges {
		if len(e.Differ)+len(e.OnlyA)+len(e.OnlyB) > 0 {
			return false
		}
	}
	return true
}

// compareEdge compares the revisions of every result of one edge.
func compareEdge(name string, a, b map[string][]revision) edgeComparison {
	e := edgeComparison{Edge: name}
	ids := map[string]bool{}
	for id := range a {
		ids[id] = true
	}
	for id := range b {
		ids[id] = true
	}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		ra, inA := a[id]
		rb, inB := b[id]
		e.RevisionsA += len(ra)
		e.RevisionsB += len(rb)
		switch {
		case !inB:
			e.OnlyA = append(e.OnlyA, id)
			continue
		case !inA:
			e.OnlyB = append(e.OnlyB, id)
			continue
		}
		e.Results++
		if d, ok := firstDifference(id, ra, rb); ok {
			e.Differ = append(e.Differ, d)
		} else {
			e.Equal++
		}
	}
	e.Results += len(e.OnlyA) + len(e.OnlyB)
	return e
}

func firstDifference(id string, a, b []revision) (difference, bool) {
	for i := range min(len(a), len(b)) {
		if !bytespkg.Equal(a[i].Value, b[i].Value) {
			return difference{Result: id, Kind: "value", Revision: i + 1, A: &a[i], B: &b[i]}, true
		}
	}
	switch {
	case len(b) > len(a):
		return difference{Result: id, Kind: "extra", Revision: len(a) + 1, B: &b[len(a)]}, true
	case len(a) > len(b):
		return difference{Result: id, Kind: "missing", Revision: len(b) + 1, A: &a[len(b)]}, true
	}
	return difference{}, false
}

// shown is how many results of each kind of difference the words list.
const shown = 20

func (c comparison) print(w io.Writer) {
	for _, e := range c.Edges {
		fmt.Fprintf(w, "edge %s: %d results (%d revisions in %s, %d in %s): %d equal revision by revision, %d differ, %d only in %s, %d only in %s\n",
			e.Edge, e.Results, e.RevisionsA, c.A, e.RevisionsB, c.B, e.Equal, len(e.Differ), len(e.OnlyA), c.A, len(e.OnlyB), c.B)
		for i, d := range e.Differ {
			if i == shown {
				fmt.Fprintf(w, "  … and %d more results that differ (-json lists all)\n", len(e.Differ)-shown)
				break
			}
			switch d.Kind {
			case "value":
				fmt.Fprintf(w, "  %s: revision %d differs: %s has %s %s; %s has %s %s\n", d.Result, d.Revision, c.A, describe(d.A), d.A.Value, c.B, describe(d.B), d.B.Value)
			case "extra":
				fmt.Fprintf(w, "  %s: %s has more revisions, from revision %d, %s: %s\n", d.Result, c.B, d.Revision, describe(d.B), d.B.Value)
			case "missing":
				fmt.Fprintf(w, "  %s: %s lacks revisions, from revision %d, %s: %s\n", d.Result, c.B, d.Revision, describe(d.A), d.A.Value)
			}
		}
		for _, only := range []struct {
			ids []string
			in  string
		}{{e.OnlyA, c.A}, {e.OnlyB, c.B}} {
			for i, id := range only.ids {
				if i == shown {
					fmt.Fprintf(w, "  … and %d more results only in %s (-json lists all)\n", len(only.ids)-shown, only.in)
					break
				}
				fmt.Fprintf(w, "  %s: only in %s\n", id, only.in)
			}
		}
	}
	if c.equal() {
		fmt.Fprintf(w, "%s and %s are equal\n", c.A, c.B)
	}
}

// describe names a revision: a pane's timing and firing, or a record.
func describe(r *revision) string {
	if r.Timing == "" {
		return "a record"
	}
	t := strings.ToLower(strings.ReplaceAll(r.Timing, "_", "-"))
	article := "a"
	if strings.HasPrefix(t, "early") || strings.HasPrefix(t, "on") {
		article = "an"
	}
	return fmt.Sprintf("%s %s pane (firing %d)", article, t, r.Index)
}
