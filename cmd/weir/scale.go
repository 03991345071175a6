package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/checkpoint"
)

// scaleCmd is `weir scale`: it assigns instances to operators and restarts
// the pipeline from its latest checkpoint (or a savepoint) under them.
func scaleCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) (err error) {
	fs, srv, pipeline := ctlFlags("weir scale", getenv)
	var service, operators, list, from string
	contract := newContractFlag(fs, pipeline, contractUsage)
	fs.String(&service, "service", "WEIR_SERVICE", "", "scale every operator of this service (operators[].service)")
	fs.String(&operators, "operator", "WEIR_OPERATOR", "", "scale these operators, comma-separated")
	fs.String(&list, "instances", "WEIR_INSTANCES", "", "the instances, comma-separated, in order: instance k of n owns the k-th of n contiguous ranges of its input partitions")
	fs.String(&from, "from-savepoint", "WEIR_FROM_SAVEPOINT", "", "restart from this savepoint instead of the latest checkpoint")
	actor := actorFlag(fs)
	c, err := contract.parse(args, stdout, stderr)
	if err != nil {
		return err
	}
	var ops []string
	switch {
	case service != "" && operators != "":
		return fmt.Errorf("weir scale: give -service or -operator, not both")
	case service != "":
		for _, op := range c.Operators {
			if op.Service == service {
				ops = append(ops, op.ID)
			}
		}
		if len(ops) == 0 {
			return fmt.Errorf("weir scale: contract %s assigns no operator to service %q", c.File, service)
		}
	case operators != "":
		ops = strings.Split(operators, ",")
	default:
		return fmt.Errorf("weir scale: -service or -operator is required")
	}
	if list == "" {
		return fmt.Errorf("weir scale: -instances is required")
	}
	insts := strings.Split(list, ",")
	set := map[string][]string{}
	for _, op := range ops {
		set[op] = insts
	}
	nc, js, err := srv.connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	prev := "no assignment"
	if st, err := checkpoint.Existing(ctx, js, c.Pipeline); err == nil {
		if cur, _, err := st.Assignment(ctx); err == nil {
			prev = fmt.Sprintf("assignment %d", cur.Version)
		}
	}
	a, err := checkpoint.Rescale(ctx, js, c, set, from)
	if err != nil {
		return err
	}
	restart := fmt.Sprintf("checkpoint %d", a.Checkpoint)
	if from != "" {
		restart = "savepoint " + from
	}
	defer func() {
		if err == nil {
			err = recordAct(ctx, js, c.Pipeline, audit.Record{Actor: *actor, Action: audit.ActionScale, Target: strings.Join(ops, ","),
				From: prev, To: fmt.Sprintf("assignment %d: instances %s from %s", a.Version, list, restart)}, stdout)
		}
	}()
	printAssignment(stdout, c.Pipeline, a, func(op string) int {
		o, _ := c.Operator(op)
		if e, ok := c.Edge(o.Input); ok {
			return e.Partitions
		}
		return c.Ingress.Partitions
	})
	return nil
}

// printAssignment prints each assigned instance with the partitions it owns.
func printAssignment(w io.Writer, pipeline string, a checkpoint.Assignment, partitions func(op string) int) {
	from := "no checkpoint: the pipeline starts empty"
	if a.Checkpoint > 0 {
		from = fmt.Sprintf("checkpoint %d", a.Checkpoint)
	}
	fmt.Fprintf(w, "pipeline %s: assignment version %d, restarting from %s\n", pipeline, a.Version, from)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATOR\tINSTANCE\tPARTITIONS")
	for _, op := range slices.Sorted(maps.Keys(a.Operators)) {
		insts := a.Operators[op]
		for k, in := range insts {
			lo, hi := checkpoint.Owned(k, len(insts), partitions(op))
			fmt.Fprintf(tw, "%s\t%s\t%d-%d\n", op, in, lo, hi-1)
		}
	}
	tw.Flush()
}
