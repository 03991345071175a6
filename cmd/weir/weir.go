package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/weirflow/weir/internal/cli"
	"github.com/weirflow/weir/internal/natsconn"
)

const usage = usageCommands + harnessUsage + usageFlags

const usageCommands = `weir — stream processing on NATS JetStream

Usage:
  weir contract lint FILE...      check contract files; non-zero exit on any problem
  weir contract show -effective PATH|NAME   the whole contract a pipeline runs, defaults filled in and marked
  weir tail [flags]               print the records of an edge as JSON lines
  weir status [flags]             the pipeline live: instances, watermarks, lag, checkpoints
  weir checkpoint list|trigger    the pipeline's checkpoint log, or a checkpoint now
  weir savepoint create NAME | list | restore NAME -data DIR
  weir scale -service S -instances a,b,c   rescale: restart the pipeline from its last checkpoint on these instances
  weir recover [-from-checkpoint N | -from-savepoint S | -declare-loss] -reason TEXT
                                  records retention removed before they were read: what was lost, and the choices
  weir replay -from A -to B       the pipeline over a closed range of its ingress, into a new result generation
  weir shadow -from A -generation G -data DIR
                                  the pipeline (or a changed build) from a point of its ingress on, without an end, into a shadow generation
  weir compare -with P2           two result generations side by side, revision by revision
  weir migrate check -savepoint S a savepoint validated against a new build on a copy: what its state means, and whether that changed
  weir cutover -to GENERATION     readers switch to another result generation (or -rollback), kept for an observation window
  weir audit [-action A]          the pipeline's manual acts: who did what, when, from which state to which
  weir erase -key K              a legal erasure: the key out of state, views and an outbox's settled intents; what still holds it, and until when
  weir view get KEY... | list | watch       read a versioned view: each key and window's newest pane
  weir effects list | retry KEY... | reconcile   an outbox's outcomes and dead letters; hand a failed intent back; compare with the provider's record
  weir capacity [flags]           catch-up time, required retention, broker bytes, checkpoint and replay figures
  weir auth -contract FILE       least-privilege NATS users for every process of the pipeline (-tls-hosts: and TLS certificates)
  weir provision -contract FILE  as the administrator: every stream, bucket and durable consumer the pipeline uses, made or brought to the contract
`

const usageFlags = `
Run 'weir COMMAND -h' for a command's flags. Every flag has an environment
variable, named there: NATS_URL for -nats, WEIR_PIPELINE for -pipeline, …
`

// run is the whole command, testable: main only adds signals and the exit.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return cli.ExitError(2)
	}
	// A denial ends the command with a DeniedError (natsServer.connect).
	err := natsconn.Auth{}.Guard(ctx, func(ctx context.Context, watch func(error)) error {
		return command(context.WithValue(ctx, watchKey{}, watch), args, getenv, stdout, stderr)
	})
	if errors.Is(err, cli.ErrHelp) {
		return nil
	}
	return err
}

func command(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	switch args[0] {
	case "contract":
		switch {
		case len(args) >= 2 && args[1] == "lint":
			return lint(args[2:], stdout, stderr)
		case len(args) >= 2 && args[1] == "show":
			return contractShow(args[2:], getenv, stdout, stderr)
		}
		return cli.UsageOf(lintUsage+"\n"+showUsage, args[1:], stdout, stderr)
	case "tail":
		return tail(ctx, args[1:], getenv, stdout, stderr)
	case "status":
		return statusCmd(ctx, args[1:], getenv, stdout, stderr)
	case "checkpoint":
		return checkpointCmd(ctx, args[1:], getenv, stdout, stderr)
	case "savepoint":
		return savepointCmd(ctx, args[1:], getenv, stdout, stderr)
	case "scale":
		return scaleCmd(ctx, args[1:], getenv, stdout, stderr)
	case "recover":
		return recoverCmd(ctx, args[1:], getenv, stdout, stderr)
	case "replay":
		return replayCmd(ctx, args[1:], getenv, stdout, stderr)
	case "shadow":
		return shadowCmd(ctx, args[1:], getenv, stdout, stderr)
	case "compare":
		return compareCmd(ctx, args[1:], getenv, stdout, stderr)
	case "migrate":
		return migrateCmd(ctx, args[1:], getenv, stdout, stderr)
	case "cutover":
		return cutoverCmd(ctx, args[1:], getenv, stdout, stderr)
	case "audit":
		return auditCmd(ctx, args[1:], getenv, stdout, stderr)
	case "view":
		return viewCmd(ctx, args[1:], getenv, stdout, stderr)
	case "effects":
		return effectsCmd(ctx, args[1:], getenv, stdout, stderr)
	case "capacity":
		return capacityCmd(ctx, args[1:], getenv, stdout, stderr)
	case "auth":
		return authCmd(ctx, args[1:], getenv, stdout, stderr)
	case "provision":
		return provisionCmd(ctx, args[1:], getenv, stdout, stderr)
	case "erase":
		return eraseCmd(ctx, args[1:], getenv, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	if cmd := harnessCommand(args[0]); cmd != nil {
		return cmd(ctx, args[1:], getenv, stdout, stderr)
	}
	fmt.Fprintf(stderr, "weir: unknown command %q\n\n%s", args[0], usage)
	return cli.ExitError(2)
}
