package main

import (
	"context"
	"io"
	"os"

	"github.com/weirflow/weir/pkg/bench"
)

// benchCmd runs weir's benchmarks from the command line.
func benchCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	switch {
	case len(args) > 0 && args[0] == "nexmark":
		return benchNexmarkCmd(ctx, args[1:], getenv, stdout, stderr)
	case len(args) > 0 && args[0] == "child":
		return benchChild(ctx, args[1:], getenv, stdout, stderr)
	case len(args) == 0 || args[0] != "hop":
		return usageOf("usage: weir bench hop [-records N] [-dir DIR]\n       weir bench nexmark [-query Q,…|all] [-events N] [-modes M,…] [-json]\n", args, stdout, stderr)
	}
	fs := newFlags("weir bench hop", getenv)
	var records int
	var dir string
	fs.Int(&records, "records", "WEIR_BENCH_RECORDS", 20000, "records per mode and round")
	fs.String(&dir, "dir", "WEIR_BENCH_DIR", "", "scratch directory for the servers' storage (default: a temporary directory)")
	if err := parse(fs, args[1:], stdout, stderr); err != nil {
		return err
	}
	d, cleanup, err := workDir(dir, "weir-bench-")
	if err != nil {
		return err
	}
	defer cleanup()
	return bench.CompareHop(ctx, d, records, stdout)
}

// workDir is dir, or if dir is empty a new temporary directory named after
// prefix that cleanup removes.
func workDir(dir, prefix string) (_ string, cleanup func(), _ error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	tmp, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	return tmp, func() { os.RemoveAll(tmp) }, nil
}
