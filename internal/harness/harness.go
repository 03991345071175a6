// Package harness is weir's development harness: the commands that run
// pipelines of a catalog (internal/catalog) on an embedded NATS server or
// as processes of their own, to show them, measure them and break them.
//
//   - `weir demo` runs NATS, the Nexmark generator and chosen pipelines in
//     one process (demo.go).
//   - `weir bench hop` and `weir bench nexmark` measure an edge hop, and
//     pipelines side by side with the broker's limit, a hand-written
//     baseline and ingest (bench.go, benchnexmark.go).
//   - `weir chaos` kills, pauses and rescales a pipeline's processes on a
//     seeded schedule and compares its results with a failure-free run
//     (chaos.go).
//
// Benchmarks and chaos runs start the broker, each service and the
// coordinators as processes of their own: the executable that runs the
// harness, started again as `<exe> bench child ROLE` (benchchild.go). Any
// executable that hands `bench child` to Command with the same catalog
// can be one: weir does, and so do this package's tests (TestMain).
//
// cmd/weir links the harness only into development builds (its harness.go,
// `//go:build !release`); the binary that ships is built with -tags
// release and has neither it nor pkg/natstest.
package harness

import (
	"context"
	"io"
	"net"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/catalog"
	"github.com/weirflow/weir/internal/cli"
	"github.com/weirflow/weir/pkg/natsconn"
)

// Usage lists the harness's commands, as lines of weir's usage.
const Usage = `  weir demo [flags]               run NATS, the Nexmark generator and dedup in one process
  weir bench hop [flags]          measure one edge hop: framed vs one record per message
  weir bench nexmark [flags]      Nexmark queries side by side with the broker's limit and ingest
  weir chaos [flags]              seeded SIGKILLs of services, coordinator and broker; results compared revision by revision with a failure-free run
`

// Harness runs the development commands over the queries of Catalog.
type Harness struct {
	Catalog catalog.Catalog
}

// Command is a command's run function: its arguments after the command's
// name.
type Command func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

// Command returns the harness's command called name — demo, bench or
// chaos — or nil if it has none of that name.
func (h *Harness) Command(name string) Command {
	switch name {
	case "demo":
		return h.demo
	case "bench":
		return h.benchCmd
	case "chaos":
		return h.chaosCmd
	}
	return nil
}

// connect opens a connection to url, presenting nothing, and its
// JetStream context.
func connect(url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	return cli.Connect(natsconn.Auth{}, url, opts...)
}

// freePort is a TCP port nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
