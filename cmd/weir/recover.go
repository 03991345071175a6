package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/edge"
)

// recoverSnapshots is how many recent checkpoints `weir recover` weighs.
const recoverSnapshots = 10

// recoverCmd is `weir recover`: when retention has removed records a
// pipeline had not read, it shows what was lost and what can be restored,
// and carries out the choice an operator makes — restart from a snapshot
// whose positions the streams still hold, or declare the loss — recording
// who chose it and when in the audit stream.
func recoverCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, srv, pipeline := ctlFlags("weir recover", getenv)
	var savepoint, reason, through, stream string
	var ckpt int64
	var declare bool
	contract := newContractFlag(fs, pipeline, contractUsage)
	fs.Int64(&ckpt, "from-checkpoint", "WEIR_FROM_CHECKPOINT", 0, "choice 1: restart the whole pipeline from this completed checkpoint")
	fs.String(&savepoint, "from-savepoint", "WEIR_FROM_SAVEPOINT", "", "choice 1: restart the whole pipeline from this savepoint")
	fs.Bool(&declare, "declare-loss", "WEIR_DECLARE_LOSS", false, "choice 2: accept the removed records as lost; the refused instances then start past them")
	fs.String(&stream, "stream", "WEIR_STREAM", "", "declare-loss: the stream (default: every stream a refused instance names)")
	fs.String(&through, "through", "WEIR_THROUGH", "first", "declare-loss: the last sequence accepted as lost: 'first' (the one before the stream's first, now), 'last' (the stream's last: also what retention removes before the instances restart), or a sequence")
	fs.String(&reason, "reason", "WEIR_REASON", "", "why: recorded with the choice (required for a choice)")
	actor := actorFlag(fs)
	c, err := contract.parse(args, stdout, stderr)
	if err != nil {
		return err
	}
	choices := 0
	for _, on := range []bool{ckpt > 0, savepoint != "", declare} {
		if on {
			choices++
		}
	}
	if choices > 1 {
		return fmt.Errorf("weir recover: choose one of -from-checkpoint, -from-savepoint and -declare-loss")
	}
	if choices == 1 && strings.TrimSpace(reason) == "" {
		return fmt.Errorf("weir recover: say why with -reason: the audit stream records it with the choice")
	}
	nc, js, err := srv.connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	st, err := checkpoint.Existing(ctx, js, c.Pipeline)
	if err != nil {
		return err
	}
	reports, err := st.TrimmedReports(ctx)
	if err != nil {
		return err
	}
	switch {
	case declare:
		return declareLoss(ctx, js, c, reports, stream, through, reason, *actor, stdout)
	case ckpt > 0 || savepoint != "":
		return restartFrom(ctx, js, st, c, uint64(ckpt), savepoint, reason, *actor, stdout)
	}
	return printRecovery(ctx, st, c, reports, stdout)
}

// printRecovery shows the refused instances, each snapshot with whether
// the streams still hold what restoring it needs, and the choices.
func printRecovery(ctx context.Context, st *checkpoint.Store, c *contracts.Contract, reports map[string]checkpoint.TrimmedReport, w io.Writer) error {
	if len(reports) == 0 {
		fmt.Fprintf(w, "pipeline %s: no instance refuses to start for records retention removed\n", c.Pipeline)
	} else {
		fmt.Fprintf(w, "pipeline %s: %d instance(s) refuse to start: retention removed records they had not read\n\n", c.Pipeline, len(reports))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "INSTANCE\tINPUT\tSTREAM\tPARTITION\tCOMMITTED\tFIRST HELD\tRECORDS LOST\tREFUSED AT")
		for _, key := range slices.Sorted(maps.Keys(reports)) {
			r := reports[key]
			for _, t := range r.Inputs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", key, t.Input, t.Stream, t.Partition, t.Committed, t.First, lostOf(t), r.At.Local().Format(time.RFC3339))
			}
		}
		tw.Flush()
	}
	sns, err := st.Snapshots(ctx, recoverSnapshots)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nsnapshots, newest first:\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SNAPSHOT\tCOMPLETED\tINPUTS")
	var usable []checkpoint.Snapshot
	for _, sn := range sns {
		gaps, unknown, err := st.Gaps(ctx, sn)
		if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
			return err
		}
		verdict := "held: a restore reads on from its positions"
		switch {
		case err != nil:
			// A running pipeline collects old checkpoints while this
			// lists them: the record said complete, its manifest is gone.
			verdict = "gone: " + err.Error() + " (collected since the list was read)"
		case len(gaps) > 0:
			g := gaps[0]
			verdict = fmt.Sprintf("trimmed: %s %s needs %s from %d, which begins at %d", g.Instance, g.Input, g.Stream, g.Needs, g.First)
			if len(gaps) > 1 {
				verdict += fmt.Sprintf(" (and %d more inputs)", len(gaps)-1)
			}
		case len(unknown) > 0:
			verdict = "unknown: taken by a build that did not record positions (" + strings.Join(unknown, ", ") + ")"
		default:
			usable = append(usable, sn)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", sn, sn.Completed.Local().Format(time.RFC3339), verdict)
	}
	tw.Flush()
	if len(reports) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nchoose one, with -reason (the audit stream records who chose it and when):\n")
	if len(usable) > 0 {
		sn := usable[0]
		flag := fmt.Sprintf("-from-checkpoint %d", sn.Checkpoint)
		if sn.Savepoint != "" {
			flag = "-from-savepoint " + sn.Savepoint
		}
		fmt.Fprintf(w, "  weir recover -pipeline %s %s -reason TEXT\n      restart the whole pipeline from %s, whose positions are still held: nothing is lost, and everything after it is read again\n", c.Pipeline, flag, sn)
	} else {
		fmt.Fprintf(w, "  (no snapshot's positions are all still held: a restore cannot avoid the loss)\n")
	}
	fmt.Fprintf(w, "  weir recover -pipeline %s -declare-loss -reason TEXT\n      accept the removed records as lost: the refused instances start at what the streams still hold\n", c.Pipeline)
	return nil
}

func lostOf(t edge.Trimmed) string {
	if t.Exact {
		return strconv.FormatUint(t.Removed, 10)
	}
	return "up to " + strconv.FormatUint(t.Removed, 10)
}

// declareLoss records a declared data loss for each stream a refused
// instance names (or the one given): from the first sequence any refused
// input still needed through the -through sequence, which must cover
// every refused input's gap.
func declareLoss(ctx context.Context, js jetstream.JetStream, c *contracts.Contract, reports map[string]checkpoint.TrimmedReport, only, through, reason, actor string, w io.Writer) error {
	type gap struct {
		from, to  uint64 // the sequences the refused inputs lost
		lost      uint64
		instances []string
	}
	streams := map[string]*gap{}
	for _, key := range slices.Sorted(maps.Keys(reports)) {
		for _, t := range reports[key].Inputs {
			if only != "" && t.Stream != only {
				continue
			}
			g := streams[t.Stream]
			if g == nil {
				g = &gap{from: t.Known() + 1}
				streams[t.Stream] = g
			}
			g.from, g.to = min(g.from, t.Known()+1), max(g.to, t.First-1)
			g.lost += t.Removed
			g.instances = append(g.instances, key+" "+t.Input)
		}
	}
	if only != "" && streams[only] == nil {
		streams[only] = &gap{from: 1}
	}
	if len(streams) == 0 {
		return fmt.Errorf("weir recover: no instance of pipeline %s refuses to start for records retention removed: there is no loss to declare (name one with -stream)", c.Pipeline)
	}
	for _, name := range slices.Sorted(maps.Keys(streams)) {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("weir recover: stream %s: %w", name, err)
		}
		state := s.CachedInfo().State
		if state.FirstSeq == 0 || state.LastSeq == 0 {
			return fmt.Errorf("weir recover: stream %s has never held a message: it lost none to declare", name)
		}
		var seq uint64
		switch through {
		case "first":
			seq = state.FirstSeq - 1
		case "last":
			seq = state.LastSeq
		default:
			if seq, err = strconv.ParseUint(through, 10, 64); err != nil || seq > state.LastSeq {
				return fmt.Errorf("weir recover: -through %q: want first, last or a sequence of stream %s (its last is %d)", through, name, state.LastSeq)
			}
		}
		g := streams[name]
		if seq < g.to {
			return fmt.Errorf("weir recover: declaring stream %s lost through %d does not cover what the refused inputs lost, through %d; give -through %d or more", name, seq, g.to, g.to)
		}
		if g.from > seq {
			g.from = seq
		}
		rec, err := audit.DeclareLoss(ctx, js, c.Pipeline, audit.Declaration{Stream: name, From: g.from, Through: seq, Record: audit.Record{
			Actor: actor, Reason: reason,
			Detail: map[string]any{"records_lost_at_most": g.lost, "inputs": g.instances, "stream_first": state.FirstSeq, "stream_last": state.LastSeq}}})
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "declared lost: stream %s sequences %d through %d, by %s (audit record %d); up to %d records of %s\n",
			name, g.from, seq, actor, rec.Seq, g.lost, strings.Join(g.instances, ", "))
	}
	fmt.Fprintf(w, "start the refused instances again: each starts at what its stream still holds\n")
	return nil
}

// restartFrom restarts the pipeline from a snapshot whose positions the
// streams still hold, and records the choice.
func restartFrom(ctx context.Context, js jetstream.JetStream, st *checkpoint.Store, c *contracts.Contract, ckpt uint64, savepoint, reason, actor string, w io.Writer) error {
	sn, err := st.SnapshotOf(ctx, ckpt, savepoint)
	if err != nil {
		return err
	}
	gaps, unknown, err := st.Gaps(ctx, sn)
	if err != nil {
		return err
	}
	if len(gaps) > 0 {
		var lines []string
		for _, g := range gaps {
			lines = append(lines, fmt.Sprintf("%s %s needs %s from %d, which begins at %d", g.Instance, g.Input, g.Stream, g.Needs, g.First))
		}
		return fmt.Errorf("weir recover: %s cannot be restored without loss: %s; choose another snapshot (weir recover lists them) or declare the loss", sn, strings.Join(lines, "; "))
	}
	if len(unknown) > 0 {
		fmt.Fprintf(w, "warning: %s was taken by a build that did not record positions (%s): its instances check their streams when they start\n", sn, strings.Join(unknown, ", "))
	}
	prev := "no assignment"
	if a, _, err := st.Assignment(ctx); err == nil {
		prev = fmt.Sprintf("assignment %d from checkpoint %d", a.Version, a.Checkpoint)
	} else if !errors.Is(err, checkpoint.ErrNotFound) {
		return err
	}
	if l, _, err := st.Latest(ctx); err == nil {
		prev += fmt.Sprintf(", latest checkpoint %d", l.Checkpoint)
	}
	a, err := checkpoint.Restart(ctx, js, c, sn)
	if err != nil {
		return err
	}
	n, err := audit.Append(ctx, js, c.Pipeline, audit.Record{Actor: actor, Action: audit.ActionRestore, Target: c.Pipeline,
		From: prev, To: sn.String(), Reason: reason, Detail: map[string]any{"assignment": a.Version, "checkpoint": sn.Checkpoint}})
	if err != nil {
		return fmt.Errorf("weir recover: the pipeline restarts from %s (assignment %d), but recording it failed: %w", sn, a.Version, err)
	}
	printAssignment(w, c.Pipeline, a, func(op string) int {
		o, _ := c.Operator(op)
		if e, ok := c.Edge(o.Input); ok {
			return e.Partitions
		}
		return c.Ingress.Partitions
	})
	fmt.Fprintf(w, "recorded by %s (audit record %d): running instances restart from %s now; start stopped ones again\n", actor, n, sn)
	return nil
}
