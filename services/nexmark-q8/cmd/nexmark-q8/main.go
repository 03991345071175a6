// Command nexmark-q8 runs Nexmark query 8 as a weir service.
// Configuration comes from flags and the environment (NATS_URL,
// WEIR_CONTRACT, WEIR_DATA_DIR, WEIR_OPERATOR, WEIR_INSTANCE); see -h.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/weirflow/weir/services/nexmark-q8"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := q8.Run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "nexmark-q8:", err)
		os.Exit(1)
	}
}
