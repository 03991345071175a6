package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/cli"
	"github.com/weirflow/weir/internal/envflag"
)

// auditCmd is `weir audit`: the pipeline's manual acts, oldest first.
func auditCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, srv, pipeline := ctlFlags("weir audit", getenv)
	var action string
	var asJSON bool
	fs.String(&action, "action", "WEIR_ACTION", "", "only this action ("+strings.Join(audit.Actions, ", ")+")")
	fs.Bool(&asJSON, "json", "WEIR_JSON", false, "print one JSON record per line")
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	nc, js, err := srv.connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	recs, err := audit.List(ctx, js, *pipeline, action)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		for _, r := range recs {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	if len(recs) == 0 {
		fmt.Fprintf(stdout, "pipeline %s: nothing audited\n", *pipeline)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tACTOR\tAS\tACTION\tTARGET\tFROM\tTO\tREASON\tDETAIL")
	for _, r := range recs {
		var detail []string
		for _, k := range slices.Sorted(maps.Keys(r.Detail)) {
			detail = append(detail, fmt.Sprintf("%s=%v", k, r.Detail[k]))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Seq, r.Time.Local().Format(time.RFC3339), r.Actor, cmp.Or(r.Identity, "-"), r.Action,
			r.Target, r.From, r.To, r.Reason, strings.Join(detail, " "))
	}
	return tw.Flush()
}

// actorFlag adds -as: who acts, as the audit stream records it.
func actorFlag(fs *envflag.Set) *string {
	actor := new(string)
	fs.String(actor, "as", "WEIR_ACTOR", audit.Actor(), "who acts, as the audit stream records it")
	return actor
}

// recordAct appends r to the pipeline's audit stream after the act is
// done; an act it cannot record fails the command, saying the act itself
// took place.
func recordAct(ctx context.Context, js jetstream.JetStream, pipeline string, r audit.Record, w io.Writer) error {
	n, err := audit.Append(ctx, js, pipeline, r)
	if err != nil {
		return fmt.Errorf("%s of %s done, but recording it in the audit stream failed: %w", r.Action, r.Target, err)
	}
	fmt.Fprintf(w, "audited: %s by %s (record %d)\n", r.Action, r.Actor, n)
	return nil
}
