package main

import (
	"fmt"
	"io"
	"os"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/cli"
)

// contractShow is `weir contract show [-effective] PATH|NAME`: a contract
// file, or a shipped contract by name, as written or — with -effective —
// whole, every default filled in and marked.
func contractShow(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("weir contract show", getenv)
	var effective bool
	fs.Bool(&effective, "effective", "WEIR_EFFECTIVE", false, "print the whole effective contract: every field, each default marked # default")
	fs.Usage = func() { fmt.Fprint(fs.Output(), showUsage); fs.PrintDefaults() }
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return cli.UsageOf(showUsage, nil, stdout, stderr)
	}
	name := fs.Arg(0)
	c, err := statusContract(name, "", false)
	if err != nil {
		fmt.Fprintln(stderr, "weir:", err)
		return cli.ExitError(1)
	}
	if effective {
		_, err = stdout.Write(c.Effective())
		return err
	}
	src, err := os.ReadFile(name)
	if os.IsNotExist(err) {
		src, err = contracts.ShippedSource(name)
	}
	if err != nil {
		return err
	}
	_, err = stdout.Write(src)
	return err
}

const showUsage = `usage: weir contract show [-effective] PATH|NAME

Prints a contract — a file, or a shipped one by name (nexmark-q7) — as
written; with -effective, the whole contract the services run: every field,
the defaults a file leaves out filled in and marked # default
(contracts/README.md, "Defaults"). A contract with problems is refused with
them, as weir contract lint prints them.
`
