package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/cli"
	"github.com/weirflow/weir/pkg/stream"
)

// connect opens a connection to url, presenting nothing, and its
// JetStream context.
func connect(url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	return (&natsServer{url: url}).connect(context.Background(), opts...)
}

func openCheckpoints(ctx context.Context, srv *natsServer, pipeline string) (*nats.Conn, *checkpoint.Store, error) {
	nc, js, err := srv.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	st, err := checkpoint.Open(ctx, js, pipeline, 0) // as deployed: never change the replicas
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	if srv.keys != "" {
		k, err := checkpoint.LoadKeys(srv.keys)
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		st.Seal(k)
	}
	return nc, st, nil
}

// checkpointCmd is `weir checkpoint list|trigger`.
func checkpointCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "trigger") {
		return cli.UsageOf("usage: weir checkpoint list|trigger [-nats URL] [-pipeline NAME]\n", args, stdout, stderr)
	}
	fs, srv, pipeline := ctlFlags("weir checkpoint "+args[0], getenv)
	actor := new(string)
	if args[0] == "trigger" {
		actor = actorFlag(fs)
	}
	if err := cli.Parse(fs, args[1:], stdout, stderr); err != nil {
		return err
	}
	nc, st, err := openCheckpoints(ctx, srv, *pipeline)
	if err != nil {
		return err
	}
	defer nc.Close()
	if args[0] == "trigger" {
		if err := requestAndPrint(nc, *pipeline, checkpoint.Request{}, stdout); err != nil {
			return err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		return recordAct(ctx, js, *pipeline, audit.Record{Actor: *actor, Action: audit.ActionCheckpoint, Target: *pipeline}, stdout)
	}
	recs, err := st.Records(ctx)
	if err != nil {
		return err
	}
	printRecords(stdout, recs)
	return nil
}

// request asks the pipeline's coordinator for a checkpoint and waits for
// its outcome.
func request(nc *nats.Conn, pipeline string, r checkpoint.Request) (checkpoint.Record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return checkpoint.Ask(ctx, nc, pipeline, r)
}

// requestAndPrint asks for a checkpoint (or savepoint), prints its record
// and fails unless it completed.
func requestAndPrint(nc *nats.Conn, pipeline string, r checkpoint.Request, stdout io.Writer) error {
	rec, err := request(nc, pipeline, r)
	if err != nil {
		return err
	}
	printRecords(stdout, []checkpoint.Record{rec})
	if rec.Status != checkpoint.Complete {
		return cli.ExitError(1)
	}
	return nil
}

// printRecords prints the checkpoint log: per checkpoint its status, start
// delay, alignment, snapshot and upload times (the slowest instance's),
// total duration, full and incremental size, and why it failed.
func printRecords(w io.Writer, recs []checkpoint.Record) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tTRIGGERED\tSTART DELAY\tALIGNMENT\tSNAPSHOT\tUPLOAD\tTOTAL\tFULL\tINCREMENTAL\tACKS\tSAVEPOINT\tFAILURE")
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	for _, r := range recs {
		full, inc := r.Sizes()
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n",
			r.Checkpoint, statusOf(r), r.Triggered.Local().Format("15:04:05.000"),
			ms(r.Max(func(a checkpoint.Ack) time.Duration { return a.StartDelay })),
			ms(r.Max(func(a checkpoint.Ack) time.Duration { return a.Alignment })),
			ms(r.Max(func(a checkpoint.Ack) time.Duration { return a.Snapshot })),
			ms(r.Max(func(a checkpoint.Ack) time.Duration { return a.Upload })),
			ms(r.Duration()), bytes(full), bytes(inc), len(r.Acks), len(r.Expected), r.Savepoint, r.Reason)
	}
	tw.Flush()
}

// statusOf is a checkpoint's status as the log shows it.
func statusOf(r checkpoint.Record) string {
	if r.Collected {
		return r.Status + " (collected)"
	}
	return r.Status
}

func bytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// savepointCmd is `weir savepoint create|list|restore`.
func savepointCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	usage := "usage: weir savepoint create NAME | list | restore NAME -data DIR  [-nats URL] [-pipeline NAME]\n"
	if len(args) == 0 || cli.WantsHelp(args[:1]) || (args[0] != "create" && args[0] != "list" && args[0] != "restore") {
		return cli.UsageOf(usage, args, stdout, stderr)
	}
	verb := args[0]
	fs, srv, pipeline := ctlFlags("weir savepoint "+verb, getenv)
	actor := new(string)
	if verb == "restore" {
		actor = actorFlag(fs)
	}
	data := new(string)
	fs.String(data, "data", "WEIR_DATA_DIR", "", "restore: the new deployment's data directory (each operator's state goes to DIR/<operator>/state)")
	if verb == "restore" {
		srv.keysFlag(fs)
	}
	var name string
	rest := args[1:]
	if verb != "list" && !cli.WantsHelp(rest) {
		if len(rest) == 0 {
			return cli.UsageOf(usage, rest, stdout, stderr)
		}
		name, rest = rest[0], rest[1:]
		if !checkpoint.ValidName(name) {
			fmt.Fprintf(stderr, "weir savepoint %s: %q is not a savepoint name: use letters, digits, '-' and '_' (no '.', '*', '>', '/' or spaces)\n", verb, name)
			return cli.ExitError(2)
		}
	}
	if err := cli.Parse(fs, rest, stdout, stderr); err != nil {
		return err
	}
	nc, st, err := openCheckpoints(ctx, srv, *pipeline)
	if err != nil {
		return err
	}
	defer nc.Close()
	switch verb {
	case "create":
		return requestAndPrint(nc, *pipeline, checkpoint.Request{Savepoint: name}, stdout)
	case "list":
		sps, err := st.Savepoints(ctx)
		if err != nil {
			return err
		}
		names := make([]string, 0, len(sps))
		for n := range sps {
			names = append(names, n)
		}
		sort.Strings(names)
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tCHECKPOINT\tTAKEN\tINSTANCES")
		for _, n := range names {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", n, sps[n].Checkpoint, sps[n].Completed.Local().Format(time.RFC3339), len(sps[n].Manifests))
		}
		return tw.Flush()
	case "restore":
		if *data == "" {
			fmt.Fprint(stderr, "weir savepoint restore: -data DIR is required\n")
			return cli.ExitError(2)
		}
		ms, err := stream.RestoreSavepoint(ctx, st, name, *data)
		var insts []string
		for _, m := range ms {
			fmt.Fprintf(stdout, "%s/%s: restored %s into %s (%s, state schema %d)\n", m.Operator, m.Instance, name, filepath.Join(*data, m.Operator), bytes(m.FullBytes), m.SchemaVersion)
			insts = append(insts, m.Operator+"/"+m.Instance)
		}
		if len(ms) > 0 {
			js, _ := jetstream.New(nc)
			rerr := recordAct(ctx, js, *pipeline, audit.Record{Actor: *actor, Action: audit.ActionSavepointRestore, Target: name,
				To: "data directory " + *data, Detail: map[string]any{"instances": insts, "checkpoint": ms[0].Checkpoint}}, stdout)
			err = errors.Join(err, rerr)
		}
		return err
	}
	return cli.UsageOf(usage, nil, stdout, stderr)
}
