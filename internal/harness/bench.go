package harness

import (
	"context"
	"io"

	"github.com/weirflow/weir/internal/bench"
	"github.com/weirflow/weir/internal/cli"
)

// benchCmd runs weir's benchmarks from the command line.
func (h *Harness) benchCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	switch {
	case len(args) > 0 && args[0] == "nexmark":
		return h.benchNexmarkCmd(ctx, args[1:], getenv, stdout, stderr)
	case len(args) > 0 && args[0] == "child":
		return h.benchChild(ctx, args[1:], getenv, stdout, stderr)
	case len(args) == 0 || args[0] != "hop":
		return cli.UsageOf("usage: weir bench hop [-records N] [-dir DIR]\n       weir bench nexmark [-query Q,…|all] [-events N] [-modes M,…] [-json]\n", args, stdout, stderr)
	}
	fs := cli.NewFlags("weir bench hop", getenv)
	var records int
	var dir string
	fs.Int(&records, "records", "WEIR_BENCH_RECORDS", 20000, "records per mode and round")
	fs.String(&dir, "dir", "WEIR_BENCH_DIR", "", "scratch directory for the servers' storage (default: a temporary directory)")
	if err := cli.Parse(fs, args[1:], stdout, stderr); err != nil {
		return err
	}
	d, cleanup, err := cli.WorkDir(dir, "weir-bench-")
	if err != nil {
		return err
	}
	defer cleanup()
	return bench.CompareHop(ctx, d, records, stdout)
}
