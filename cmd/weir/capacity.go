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
	"github.com/weirflow/weir/internal/capacity"
	"github.com/weirflow/weir/internal/cli"
	"github.com/weirflow/weir/internal/status"
)

const capacityUsage = `usage: weir capacity [flags]

The capacity, replay and recovery arithmetic of a pipeline: whether it can
catch up and how long that takes, the source retention a recovery needs,
the broker bytes that retention costs, checkpoint upload lower bounds, and
the replay a recovery starts with (docs/OPERATIONS.md, "Capacity").

Live, it measures a running pipeline over -sample: the arrival rate and
stored record size of its ingress stream (and its age, byte and message
limits), the rate and backlog of the operators reading the ingress, and
the state, upload size and bandwidth of its latest checkpoint. Every
figure can be given by a flag instead, and -arrival-rate without -nats
works from flags alone.
`

// capacityCmd is `weir capacity`.
func capacityCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, srv, pipeline := ctlFlags("weir capacity", getenv)
	var sample time.Duration
	var asJSON bool
	in := capacity.Inputs{}
	contract := newContractFlag(fs, pipeline, contractUsage)
	fs.Duration(&sample, "sample", "WEIR_CAPACITY_SAMPLE", 5*time.Second, "how long to measure a running pipeline")
	fs.Float64(&in.ArrivalRate, "arrival-rate", "WEIR_CAPACITY_ARRIVAL_RATE", 0, "peak arrival rate, records/s (r_in)")
	fs.Float64(&in.RecordBytes, "record-bytes", "WEIR_CAPACITY_RECORD_BYTES", 0, "stored bytes per record, broker overhead included")
	fs.Float64(&in.ProcessRate, "process-rate", "WEIR_CAPACITY_PROCESS_RATE", 0, "sustainable processing rate with checkpoints and sinks on, records/s (r_proc; weir bench nexmark measures it)")
	fs.Float64(&in.Backlog, "backlog", "WEIR_CAPACITY_BACKLOG", 0, "records not processed yet (L)")
	fs.Float64(&in.StateBytes, "state-bytes", "WEIR_CAPACITY_STATE_BYTES", 0, "durable state bytes (S)")
	fs.Float64(&in.ChangedBytes, "changed-bytes", "WEIR_CAPACITY_CHANGED_BYTES", 0, "bytes a checkpoint uploads (changed and newly referenced)")
	fs.Float64(&in.Bandwidth, "checkpoint-bandwidth", "WEIR_CAPACITY_CHECKPOINT_BANDWIDTH", 0, "checkpoint storage bandwidth, bytes/s")
	fs.Duration(&in.Interval, "interval", "WEIR_CAPACITY_INTERVAL", 0, "checkpoint interval (default: the contract's)")
	fs.Int(&in.Replicas, "replicas", "WEIR_CAPACITY_REPLICAS", 0, "replicas of the source stream (default: the stream's, or 1)")
	fs.Duration(&in.Retention, "retention", "WEIR_CAPACITY_RETENTION", 0, "the source's retention (default: the contract's ingress.retention)")
	fs.Duration(&in.Detection, "detection", "WEIR_CAPACITY_DETECTION", time.Minute, "how long a failure takes to notice")
	fs.Duration(&in.Repair, "repair", "WEIR_CAPACITY_REPAIR", 10*time.Minute, "how long a repair or new capacity takes")
	fs.Duration(&in.Restore, "restore", "WEIR_CAPACITY_RESTORE", time.Minute, "how long a restore from a checkpoint takes")
	fs.Duration(&in.Margin, "margin", "WEIR_CAPACITY_MARGIN", time.Hour, "retention kept beyond a recovery, for validation")
	fs.Bool(&asJSON, "json", "WEIR_CAPACITY_JSON", false, "print the inputs and figures as JSON")
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		if err == cli.ErrHelp {
			fmt.Fprint(stdout, "\n"+capacityUsage)
		}
		return err
	}
	measured := "from flags"
	live := !fs.Given("arrival-rate") || fs.Given("nats")
	if live {
		c, err := contract.load()
		if err != nil {
			return err
		}
		m, err := measure(ctx, srv, c, sample)
		if err != nil {
			return err
		}
		// Flags win over what was measured.
		keep := func(name string, p *float64, v float64) {
			if !fs.Given(name) {
				*p = v
			}
		}
		keep("arrival-rate", &in.ArrivalRate, m.ArrivalRate)
		keep("record-bytes", &in.RecordBytes, m.RecordBytes)
		keep("backlog", &in.Backlog, m.Backlog)
		keep("state-bytes", &in.StateBytes, m.StateBytes)
		keep("changed-bytes", &in.ChangedBytes, m.ChangedBytes)
		keep("checkpoint-bandwidth", &in.Bandwidth, m.Bandwidth)
		if !fs.Given("process-rate") {
			in.ProcessRate, in.ProcessRateAtLeast = m.ProcessRate, m.ProcessRateAtLeast
		}
		in.MaxAge, in.MaxBytes, in.MaxMsgs = m.MaxAge, m.MaxBytes, m.MaxMsgs
		if !fs.Given("interval") {
			in.Interval = m.Interval
		}
		if !fs.Given("replicas") {
			in.Replicas = m.Replicas
		}
		if !fs.Given("retention") {
			in.Retention = m.Retention
		}
		measured = fmt.Sprintf("pipeline %s, measured over %s", c.Pipeline, sample)
		// What the contract's capacity section declares fills in what was
		// neither given nor measured.
		declared := func(name string, p *time.Duration, v contracts.Duration) {
			if !fs.Given(name) && v.Duration > 0 {
				*p = v.Duration
			}
		}
		declared("detection", &in.Detection, c.Capacity.Detection)
		declared("repair", &in.Repair, c.Capacity.Repair)
		declared("margin", &in.Margin, c.Capacity.Margin)
		if in.ProcessRateAtLeast && c.Capacity.ProcessRate > 0 {
			in.ProcessRate, in.ProcessRateAtLeast = float64(c.Capacity.ProcessRate), false
			measured += "; processing rate as the contract declares it (the pipeline kept up)"
		}
	}
	f := capacity.Compute(in)
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Inputs  capacity.Inputs  `json:"inputs"`
			Figures capacity.Figures `json:"figures"`
		}{in, f})
	}
	printCapacity(stdout, measured, in, f)
	return nil
}

// ingressInfo is the ingress's streams as one: their messages, bytes and
// last sequences added up, and their limits too (each stream keeps its own
// share of the records), their other settings the first one's.
func ingressInfo(ctx context.Context, js jetstream.JetStream, in contracts.Ingress) (*jetstream.StreamInfo, error) {
	var all *jetstream.StreamInfo
	for _, name := range in.StreamNames() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("ingress stream %s: %w", name, err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			return nil, err
		}
		if all == nil {
			all = info
			continue
		}
		all.State.LastSeq += info.State.LastSeq
		all.State.Msgs += info.State.Msgs
		all.State.Bytes += info.State.Bytes
		all.Config.MaxBytes += max(info.Config.MaxBytes, 0)
		all.Config.MaxMsgs += max(info.Config.MaxMsgs, 0)
	}
	return all, nil
}

// measure reads a running pipeline's figures: two samples of its status
// and its ingress stream, sample apart.
func measure(ctx context.Context, srv *natsServer, c *contracts.Contract, sample time.Duration) (capacity.Inputs, error) {
	in := capacity.Inputs{Interval: c.Recovery.CheckpointInterval.D(), Retention: c.Ingress.Retention.D(), Replicas: 1}
	nc, js, err := srv.connect(ctx)
	if err != nil {
		return in, err
	}
	defer nc.Close()
	take := func() (status.Status, *jetstream.StreamInfo, time.Time, error) {
		info, err := ingressInfo(ctx, js, c.Ingress)
		if err != nil {
			return status.Status{}, nil, time.Time{}, err
		}
		at := time.Now()
		s, err := status.Gather(ctx, nc, js, c)
		return s, info, at, err
	}
	s1, i1, t1, err := take()
	if err != nil {
		return in, err
	}
	select {
	case <-ctx.Done():
		return in, ctx.Err()
	case <-time.After(sample):
	}
	s2, i2, t2, err := take()
	if err != nil {
		return in, err
	}
	dt := t2.Sub(t1).Seconds()
	in.ArrivalRate = float64(i2.State.LastSeq-i1.State.LastSeq) / dt
	if i2.State.Msgs > 0 {
		in.RecordBytes = float64(i2.State.Bytes) / float64(i2.State.Msgs)
	}
	in.Replicas = max(i2.Config.Replicas, 1)
	in.MaxAge = i2.Config.MaxAge
	in.MaxBytes, in.MaxMsgs = max(i2.Config.MaxBytes, 0), max(i2.Config.MaxMsgs, 0)

	// The operators reading the ingress: the slowest one's rate, and the
	// largest backlog. A reader that stayed caught up only shows that it
	// can go at least as fast as the input.
	first := true
	for i, op := range s2.Operators {
		if op.Input != "ingress" || i >= len(s1.Operators) {
			continue
		}
		rate := float64(op.In-s1.Operators[i].In) / dt
		if first || rate < in.ProcessRate {
			in.ProcessRate = rate
		}
		first = false
		in.Backlog = max(in.Backlog, float64(op.Lag))
		behind := float64(min(op.Lag, s1.Operators[i].Lag))
		in.ProcessRateAtLeast = in.ProcessRateAtLeast || behind <= max(in.ArrivalRate, 1)
	}
	for _, cp := range s2.Checkpoints {
		if cp.Status != "complete" {
			continue
		}
		in.StateBytes, in.ChangedBytes = float64(cp.FullBytes), float64(cp.NewBytes)
		if cp.Upload > 0 && cp.NewBytes > 0 {
			in.Bandwidth = float64(cp.NewBytes) / cp.Upload.Seconds()
		}
		break
	}
	return in, nil
}

func printCapacity(w io.Writer, measured string, in capacity.Inputs, f capacity.Figures) {
	d := capacity.Round
	or := func(v float64, format string) string {
		if v <= 0 {
			return "unknown"
		}
		return fmt.Sprintf(format, v)
	}
	fmt.Fprintf(w, "%s (a flag replaces any figure)\n", measured)
	fmt.Fprintf(w, "  arrival            %s records/s, %s each as stored, %d replica(s)\n", or(in.ArrivalRate, "%.0f"), bytesOf(in.RecordBytes), max(in.Replicas, 1))
	at := ""
	if in.ProcessRateAtLeast {
		at = "at least "
	}
	fmt.Fprintf(w, "  processing         %s%s records/s, backlog %.0f records\n", at, or(in.ProcessRate, "%.0f"), in.Backlog)
	fmt.Fprintf(w, "  state              %s, %s uploaded per checkpoint at %s/s, every %s\n", bytesOf(in.StateBytes), bytesOf(in.ChangedBytes), bytesOf(in.Bandwidth), in.Interval)
	fmt.Fprintln(w)
	switch {
	case f.Never:
		fmt.Fprintf(w, "catch-up             never: processing does not exceed arrival\n")
	case f.CatchUp < 0 && in.ProcessRateAtLeast:
		fmt.Fprintf(w, "catch-up             unknown: the pipeline kept up, so what it could sustain was not measured; give -process-rate (weir bench nexmark measures it)\n")
	case f.CatchUp < 0:
		fmt.Fprintf(w, "catch-up             unknown without a processing rate (-process-rate)\n")
	default:
		fmt.Fprintf(w, "catch-up             %s for the backlog of %.0f records\n", d(f.CatchUp), in.Backlog)
	}
	outage := in.Interval + in.Detection + in.Repair + in.Restore
	fmt.Fprintf(w, "after a failure      %.0f records wait (interval %s + detection %s + repair %s + restore %s = %s of arrivals, plus the backlog)",
		f.RecoveryBacklog, in.Interval, in.Detection, in.Repair, in.Restore, d(outage))
	if f.RecoveryCatchUp >= 0 {
		fmt.Fprintf(w, ", caught up in %s", d(f.RecoveryCatchUp))
	}
	fmt.Fprintln(w)
	switch {
	case f.RequiredRetention >= 0:
		fmt.Fprintf(w, "required retention   %s (the above, catch-up and a margin of %s); declared %s", d(f.RequiredRetention), in.Margin, in.Retention)
	case f.Never:
		fmt.Fprintf(w, "required retention   none suffices: a backlog is never caught up; declared %s", in.Retention)
	default:
		fmt.Fprintf(w, "required retention   unknown without a processing rate; declared %s", in.Retention)
	}
	if f.KeptFor > 0 && (in.MaxAge > 0 || in.MaxBytes > 0 || in.MaxMsgs > 0) {
		fmt.Fprintf(w, ", the stream's limits keep %s", d(f.KeptFor))
	}
	fmt.Fprintln(w)
	if f.BrokerBytes > 0 {
		fmt.Fprintf(w, "broker bytes         %s over the declared retention", bytesOf(f.BrokerBytes))
		if f.RequiredBrokerBytes > 0 {
			fmt.Fprintf(w, ", %s over the required", bytesOf(f.RequiredBrokerBytes))
		}
		fmt.Fprintln(w)
	}
	if f.FullUpload >= 0 {
		fmt.Fprintf(w, "checkpoint upload    at least %s full, %s incremental\n", d(f.FullUpload), d(f.IncrementalUpload))
	} else {
		fmt.Fprintf(w, "checkpoint upload    unknown without a bandwidth (-checkpoint-bandwidth)\n")
	}
	fmt.Fprintf(w, "replay at recovery   about %.0f records (an interval of arrivals plus the backlog)\n", f.Replay)
	if len(f.Problems) == 0 {
		fmt.Fprintln(w, "\nno threat to the contract in these figures")
		return
	}
	fmt.Fprintln(w)
	for _, p := range f.Problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
}

func bytesOf(v float64) string {
	if v <= 0 {
		return "unknown"
	}
	return strings.TrimSpace(bytes(int64(v)))
}
