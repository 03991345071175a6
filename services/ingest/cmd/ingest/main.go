// Command ingest runs weir's ingest gateway: producers POST newline-
// delimited JSON events to /v1/events and the gateway stores them in the
// pipeline's ingress stream, for producers holding a bearer token weir
// auth -producers wrote. Configuration: NATS_URL, WEIR_CONTRACT,
// WEIR_INGEST_ADDR (default 127.0.0.1:8088), WEIR_GATEWAY_TOKENS (or
// WEIR_GATEWAY_OPEN=true to serve anyone); see -h.
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
