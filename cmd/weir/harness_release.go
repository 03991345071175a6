//go:build release

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/weirflow/weir/internal/cli"
)

// A release build has no development harness (harness.go): its commands
// say where they are.
const harnessUsage = ""

func harnessCommand(name string) func(context.Context, []string, func(string) string, io.Writer, io.Writer) error {
	switch name {
	case "demo", "bench", "chaos":
		return func(_ context.Context, _ []string, _ func(string) string, _, stderr io.Writer) error {
			fmt.Fprintf(stderr, "weir: %s is part of the development harness, which this release build leaves out: go run ./cmd/weir %s\n", name, name)
			return cli.ExitError(2)
		}
	}
	return nil
}
