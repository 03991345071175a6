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
//
// # How bench and chaos measure
//
// weir bench nexmark (benchnexmark.go) measures a query the way
// it is deployed: it starts its own executable as weir bench child broker
// (an embedded nats-server, SyncAlways), … service (one process per
// service of the contract, every operator instance named bench) and
// … coordinator, each logging to its own file in the scratch directory
// (benchchild.go). It reads the operators' Stats from their micro
// status endpoints to know when they are ready and when each has handled all
// its upstream produced, and reads each child's CPU time and VmHWM from
// /proc (bench.ReadUsage) before and after. The comparisons it runs beside
// the pipeline live in internal/bench: the raw fetch-and-ack reader
// (FetchAndAck), the framed edge hop (Hop), the hand-written queries
// (HandWritten) and ingest (Ingest). A test stands in for the weir
// executable through TestMain in this package's tests. Figures and what
// the profiles showed are in docs/BENCHMARKS.md and docs/BENCHMARKS-LOG.md.
//
// weir chaos (chaos.go) runs a query on the same processes, on a
// broker with a fixed port so that it can be killed and started again on its
// storage. It publishes a seeded corpus (out of order within the contract's
// bound, duplicate IDs, a hot key, future timestamps; no late events and no
// idle partition, whose outcome depends on timing) and a flush event per
// partition, once without failures — until every operator has handled it
// and the result streams are quiet — and once per checkpoint mode while it
// injects one fault a round, at the moments and in the order its seed draws
// (each block of rounds a permutation of the kinds): it SIGKILLs a service,
// one of the two coordinators (holders chaos-a and chaos-b, the
// checkpoint timeout 5 s and so a 7 s lease) or the broker and starts it
// again; it rescales every operator that can run as two — it reads more
// than one partition, and unless it reads the ingress (partitioned by event
// ID) its state is keyed by ID or it has none; auction-close cannot, so
// auctions' rescales restart it from the latest checkpoint under a new
// assignment instead — from instance bench to bench and chaos-2 — the second a process of its
// own per service (weir bench child service -instance -operators) — or
// back, waiting for a checkpoint to restart from and, when scaling in, for
// the retired processes to end on their own, then SIGKILLs one of the
// processes involved while the instances restore (counted as interrupted
// when no checkpoint under the new assignment has completed yet); it stops a
// process with SIGSTOP for longer than the lease and lets it go on; or it
// kills every service process and starts them on empty data directories,
// as on new hosts (one process alone would be a partial rollback, which
// weir does not support). With -cluster 3 the broker is three nodes
// (weir bench child broker -cluster-port -routes, natstest.Options'
// cluster fields), every process creates its streams and buckets with
// three replicas (-replicas), and a broker fault kills or pauses one node.
// The generator resumes from what was acknowledged. It reads every result edge revision by revision
// with weir compare's reader (readRevisions, which also reports
// messages stored twice; one ordered consumer read as an iterator,
// eachMessage, since Next on an ordered consumer makes a consumer per
// message, which a cluster soon fails to answer) and the dead-letter stream
// (pipelineRun.letters: each letter by subject, source subject, field and
// payload digest), and judges the runs equal only if nothing is
// missing, repeated, extra or different. It compares once every process is
// up, every operator instance ready (its Stats) and every consumer of the
// partitions each instance owns under the current layout has nothing left
// to deliver, and the result streams have been
// quiet for longer than a checkpoint interval; it fails when they stay
// unchanged and different for -stall. Its own connection reconnects as
// the services' do (every 250 ms, without end), so that the generator is
// back as soon as a restarted broker is. Its service processes turn the
// Go runtime's memory limit on as deployed ones do
// (stream.LimitProcessMemory); each process's peak resident memory
// (VmHWM, read before every kill and at the end) must stay within what it
// declares — the sum of its operators' memory Stats, a coordinator's
// coordinator.Memory. The run record is in docs/RELIABILITY.md and docs/RELIABILITY-LOG.md.
package harness

import (
	"context"
	"io"
	"net"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/catalog"
	"github.com/weirflow/weir/internal/cli"
	"github.com/weirflow/weir/internal/natsconn"
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
