// Command nexmark-gen publishes the Nexmark event stream into JetStream.
// See package github.com/weirflow/weir/services/nexmark-gen for flags,
// environment and resume semantics.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := nexmarkgen.Run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "nexmark-gen:", err)
		os.Exit(1)
	}
}
