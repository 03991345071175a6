// Command ingest runs weir's ingest gateway: producers POST newline-
// delimited JSON events to /v1/events and the gateway stores them in the
// pipeline's ingress stream. Configuration: NATS_URL, WEIR_CONTRACT,
// WEIR_INGEST_ADDR; see -h.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/weirflow/weir/services/ingest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := ingest.Run(ctx, os.Args[1:], os.Getenv, os.Stderr, nil)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ingest:", err)
		os.Exit(1)
	}
}
