package stream

import (
	"log/slog"

	"github.com/weirflow/weir/internal/edge"
	"runtime/debug"
	"sync"

	"github.com/weirflow/weir/pkg/state"
)

// Memory is the resident memory an operator instance declares it stays
// under, part by part. Each part is bounded by the contract or by a
// default documented here and in docs/OPERATIONS.md; the runtime logs the
// budget when it starts, answers it in its status (memory) and exports it
// as weir_memory_budget_bytes, so that what a process uses can be checked
// against what it promised.
type Memory struct {
	// Runtime is the Go runtime, the code, the NATS connection, the micro
	// service and telemetry: runtimeMemory, once per process.
	Runtime int64 `json:"runtime"`
	// State is the Pebble store: its block cache, which its memtables are
	// charged to, and what lives outside it (state.Options.MemoryBound).
	State int64 `json:"state"`
	// Input is the input in the client: deliveries handed to steps and
	// not yet acknowledged (inputHeld, the reader's byte budget, which
	// always lets one message through), and each input's pull buffer (its
	// share of inputPull, in messages of the largest size the contract
	// lets it hold) plus the message its pump holds while it waits.
	Input int64 `json:"input"`
	// Output is a step's output, staged in its batch and held as
	// messages — twice — plus the last step's messages, still being
	// stored while this step runs (flight.go): three times one step's. Its
	// input records are at most the reader's byte budget, and the budget
	// lets their output weigh as much; its timers are at most
	// maxStepTimers, and the budget lets each emit two records, in frames
	// of at most frame_max_records records and frame_max_bytes bytes,
	// plus a partial frame per output partition. A step whose output is
	// larger is logged (the operator emits more per record or timer than
	// the budget allows).
	Output int64 `json:"output"`
	Total  int64 `json:"total"`
}

const (
	runtimeMemory = 64 << 20
	inputHeld     = 16 << 20
	inputPull     = 64 << 20
)

// memory is the budget of an instance of the plan, whose inputs hold
// messages of at most the sizes the contract declares (msgBound).
func (p plan) memory(store state.Options) Memory {
	m := Memory{Runtime: runtimeMemory, State: store.MemoryBound(), Input: inputHeld}
	for _, in := range p.inputs {
		// The pull buffer, and the message the pump holds.
		m.Input += int64(p.pull(in)+1) * p.msgBound(in)
	}
	if p.output != nil {
		timed := int64(p.maxStepTimers()) * 2
		frames := (timed+int64(p.limits.MaxRecords)-1)/int64(p.limits.MaxRecords) + int64(p.output.Partitions)
		m.Output = 3 * (inputHeld + frames*int64(p.limits.MaxBytes+frameHeaderRoom))
	}
	m.Total = m.Runtime + m.State + m.Input + m.Output
	return m
}

// msgBound is the largest message the contract lets an input hold: a
// frame on an edge, an event (ingress.max_message_bytes) on the ingress.
// A larger ingress message — which the operator dead-letters — can pass
// the budget by the difference while it is in the client.
func (p plan) msgBound(in edge.Input) int64 {
	if in.Frames {
		return int64(p.limits.MaxBytes + frameHeaderRoom)
	}
	return int64(max(p.maxMessage, 1))
}

// largestMessage is the largest message any input may hold.
func (p plan) largestMessage() int64 {
	var n int64
	for _, in := range p.inputs {
		n = max(n, p.msgBound(in))
	}
	return n
}

// pull is how many messages an input's pull consumer buffers: its share
// of inputPull in messages of msgBound bytes, between 1 and fetch_batch.
func (p plan) pull(in edge.Input) int {
	share := inputPull / int64(max(1, len(p.inputs)))
	return int(min(max(share/p.msgBound(in), 1), int64(p.fetchBatch)))
}

// processMemory keeps the Go runtime's soft memory limit
// (debug.SetMemoryLimit) at the sum of the budgets of the runtimes a
// service process runs, once Main has turned it on — it does not when
// GOMEMLIMIT is set, nor in a process that hosts runtimes some other way
// (the demo, tests). The limit counts the memory the Go runtime manages:
// Pebble's cache is outside it when Pebble allocates with cgo.
var processMemory struct {
	sync.Mutex
	on    bool
	runs  int
	total int64 // the budgets' sum less Runtime, which counts once
}

// LimitProcessMemory turns on, for a process that hosts service
// operators the way Main does — a benchmark's or a chaos run's child
// process — the soft memory limit Main keeps at their budgets' sum.
func LimitProcessMemory() { limitProcessMemory() }

func limitProcessMemory() {
	processMemory.Lock()
	defer processMemory.Unlock()
	processMemory.on = true
}

// holdMemory adds m to the process's budget; the returned func takes it
// away again.
func holdMemory(m Memory, log *slog.Logger) (release func()) {
	share := m.Total - m.Runtime
	if pebbleOutsideHeap {
		share -= m.State
	}
	set := func(delta int64, runs int) {
		processMemory.Lock()
		defer processMemory.Unlock()
		if !processMemory.on {
			return
		}
		processMemory.total += delta
		processMemory.runs += runs
		if processMemory.runs > 0 {
			limit := runtimeMemory + processMemory.total
			debug.SetMemoryLimit(limit)
			if delta > 0 {
				log.Info("memory limit", "bytes", limit, "runtimes", processMemory.runs)
			}
		}
	}
	set(share, 1)
	return func() { set(-share, -1) }
}
