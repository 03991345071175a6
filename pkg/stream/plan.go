package stream

import (
	"fmt"
	"strconv"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/redact"
	"github.com/weirflow/weir/internal/watermark"
	"github.com/weirflow/weir/pkg/ingress"
	"github.com/weirflow/weir/pkg/state"
)

// plan is what the runtime needs from the contract for one operator. All
// reading of the contract happens here.
type plan struct {
	contract *contracts.Contract
	// shed is policy shed's bound and predicate, for an ingress reader.
	shed     *shedPlan
	pipeline string
	// origin is the pipeline a replay or shadow generation was made from
	// (pipeline itself otherwise): its erasures apply to the generation.
	origin      string
	fingerprint string
	keyGroups   int
	keyByID     bool
	// tenantScoped: every key is the pair (tenant, key)
	// (state.tenant_scoped); an emitted record keeps its tenant's.
	tenantScoped bool
	families     []state.Family
	// windowed: a family of the operator lives by window (bound: window),
	// so records behind the watermark are late, accepted or dropped.
	windowed bool

	ingress   bool
	inputName string
	// before are the operators chained into the step
	// (operators[].before), by name.
	before []string
	// inputStreams are the streams the inputs are in: the edge's one, or
	// the ingress's (contracts.Ingress.StreamNames).
	inputStreams        []string
	inputRetention      time.Duration
	inputRetentionField string
	inputs              []edge.Input
	inputEdge           *edge.Spec // nil for ingress
	// upstream is the operator writing the input edge; "" for ingress.
	upstream string
	decoder  *ingress.Decoder

	output     *edge.Spec
	outputJSON bool
	// outputView: the results are applied to a versioned view
	// (sink.effect versioned-upsert) rather than published.
	outputView bool
	// outbox: the results are an outbox's intents (sink.effect outbox),
	// each stamped with the erasure names of the key that caused it.
	outbox bool
	// maxPendingEpochs bounds the checkpoint epochs of results a
	// transactional result edge holds (output.Transactional).
	maxPendingEpochs int
	limits           edge.Limits

	fetchBatch    int
	maxAckPending int
	// split: the input edge splits hot keys that many ways
	// (edges[].split): state is keyed, and key groups are counted, by the
	// split key (keygroup.Split), as the writer routed the record.
	split int
	// maxMessage is the largest ingress event (ingress.max_message_bytes).
	maxMessage   int
	linger       time.Duration
	maxBuffered  int
	dlqRetention time.Duration
	// deadLetter: the operator has a dead-letter stream
	// (operators[].dead_letter); without one, a record it would file there
	// stops it.
	deadLetter bool
	// redact keeps what the contract declares sensitive out of dead
	// letters, side outputs, their log lines and spans (nil: nothing is).
	redact *redact.Policy
	// maxRecovery is the declared worst case from start to reading
	// (recovery.max_recovery_time); a slower recovery is reported.
	maxRecovery time.Duration

	// Event-time progress; strategy "" or none means no watermarks.
	strategy    string
	progress    watermark.Policy // of ingress inputs
	idleTimeout time.Duration    // of ingress inputs; 0 on an edge
	drift       time.Duration

	// aligned: snapshot when every input delivered the barrier; otherwise
	// at the first (recovery.mode unaligned).
	aligned bool

	generation uint64
}

func (p plan) outputName() string {
	if p.output == nil {
		return ""
	}
	return p.output.Edge
}

// maxStepTimers bounds the timers one step fires: as many as the input
// records a step takes at most.
func (p plan) maxStepTimers() int { return maxStepBatches * p.fetchBatch }

// maxInFlight bounds the frames published but not yet acknowledged.
func (p plan) maxInFlight() int { return p.maxBuffered }

func makePlan(c *contracts.Contract, operator string) (plan, error) {
	op, ok := c.Operator(operator)
	if !ok {
		return plan{}, fmt.Errorf("stream: refusing to start: contract %s declares no operator %q (operators[].id)", c.File, operator)
	}
	p := plan{
		contract:      c,
		pipeline:      c.Pipeline,
		origin:        c.Pipeline,
		fingerprint:   c.Fingerprint(),
		keyGroups:     c.State.KeyGroups,
		keyByID:       op.Keying == contracts.KeyingID,
		tenantScoped:  c.State.TenantScoped,
		fetchBatch:    c.Overload.FetchBatch,
		maxAckPending: c.Overload.MaxAckPending,
		maxMessage:    c.Ingress.MaxMessageBytes,
		linger:        c.Overload.FrameLinger.D(),
		maxBuffered:   c.Overload.MaxBufferedFrames,
		limits:        edge.Limits{MaxRecords: c.Overload.FrameMaxRecords, MaxBytes: c.Overload.FrameMaxBytes},
		dlqRetention:  c.Ingress.Retention.D(),
		deadLetter:    op.DeadLetter,
		maxRecovery:   c.Recovery.MaxRecoveryTime.D(),
		inputName:     op.Input,
		before:        op.Before,
		strategy:      c.Progress.Watermark,
		aligned:       c.Recovery.Mode != contracts.CheckpointUnaligned,
		progress:      watermark.Policy{Strategy: c.Progress.Watermark, Bound: c.Progress.OutOfOrderness.D()},
		idleTimeout:   c.Progress.IdleTimeout.D(),
		drift:         c.Progress.AlignmentDrift.D(),
	}
	if c.Time.Domain == contracts.DomainProcessing {
		p.strategy = watermark.None
	}
	for _, f := range c.State.Families {
		if !op.Uses(f.Name) {
			continue
		}
		sf := state.Family{Name: f.Name, TTL: f.TTL.D(), MaxKeys: int64(f.MaxKeys)}
		p.windowed = p.windowed || f.Bound == contracts.BoundWindow
		switch f.Kind {
		case "value":
			sf.Kind = state.KindValue
		case "map":
			sf.Kind = state.KindMap
		case "list":
			sf.Kind = state.KindList
		}
		if f.OnLimit == "dead-letter" {
			sf.OnLimit = state.LimitDeadLetter
		}
		p.families = append(p.families, sf)
	}
	if op.Input == "ingress" {
		p.ingress = true
		p.inputStreams = c.Ingress.StreamNames()
		p.inputRetention = c.Ingress.Retention.D()
		p.inputRetentionField = "ingress.retention"
		for i := 0; i < c.Ingress.Partitions; i++ {
			p.inputs = append(p.inputs, edge.Input{
				Name: "ingress/" + strconv.Itoa(i), Partition: i,
				Stream: c.Ingress.StreamOf(i), Subject: c.Ingress.Subject(i),
			})
		}
		d, err := ingress.NewDecoder(ingress.ConfigOf(c))
		if err != nil {
			return plan{}, fmt.Errorf("stream: refusing to start: contract %s identity: %w", c.File, err)
		}
		p.decoder = d
		p.shed = planShed(c, true)
	} else {
		e, ok := c.Edge(op.Input)
		if !ok {
			return plan{}, fmt.Errorf("stream: refusing to start: operator %s reads unknown edge %q", operator, op.Input)
		}
		spec := edge.ForContract(c, e)
		p.inputEdge = &spec
		p.split = e.Split
		// Silence on an edge is no sign of idleness: the writer upstream
		// may be restarting, restoring or held back by its own inputs,
		// and records it has yet to write would be late behind a
		// watermark the others carried on. An edge partition is idle
		// when its writer says so — an Idle record, which the writer
		// sends once all its own inputs are idle — and only the ingress,
		// which has no writer to ask, is judged by the idle timeout.
		p.idleTimeout = 0
		for _, up := range c.Operators {
			if up.Output == e.Name {
				p.upstream = up.ID
			}
		}
		p.inputStreams = []string{spec.StreamName()}
		p.inputRetention = e.Retention.D()
		p.inputRetentionField = "edges[" + e.Name + "].retention"
		for i := 0; i < e.Partitions; i++ {
			p.inputs = append(p.inputs, edge.Input{
				Name: e.Name + "/" + strconv.Itoa(i), Partition: i,
				Stream: spec.StreamName(), Subject: spec.Subject(i), Frames: true,
			})
		}
	}
	if op.Output != "" {
		e, ok := c.Edge(op.Output)
		if !ok {
			return plan{}, fmt.Errorf("stream: refusing to start: operator %s writes unknown edge %q", operator, op.Output)
		}
		// A result edge is written as the sink's effect says: at least
		// once; transactionally, as is an outbox, a transactional edge of
		// intents for the dispatcher (edge.ForContract); or applied to a
		// versioned view.
		spec := edge.ForContract(c, e)
		p.output = &spec
		p.outputJSON = e.JSON()
		p.maxPendingEpochs = c.Sink.MaxPendingEpochs
		p.outputView = p.outputJSON && c.Sink.Effect == contracts.EffectVersionedUpsert
		p.outbox = p.outputJSON && c.Sink.Effect == contracts.EffectOutbox
	}
	if p.maxBuffered <= 0 {
		p.maxBuffered = 64
	}
	return p, nil
}

// inputNames lists the names of the inputs.
func (p plan) inputNames() []string {
	names := make([]string, len(p.inputs))
	for i, in := range p.inputs {
		names[i] = in.Name
	}
	return names
}
