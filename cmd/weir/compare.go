package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/cli"
	"github.com/weirflow/weir/internal/results"
)

// compareCmd is `weir compare`: two result generations of a pipeline —
// the live one and a replay, or a shadow — side by side, result by result
// and revision by revision: an extra early pane, a missing retraction or a
// different final value each show, not only different final values.
func compareCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, srv, pipeline := ctlFlags("weir compare", getenv)
	var with, only, until string
	var asJSON bool
	contract := newContractFlag(fs, pipeline, contractUsage)
	fs.String(&with, "with", "WEIR_WITH", "", "the other generation's pipeline, e.g. <pipeline>-<generation> of weir replay")
	fs.String(&only, "edge", "WEIR_EDGE", "", "compare this result edge only (default: every json edge no operator reads)")
	fs.String(&until, "until", "WEIR_UNTIL", "", "compare only windows ending at or before this event time (RFC 3339): the source coordinate both generations reached")
	fs.Bool(&asJSON, "json", "WEIR_JSON", false, "print the comparison as one JSON object")
	c, err := contract.parse(args, stdout, stderr)
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
	edges := results.Edges(c, only)
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
		report.Edges = append(report.Edges, results.CompareEdge(e, a, b))
	}
	if asJSON {
		if err := json.NewEncoder(stdout).Encode(report); err != nil {
			return err
		}
	} else {
		report.print(stdout)
	}
	if !report.equal() {
		return cli.ExitError(1)
	}
	return nil
}

// comparison is weir compare's report.
type comparison struct {
	A     string                   `json:"a"`
	B     string                   `json:"b"`
	Edges []results.EdgeComparison `json:"edges"`
}

func (c comparison) equal() bool {
	for _, e := range c.Edges {
		if len(e.Differ)+len(e.OnlyA)+len(e.OnlyB) > 0 {
			return false
		}
	}
	return true
}

// revisionsOf reads a generation's result edge: per result — a window's
// key and bounds, or a record's ID — its revisions in the order stored.
// Windows ending after limit (when set) are left out.
func revisionsOf(ctx context.Context, js jetstream.JetStream, pipeline, edgeName string, limit time.Time) (map[string][]results.Revision, error) {
	out, _, err := results.Read(ctx, js, pipeline, edgeName, limit)
	return out, err
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
func describe(r *results.Revision) string {
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
