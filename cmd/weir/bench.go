package main

import (
	"context"
	"io"
	"os"

	"github.com/weirflow/weir/pkg/bench"
)

// benchCmd runs weir's benchmarks from the command line.
func benchCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "hop" {
		return usageOf("usage: weir bench hop [-records N] [-dir DIR]\n", args, stdout, stderr)
	}
	fs := newFlags("weir bench hop", getenv)
	var records int
	var dir string
	fs.Int(&records, "records", "WEIR_BENCH_RECORDS", 20000, "records per mode and round")
	fs.String(&dir, "dir", "WEIR_BENCH_DIR", "", "scratch directory for the servers' storage (default: a temporary directory)")
	if err := parse(fs, args[1:], stdout, stderr); err != nil {
		return err
	}
	d := dir
	if d == "" {
		tmp, err := os.MkdirTemp("", "weir-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		d = tmp
	}
	return bench.CompareHop(ctx, d, records, stdout)
}
