package test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/coordinator"
)

// runAs runs c's operators that factories builds, with their state under
// dir and their snapshots sealed with keys (nil: not sealed), and c's
// coordinator, until the returned stop or the test's end. Each process
// presents to NATS what auth gives its role: the operator's service in c,
// or access.RoleCoordinator.
func runAs(t *testing.T, url string, c *contracts.Contract, dir string, factories map[string]stream.Factory,
	keys *checkpoint.Keys, auth func(role string) natsconn.Auth) func() {
	t.Helper()
	p := streamtest.Run(t, url, c, dir, factories, func(cfg *stream.Config) {
		op, _ := c.Operator(cfg.Operator)
		cfg.Auth, cfg.CheckpointKeys, cfg.Logger = auth(op.Service), keys, testLogger(t)
	})
	_, stopCoordinator := runCoordinator(t, url, c, "co", func(cfg *coordinator.Config) { cfg.Auth = auth(access.RoleCoordinator) })
	return func() {
		p.Stop()
		stopCoordinator()
	}
}

// checkSink returns nil once the sink holds every ID of want exactly once
// and nothing else, and — letters at 0 or more — the dead-letter stream
// that many letters.
func checkSink(ctx context.Context, js jetstream.JetStream, c *contracts.Contract, want map[string]bool, letters int) error {
	got, total, err := sinkCounts(ctx, js, c)
	if err != nil {
		return err
	}
	if err := checkExactlyOnce(want, got); err != nil {
		return err
	}
	if total != len(want) {
		return fmt.Errorf("sink holds %d events for %d ids", total, len(want))
	}
	if letters < 0 {
		return nil
	}
	if n, err := countStream(ctx, js, deadletter.StreamName(c.Pipeline)); err != nil || n != uint64(letters) {
		return fmt.Errorf("%d dead letters, want %d (%v)", n, letters, err)
	}
	return nil
}

// syncBuffer is a bytes.Buffer that several goroutines write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
