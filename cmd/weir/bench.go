package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/weirflow/weir/pkg/bench"
)

// benchCmd runs weir's benchmarks from the command line.
func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "hop" {
		fmt.Fprint(stderr, "usage: weir bench hop [-records N] [-dir DIR]\n")
		return exitError(2)
	}
	fs := flag.NewFlagSet("weir bench hop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	records := fs.Int("records", 20000, "records per mode and round")
	dir := fs.String("dir", "", "scratch directory for the servers' storage (default: a temporary directory)")
	if err := fs.Parse(args[1:]); err != nil {
		return exitError(2)
	}
	d := *dir
	if d == "" {
		tmp, err := os.MkdirTemp("", "weir-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		d = tmp
	}
	return bench.CompareHop(ctx, d, *records, stdout)
}
