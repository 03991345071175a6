// Command nexmark-q0 runs Nexmark query 0 as a weir service.
// Configuration comes from flags and the environment (NATS_URL,
// WEIR_CONTRACT, WEIR_DATA_DIR, WEIR_OPERATOR, WEIR_INSTANCE); see -h.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/weirflow/weir/services/nexmark-q0"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := q0.Run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "nexmark-q0:", err)
		os.Exit(1)
	}
}
