package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/status"
)

// statusCheckpoints is how many checkpoint records `weir status` shows.
const statusCheckpoints = 5

// clearScreen moves the cursor home and clears the terminal.
const clearScreen = "\x1b[H\x1b[2J"

// statusCmd is `weir status`: the pipeline as it runs, once or refreshed.
func statusCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, srv, pipeline := ctlFlags("weir status", getenv)
	contract, watch := newContractFlag(fs, pipeline, contractUsage), new(time.Duration)
	fs.Duration(watch, "watch", "WEIR_WATCH", 0, "refresh at this interval until interrupted (0: print once)")
	c, err := contract.parse(args, stdout, stderr)
	if err != nil {
		return err
	}
	nc, js, err := srv.connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	if *watch <= 0 {
		s, err := status.Gather(ctx, nc, js, c)
		if err != nil {
			return err
		}
		printStatus(stdout, s)
		return nil
	}
	tick := time.NewTicker(*watch)
	defer tick.Stop()
	for {
		var buf strings.Builder
		buf.WriteString(clearScreen)
		gctx, cancel := context.WithTimeout(ctx, max(*watch, 5*time.Second))
		s, err := status.Gather(gctx, nc, js, c)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			fmt.Fprintf(&buf, "weir status: pipeline %s: %v\n", c.Pipeline, err)
		default:
			printStatus(&buf, s)
		}
		fmt.Fprintf(&buf, "\nrefreshing every %s; Ctrl-C to stop\n", *watch)
		if _, err := io.WriteString(stdout, buf.String()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// statusContract finds the contract: a file, a shipped contract's name, or
// by default the shipped contract of the pipeline.
func statusContract(name, pipeline string, pipelineSet bool) (*contracts.Contract, error) {
	if name == "" {
		for _, n := range contracts.ShippedNames() {
			if c, err := contracts.Shipped(n); err == nil && c.Pipeline == pipeline {
				return c, nil
			}
		}
		return nil, fmt.Errorf("no shipped contract is of pipeline %q: name its contract with -contract FILE", pipeline)
	}
	var c *contracts.Contract
	var err error
	if _, statErr := os.Stat(name); statErr == nil {
		c, err = contracts.Load(name)
	} else {
		c, err = contracts.Shipped(name)
	}
	if err != nil {
		return nil, err
	}
	if pipelineSet && c.Pipeline != pipeline {
		return nil, fmt.Errorf("contract %s is of pipeline %q, not %q", c.File, c.Pipeline, pipeline)
	}
	return c, nil
}

// printStatus prints a pipeline's status: a header with the coordinator
// and the latest checkpoint, then tables of the instances, their inputs,
// the edges and the last checkpoints.
func printStatus(w io.Writer, s status.Status) {
	now := s.Gathered
	fmt.Fprintf(w, "pipeline %s   contract %s (%.12s)   %s\n", s.Pipeline, s.Contract, s.Fingerprint, s.Gathered.Local().Format("2006-01-02 15:04:05"))
	var cos []string
	for _, co := range s.Coordinators {
		if co.Leader {
			cos = append(cos, co.Holder+" (leader)")
		} else {
			cos = append(cos, co.Holder+" (standby)")
		}
	}
	switch {
	case len(cos) == 0 && s.Leader != "":
		cos = []string{s.Leader + " (leader, not answering discovery)"}
	case len(cos) == 0:
		cos = []string{"none running"}
	}
	fmt.Fprintf(w, "coordinator %s   dead letters %d   side output %d\n", strings.Join(cos, ", "), s.DeadLetters, s.SideOutputs)
	fmt.Fprintln(w, checkpointLine(s, now))
	if b := s.Bottleneck; b != nil {
		fmt.Fprintf(w, "bottleneck %s\n", b.Summary)
	}
	for _, h := range s.HotKeys {
		fmt.Fprintf(w, "hot key    %s\n", h)
	}

	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATOR\tINSTANCE\tSTATE\tWATERMARK\tBEHIND\tIN\tOUT\tLAG\tBUSY/WAIT\tPAUSED\tSTATE KEYS\tDEAD/SIDE")
	for _, o := range s.Operators {
		if len(o.Instances) == 0 {
			fmt.Fprintf(tw, "%s\t-\tnot running\t-\t\t\t\t\t\t\t\t%d/%d\n", o.ID, o.DeadLetters, o.SideOutputs)
		}
		for _, in := range o.Instances {
			paused := "-"
			if n := len(in.Stats.Paused); n > 0 {
				paused = fmt.Sprintf("%d/%d", n, len(in.Inputs))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%.0f%%/%.0f%%\t%s\t%s\t%d/%d\n", o.ID, in.Instance, instanceState(in),
				clock(in.Stats.Watermark), behind(now, in.Stats.Watermark), in.Stats.In, in.Stats.Out, in.Lag,
				100*in.Stats.Busy, 100*in.Stats.Backpressured, paused,
				stateKeys(in.Stats.StateKeys), in.Stats.DeadLettered, in.Stats.SideOutput)
		}
	}
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INPUT\tINSTANCE\tSUBJECT\tWATERMARK\tPENDING\tUNACKED\tLAG\tDELIVERED\tPAUSED")
	for _, o := range s.Operators {
		for _, in := range o.Instances {
			for _, p := range in.Inputs {
				paused := ""
				if p.Paused {
					paused = "paused"
				}
				if p.Error != "" {
					paused = p.Error
				}
				fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", p.Name, o.ID, in.Instance, p.Subject,
					clock(p.Watermark), p.Pending, p.AckPending, p.Lag, p.Delivered, paused)
			}
		}
	}
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EDGE\tSTREAM\tFROM\tTO\tMESSAGES\tBYTES\tPER PARTITION\tLAG")
	for _, e := range s.Edges {
		from, to := cmp.Or(e.From, "-"), cmp.Or(strings.Join(e.To, ","), "-")
		parts := make([]string, len(e.Partitions))
		for i, p := range e.Partitions {
			parts[i] = strconv.FormatUint(p.Messages, 10)
		}
		size := bytes(int64(e.Bytes))
		if e.Error != "" {
			size = e.Error
		}
		stream := e.Stream
		if len(e.Streams) > 0 {
			stream = fmt.Sprintf("%s_0…%d", e.Stream, len(e.Streams)-1)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\n", e.Name, stream, from, to, e.Messages, size, strings.Join(parts, " "), e.Lag)
	}
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECKPOINT\tSTATUS\tTRIGGERED\tTOOK\tALIGNMENT\tFULL\tINCREMENTAL\tACKS\tSAVEPOINT\tFAILURE")
	for _, c := range s.Checkpoints[:min(len(s.Checkpoints), statusCheckpoints)] {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", c.ID, c.Status, c.Triggered.Local().Format("15:04:05.000"),
			ms(c.Took), ms(c.Alignment), bytes(c.FullBytes), bytes(c.NewBytes), c.Acks, c.Expected, c.Savepoint, c.Reason)
	}
	tw.Flush()
	for _, p := range s.Problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
}

// checkpointLine sums up the latest completed checkpoint and the last one.
func checkpointLine(s status.Status, now time.Time) string {
	line := "checkpoint: none completed"
	if l := s.Latest; l != nil {
		line = fmt.Sprintf("checkpoint: #%d completed %s (%s ago)", l.ID, l.Completed.Local().Format("15:04:05.000"), ms(now.Sub(l.Completed)))
		for _, c := range s.Checkpoints {
			if c.ID == l.ID {
				line += fmt.Sprintf(", took %s, %s (%s new)", ms(c.Took), bytes(c.FullBytes), bytes(c.NewBytes))
			}
		}
	}
	if len(s.Checkpoints) > 0 && (s.Latest == nil || s.Checkpoints[0].ID != s.Latest.ID) {
		c := s.Checkpoints[0]
		line += fmt.Sprintf("; last #%d %s", c.ID, c.Status)
		if c.Reason != "" {
			line += ": " + c.Reason
		}
	}
	return line
}

func instanceState(in status.Instance) string {
	switch {
	case !in.Responding:
		return "not responding"
	case !in.Stats.Ready:
		return "recovering"
	case in.Stats.HeldEpochs > 0:
		// A transactional sink's results waiting for their checkpoints.
		return fmt.Sprintf("ready, holding %d epochs", in.Stats.HeldEpochs)
	}
	return "ready"
}

// clock formats an event time; "-" for none.
func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05.000")
}

// behind is how far a watermark trails the clock.
func behind(now, wm time.Time) string {
	if wm.IsZero() {
		return ""
	}
	return ms(now.Sub(wm))
}

func ms(d time.Duration) string {
	if d >= time.Minute {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

func stateKeys(keys map[string]int64) string {
	if len(keys) == 0 {
		return "-"
	}
	var out []string
	for f, n := range keys {
		out = append(out, f+"="+strconv.FormatInt(n, 10))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}
