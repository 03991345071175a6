package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/status"
	"github.com/weirflow/weir/pkg/stream"
)

// shadowCmd is `weir shadow`: a continuous shadow deployment. The pipeline
// — or a changed build of it, with -contract — reads the retained ingress
// from -from on and keeps reading the live records as they arrive, into
// result generation <pipeline>-<generation>, with its own streams, buckets
// and state. Unlike a replay it has no end: its windows close as the live
// ones do, when the watermark passes them, so `weir compare` can set it
// beside the live generation at any source coordinate both have passed,
// and `weir cutover` can switch readers to a generation that goes on.
//
// Its state lives in -data: run again with the same -data and -generation,
// it resumes where it stopped. With -caught-up it stops once it has read
// the ingress to its head and stored every result; otherwise it runs until
// interrupted.
func shadowCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, srv, pipeline := ctlFlags("weir shadow", getenv)
	srv.operatorFlags(fs)
	var from, gen, data, reason string
	var caughtUp bool
	contract := newContractFlag(fs, pipeline, "the contract to run: a file or a shipped contract's name (default: the shipped contract of -pipeline); a changed one runs the change")
	fs.String(&from, "from", "WEIR_SHADOW_FROM", "", "the first ingress record: a stream sequence, or an RFC 3339 time (the first record stored at or after it); ignored when resuming")
	fs.String(&gen, "generation", "WEIR_SHADOW_GENERATION", "", "the result generation's name (required): results go to pipeline <pipeline>-<generation>")
	fs.String(&data, "data", "WEIR_DATA_DIR", "", "the shadow's state directory (required): kept, so that the shadow resumes from it")
	fs.Bool(&caughtUp, "caught-up", "WEIR_SHADOW_CAUGHT_UP", false, "stop once the ingress is read to its head and every result is stored (default: run until interrupted)")
	fs.String(&reason, "reason", "WEIR_REASON", "", "why, for the audit stream")
	actor := actorFlag(fs)
	c, err := contract.parse(args, stdout, stderr)
	if err != nil {
		return err
	}
	if gen == "" || data == "" {
		return fmt.Errorf("weir shadow: -generation and -data are required: a shadow runs on, and resumes from its state")
	}
	shadow, err := generationOf(c, gen)
	if err != nil {
		return fmt.Errorf("weir shadow: %w", err)
	}
	entries, err := os.ReadDir(data)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("weir shadow: -data %s: %w", data, err)
	}
	resume := len(entries) > 0
	if !resume && from == "" {
		return fmt.Errorf("weir shadow: -from is required to start a shadow (-data %s holds none to resume)", data)
	}
	nc, js, st, err := openIngress(ctx, srv, c, shadow, !resume)
	if err != nil {
		return fmt.Errorf("weir shadow: %w", err)
	}
	defer nc.Close()
	lo := st.CachedInfo().State.FirstSeq
	if !resume {
		if lo, err = replayBound(ctx, st, from, false); err != nil {
			return err
		}
		if first := st.CachedInfo().State.FirstSeq; lo < first {
			return fmt.Errorf("weir shadow: -from is sequence %d, and stream %s now begins at %d: retention removed the records before; start from %d or later", lo, c.Ingress.Stream, first, first)
		}
	}
	r := &stream.Replay{Generation: gen, From: lo}
	if resume {
		// The instances read on from their committed positions, which a
		// From of 1 leaves as they are: the reader refuses, naming the
		// records lost, if retention removed any they had not read.
		r.From = 1
	}
	factories := shippedFactories(c.Pipeline)
	if factories == nil {
		fmt.Fprintf(stdout, "pipeline %s is not one weir ships: run each of its services with\n  -replay-generation %s -replay-from %d -data <its own directory>\n(no -replay-until: the shadow reads on), and its results go to pipeline %s\n", c.Pipeline, gen, r.From, shadow)
		return nil
	}
	where := fmt.Sprintf("from %s sequence %d", c.Ingress.Stream, r.From)
	if resume {
		where = "from its committed positions"
	} else if _, err := audit.Append(ctx, js, c.Pipeline, audit.Record{Actor: *actor, Action: audit.ActionShadow, Target: shadow,
		From: fmt.Sprintf("%s sequence %d on", c.Ingress.Stream, lo), To: "pipeline " + shadow, Reason: reason,
		Detail: map[string]any{"contract": c.File}}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "shadow %s of pipeline %s runs %s, state in %s\n", shadow, c.Pipeline, where, data)
	rts, g, sc, err := runGeneration(ctx, c, factories, srv, data, r, shadow)
	if err != nil {
		return fmt.Errorf("weir shadow: %w", err)
	}
	s, err := awaitCaughtUp(ctx, nc, js, sc, rts, g, func(s status.Status) bool {
		fmt.Fprintf(stdout, "caught up with %s's ingress\n", c.Pipeline)
		return caughtUp
	})
	if rerr := g.stop(); err == nil && !errors.Is(rerr, context.Canceled) {
		err = rerr
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = nil // interrupted: the shadow stops, its state kept
	}
	if err != nil {
		return fmt.Errorf("weir shadow: %w", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATOR\tIN\tOUT\tDEAD LETTERS\tSIDE OUTPUT\tWATERMARK")
	for i, rt := range rts {
		st := rt.Stats()
		var dl, so int64
		if i < len(s.Operators) {
			dl, so = s.Operators[i].DeadLetters, s.Operators[i].SideOutputs
		}
		wm := "-"
		if !st.Watermark.IsZero() {
			wm = st.Watermark.UTC().Format(time.RFC3339Nano)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", st.Operator, st.In, st.Out, dl, so, wm)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "shadow %s stopped, its state kept in %s: run again with the same -generation and -data to resume; compare with weir compare -pipeline %s -with %s -until <a watermark both passed>\n",
		shadow, data, c.Pipeline, shadow)
	return nil
}

// newGeneration checks that result generation name is new: no checkpoint
// log, and no stream where one of its edges would go (stream names fold
// '-' into '_', so another pipeline's could be there).
func newGeneration(ctx context.Context, js jetstream.JetStream, c *contracts.Contract, name string) error {
	if _, err := checkpoint.Existing(ctx, js, name); !errors.Is(err, checkpoint.ErrNotFound) {
		return fmt.Errorf("generation %s exists already: name a new one with -generation", name)
	}
	for _, e := range c.Edges {
		if _, err := js.Stream(ctx, edge.StreamName(name, e.Name)); !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("stream %s, where generation %s's edge %s would go, exists already: name another generation with -generation", edge.StreamName(name, e.Name), name, e.Name)
		}
	}
	return nil
}

// awaitCaughtUp runs until ctx ends or the group fails, calling caught
// once each time every operator has read all its input — the live
// ingress's head included — and stored every result, with nothing moving
// for three looks in a row (awaitQuiet); it returns when caught says so.
func awaitCaughtUp(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, c *contracts.Contract, rts []*stream.Runtime, g *group, caught func(status.Status) bool) (status.Status, error) {
	read := func(s status.Status) (bool, string) {
		if len(s.Operators) < len(rts) {
			return false, "not every operator reports"
		}
		for i, rt := range rts {
			if !rt.Ready() {
				return false, s.Operators[i].ID + " is starting"
			}
			if s.Operators[i].Lag != 0 {
				return false, fmt.Sprintf("%s lags %d", s.Operators[i].ID, s.Operators[i].Lag)
			}
		}
		return true, ""
	}
	return awaitQuiet(ctx, nc, js, c, rts, g, "shadow", 0, read, caught)
}
