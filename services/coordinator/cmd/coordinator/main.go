// Command coordinator runs weir's checkpoint coordinator for one pipeline.
// Configuration: NATS_URL, WEIR_CONTRACT, WEIR_INSTANCE (the lease holder
// name); see -h.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/weirflow/weir/services/coordinator"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var afterCommit func(uint64)
	if os.Getenv("WEIR_TEST_DIE_AFTER_COMMIT") != "" {
		// Failure tests: die between the commit point and the announcement.
		afterCommit = func(uint64) { os.Exit(137) }
	}
	err := coordinator.Run(ctx, os.Args[1:], os.Getenv, os.Stderr, afterCommit)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		os.Exit(1)
	}
}
