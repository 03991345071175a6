package coordinator_test

import (
	"context"
	"testing"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/services/coordinator"
)

// TestAStopWhileStartingIsClean: a coordinator whose context ends while it
// is still opening its checkpoint store stops cleanly, as it does once
// running. In CI a test's teardown stopped one just started and got
// "checkpoint: object store WEIR_NEXMARK_CHECKPOINTS: context canceled"
// back as a failure (TestTransactionalResultsSurviveRescale).
func TestAStopWhileStartingIsClean(t *testing.T) {
	srv := natstest.Run(t)
	c, err := contracts.Shipped("nexmark-dedup")
	if err != nil {
		t.Fatal(err)
	}
	co, err := coordinator.New(coordinator.Config{NATSURL: srv.ClientURL(), Contract: c, Holder: "a"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := co.Run(ctx); err != nil {
		t.Fatalf("Run stopped while starting: %v, want nil", err)
	}
}
