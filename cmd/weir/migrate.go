package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/cli"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/stream"
)

// migrateCmd is `weir migrate check`: a savepoint validated against a new
// build — its contract and operators — on a copy, before anything
// changes: every instance's snapshot is downloaded (digests checked) and
// opened as the new build's state, and what its state means is compared
// with what the new build would read it as. A semantic change (another
// key selection, trigger policy, a shorter TTL…) is named: the restore is
// refused unless declared a semantic migration, and the way to run it is
// as a shadow generation from the retained input.
func migrateCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	usage := "usage: weir migrate check -savepoint NAME [-contract NEW] [-nats URL] [-pipeline NAME]\n"
	if len(args) == 0 || args[0] != "check" {
		return cli.UsageOf(usage, args, stdout, stderr)
	}
	fs, srv, pipeline := ctlFlags("weir migrate check", getenv)
	var savepoint string
	contract := newContractFlag(fs, pipeline, "the new build's contract: a file or a shipped contract's name (default: the shipped contract of -pipeline)")
	fs.String(&savepoint, "savepoint", "WEIR_SAVEPOINT", "", "the savepoint to validate, taken at a known source position")
	srv.keysFlag(fs)
	if err := cli.Parse(fs, args[1:], stdout, stderr); err != nil {
		return err
	}
	if savepoint == "" {
		return cli.UsageOf(usage, nil, stdout, stderr)
	}
	c, err := contract.load()
	if err != nil {
		return err
	}
	nc, st, err := openCheckpoints(ctx, srv, c.Pipeline)
	if err != nil {
		return err
	}
	defer nc.Close()
	sp, err := st.Savepoint(ctx, savepoint)
	if err != nil {
		return err
	}
	factories := shippedFactories(c.Pipeline)
	semantic, unknown := false, false
	from := uint64(0)
	for _, inst := range slices.Sorted(maps.Keys(sp.Manifests)) {
		m, err := st.Manifest(ctx, sp.Manifests[inst])
		if err != nil {
			return err
		}
		var op operator.Operator
		if f, ok := factories[m.Operator]; ok {
			if op, err = f(c); err != nil {
				return err
			}
		}
		changes, err := stream.CheckRestore(ctx, st, m, c, op)
		if err != nil {
			return fmt.Errorf("weir migrate check: %s: %w", inst, err)
		}
		for _, h := range m.Positions {
			if slices.Contains(c.Ingress.StreamNames(), h.Stream) && (from == 0 || h.Needs() < from) {
				from = h.Needs()
			}
		}
		switch {
		case m.Meaning == nil:
			fmt.Fprintf(stdout, "%s: opens as the new build's state; taken by a build that did not record what its state means: unknown\n", inst)
			unknown = true
		case len(changes) == 0:
			fmt.Fprintf(stdout, "%s: opens as the new build's state, and means the same\n", inst)
		default:
			fmt.Fprintf(stdout, "%s: opens as the new build's state, with changes:\n", inst)
			for _, ch := range changes {
				fmt.Fprintf(stdout, "  %s\n", ch)
			}
			semantic = semantic || checkpoint.Semantic(changes)
		}
	}
	if !semantic && unknown {
		fmt.Fprintf(stdout, "savepoint %s opens as the new build's state, but what it meant was not recorded: whether the change is semantic cannot be told; take a savepoint with this build's predecessor upgraded, or run the change as a shadow\n", savepoint)
		return cli.ExitError(1)
	}
	if !semantic {
		fmt.Fprintf(stdout, "savepoint %s is compatible with the new build: restore it (weir scale -from-savepoint %s, or weir savepoint restore)\n", savepoint, savepoint)
		return nil
	}
	fmt.Fprintf(stdout, "savepoint %s needs a semantic migration: restoring it is refused unless declared (-semantic-migration), and always when a change is incompatible. Run the change as a shadow generation from the retained input, and compare it with the live one:\n", savepoint)
	var named string
	if contract.name != "" {
		named = " -contract " + contract.name
	}
	fmt.Fprintf(stdout, "  weir replay -pipeline %s%s -from %d -to <the ingress's last sequence> -generation shadow\n  weir compare -pipeline %s -with %s-shadow\n",
		c.Pipeline, named, max(from, 1), c.Pipeline, c.Pipeline)
	return cli.ExitError(1)
}
