// Command dispatcher performs the intents of a pipeline's outbox over HTTP
// with their idempotency keys (package dispatcher). Configuration:
// NATS_URL, WEIR_CONTRACT, WEIR_PROVIDER; see -h.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/weirflow/weir/dispatcher"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := dispatcher.Main(ctx, os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dispatcher:", err)
		os.Exit(1)
	}
}
