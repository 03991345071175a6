// Command weir is weir's command-line tool: it lints contracts, reads
// edges, views and checkpoints, and operates a running pipeline (scale,
// recover, replay, erase, …). `weir help` lists the commands. A
// development build (`go run ./cmd/weir`) also runs the development
// harness, internal/harness: weir demo, bench and chaos; the binary that
// ships is built with -tags release and has no harness (harness.go).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/weirflow/weir/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	var exit cli.ExitError
	switch {
	case errors.As(err, &exit):
		os.Exit(int(exit))
	case err != nil:
		fmt.Fprintln(os.Stderr, "weir:", err)
		os.Exit(1)
	}
}
