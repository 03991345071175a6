// Command nexmark-auctions closes Nexmark auctions and charges their winners as a weir service.
// Configuration comes from flags and the environment (NATS_URL,
// WEIR_CONTRACT, WEIR_DATA_DIR, WEIR_OPERATOR, WEIR_INSTANCE); see -h.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	auctions "github.com/weirflow/weir/services/nexmark-auctions"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := auctions.Run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "nexmark-auctions:", err)
		os.Exit(1)
	}
}
