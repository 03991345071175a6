package bench

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/pprof/profile"
)

// A stage is a part of the work a pipeline and its broker do per event.
// A CPU sample counts toward the stage of the innermost function on its
// stack that a stage claims: work a library does for weir (JSON, syscalls,
// allocation) counts toward the weir code that asked for it, and what the
// broker does toward the part of the broker doing it.
type stage struct {
	name string
	// funcs are prefixes of the fully qualified names of the functions
	// the stage claims.
	funcs []string
}

const (
	weir   = "github.com/weirflow/weir/"
	server = "github.com/nats-io/nats-server/v2/server."
)

// within are stages that claim a sample when any function on its stack
// matches, before stages are tried: work whose own functions are shared
// with other stages, such as the file store the broker stages each atomic
// batch in, or the consumer state it writes for acknowledgements.
var within = []stage{
	{"broker: atomic batch staging", []string{server + "newBatchStore", server + "(*batching).newAtomicBatch", server + "(*atomicBatch)"}},
	{"broker: consumer state", []string{server + "(*consumerFileStore)."}},
}

// stages, tried in order on each function of a sample's stack, innermost
// first; a sample no stage claims is the Go runtime's own (goRuntime) or,
// outside it, "other".
var stages = []stage{
	{"ingress decode", []string{weir + "pkg/ingress."}},
	{"frame write", []string{weir + "internal/edge.(*Writer)", weir + "internal/edge.Encode", weir + "internal/edge.encode"}},
	{"frame read", []string{weir + "internal/edge.(*Reader)", weir + "internal/edge.Decode", weir + "internal/edge.decode"}},
	{"edge, other", []string{weir + "internal/edge."}},
	{"result and edge publish", []string{weir + "pkg/producer."}},
	{"state (Pebble)", []string{weir + "pkg/state.", "github.com/cockroachdb/pebble"}},
	{"operator", []string{weir + "services/", weir + "pkg/window.", weir + "pkg/join.", weir + "internal/nexmark.", weir + "pkg/operator."}},
	{"checkpoint", []string{weir + "internal/checkpoint.", weir + "internal/restore."}},
	{"watermark", []string{weir + "internal/watermark."}},
	{"dead letters", []string{weir + "internal/deadletter."}},
	{"telemetry and status", []string{"go.opentelemetry.io/", "github.com/prometheus/", weir + "pkg/telemetry.", weir + "internal/status."}},
	{"runtime step", []string{weir + "pkg/stream."}},
	{"NATS client", []string{"github.com/nats-io/nats.go", "github.com/synadia-io/orbit.go"}},
	{"broker: dedup", []string{server + "(*stream).checkMsgId", server + "(*stream).storeMsgId", server + "(*stream).purgeMsgIds", server + "(*stream).storeMsgIdLocked"}},
	{"broker: store read", []string{server + "(*fileStore).Load", server + "(*fileStore).load", server + "(*msgBlock).cacheLookup", server + "(*msgBlock).loadMsgs", server + "(*msgBlock).fetchMsg", server + "(*msgBlock).indexCacheBuf"}},
	{"broker: store write", []string{server + "(*fileStore).", server + "(*msgBlock).", server + "(*memStore)."}},
	{"broker: atomic batch", []string{server + "(*stream).processJetStreamAtomicBatch", server + "(*atomicBatch)", server + "(*batching)", server + "(*batchApply)", server + "newBatchStore", server + "checkMsgHeadersPreClusteredProposal"}},
	{"broker: acks", []string{server + "(*consumer).processAck", server + "(*consumer).processInboundAcks", server + "(*consumer).pushAck", server + "(*consumer).updateAcks", server + "(*consumer).moveAckFloor", server + "(*consumer).sendAckReply"}},
	{"broker: delivery", []string{server + "(*consumer)."}},
	{"broker: stream ingest", []string{server + "(*stream)."}},
	{"broker: client protocol", []string{server + "(*client).", server + "(*Sublist)."}},
	{"broker: other", []string{"github.com/nats-io/nats-server/"}},
}

// goRuntime is the stage of a sample no stage claims whose stack is the Go
// runtime's: the garbage collector's workers, the scheduler.
const goRuntime = "Go runtime (GC, scheduler)"

// Costs is where a run's CPU went, per process and stage, over the events
// it handled: the per-event cost model of docs/BENCHMARKS.md.
type Costs struct {
	Events int64
	// CPU is, per process and stage, the CPU time its profile sampled.
	CPU map[string]map[string]time.Duration
}

// ReadCosts reads the CPU profiles of a run's processes, profiles mapping
// each process's name to its file, over events handled.
func ReadCosts(profiles map[string]string, events int64) (Costs, error) {
	c := Costs{Events: events, CPU: map[string]map[string]time.Duration{}}
	for proc, file := range profiles {
		f, err := os.Open(file)
		if err != nil {
			return c, err
		}
		p, err := profile.Parse(f)
		f.Close()
		if err != nil {
			return c, fmt.Errorf("bench: profile %s: %w", file, err)
		}
		idx := slices.IndexFunc(p.SampleType, func(t *profile.ValueType) bool { return t.Type == "cpu" && t.Unit == "nanoseconds" })
		if idx < 0 {
			return c, fmt.Errorf("bench: %s is not a CPU profile", file)
		}
		by := map[string]time.Duration{}
		for _, s := range p.Sample {
			by[stageOf(s)] += time.Duration(s.Value[idx])
		}
		c.CPU[proc] = by
	}
	return c, nil
}

// stageOf is the stage a sample counts toward.
func stageOf(s *profile.Sample) string {
	for _, st := range within {
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				if line.Function != nil && slices.ContainsFunc(st.funcs, func(f string) bool { return strings.HasPrefix(line.Function.Name, f) }) {
					return st.name
				}
			}
		}
	}
	runtime := false
	for _, loc := range s.Location {
		for _, line := range loc.Line { // innermost (inlined) first
			if line.Function == nil {
				continue
			}
			runtime = runtime || strings.HasPrefix(line.Function.Name, "runtime.")
			for _, st := range stages {
				for _, f := range st.funcs {
					if strings.HasPrefix(line.Function.Name, f) {
						return st.name
					}
				}
			}
		}
	}
	if runtime {
		return goRuntime
	}
	return "other"
}

// WriteTable writes µs of CPU per event: a row per stage, a column per
// process and the total, the broker's processes counted like weir's.
func (c Costs) WriteTable(w io.Writer) error {
	procs := make([]string, 0, len(c.CPU))
	for p := range c.CPU {
		procs = append(procs, p)
	}
	slices.Sort(procs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "µs per event\t%s\ttotal\t\n", strings.Join(procs, "\t"))
	per := func(d time.Duration) string {
		if d == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", float64(d.Microseconds())/float64(max(c.Events, 1)))
	}
	var all time.Duration
	col := map[string]time.Duration{}
	for _, st := range slices.Concat(within, stages, []stage{{name: goRuntime}, {name: "other"}}) {
		var row []string
		var sum time.Duration
		for _, p := range procs {
			d := c.CPU[p][st.name]
			row, sum = append(row, per(d)), sum+d
			col[p] += d
		}
		if sum == 0 {
			continue
		}
		all += sum
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", st.name, strings.Join(row, "\t"), per(sum))
	}
	var row []string
	for _, p := range procs {
		row = append(row, per(col[p]))
	}
	fmt.Fprintf(tw, "all\t%s\t%s\t\n", strings.Join(row, "\t"), per(all))
	return tw.Flush()
}
