// Command dedup runs weir's deduplication service. Configuration comes from
// flags and the environment (NATS_URL, WEIR_CONTRACT, WEIR_DATA_DIR,
// WEIR_OPERATOR, WEIR_INSTANCE); see `dedup -h`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/weirflow/weir/services/dedup"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := dedup.Run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "dedup:", err)
		os.Exit(1)
	}
}
