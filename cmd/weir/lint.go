package main

import (
	"fmt"
	"io"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/cli"
)

// lint checks contract files and prints one line per problem: file, line,
// field, why, and how to fix it.
func lint(files []string, stdout, stderr io.Writer) error {
	if len(files) == 0 || cli.WantsHelp(files) {
		return cli.UsageOf(lintUsage, files, stdout, stderr)
	}
	n, err := contracts.LintFiles(stdout, files...)
	if err != nil {
		fmt.Fprintln(stderr, "weir:", err)
		return cli.ExitError(1)
	}
	if n > 0 {
		fmt.Fprintf(stderr, "%d problem(s) in %d file(s)\n", n, len(files))
		return cli.ExitError(1)
	}
	fmt.Fprintf(stdout, "%d file(s) ok\n", len(files))
	return nil
}

const lintUsage = `usage: weir contract lint FILE...

Checks contract files and prints one line per problem: file, line, field,
why, and how to fix it. Exits 1 on any problem. The rules are in
contracts/README.md.
`
