package status

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/internal/status/meta"
	"github.com/weirflow/weir/pkg/view"
)

// Status is a pipeline as it runs: the contract's graph, each instance's
// counters from its status endpoint, the edges' streams and consumers, and
// the checkpoint log. Gather collects it live from NATS; `weir status` and
// the coordinator's status page (Handler) show it.
type Status struct {
	Pipeline    string    `json:"pipeline"`
	Contract    string    `json:"contract"`
	Fingerprint string    `json:"fingerprint"`
	Gathered    time.Time `json:"gathered"`
	// Operators in the contract's order.
	Operators []Operator `json:"operators"`
	// Edges start with the ingress, then the contract's edges.
	Edges        []Edge           `json:"edges"`
	Coordinators []CoordinatorRef `json:"coordinators"`
	// Leader holds the coordinator lease; empty when no lease is live.
	Leader string `json:"leader,omitempty"`
	// Checkpoints are the last HistoryLength records, newest first.
	Checkpoints []Checkpoint `json:"checkpoints"`
	// Latest is the latest completed checkpoint; nil before the first.
	Latest *Latest `json:"latest,omitempty"`
	// DeadLetters and SideOutputs count what the pipeline's dead-letter
	// stream holds.
	DeadLetters int64 `json:"dead_letters"`
	SideOutputs int64 `json:"side_outputs"`
	// Bottleneck names where the pipeline is stuck, if anywhere.
	Bottleneck *Bottleneck `json:"bottleneck,omitempty"`
	// HotKeys are the instances whose records crowd into one key group.
	HotKeys []HotKey `json:"hot_keys,omitempty"`
	// Problems lists what could not be gathered.
	Problems []string `json:"problems,omitempty"`
}

// Operator is one operator of the graph with its running instances.
type Operator struct {
	ID      string   `json:"id"`
	Service string   `json:"service"`
	Input   string   `json:"input"`
	Output  string   `json:"output,omitempty"`
	Keying  string   `json:"keying"`
	State   []string `json:"state,omitempty"`
	// Totals over the instances; Watermark is the slowest instance's.
	In        int64     `json:"in"`
	Out       int64     `json:"out"`
	Watermark time.Time `json:"watermark,omitzero"`
	Lag       int64     `json:"lag"`
	// DeadLetters and SideOutputs count the operator's letters in the
	// dead-letter stream.
	DeadLetters int64      `json:"dead_letters"`
	SideOutputs int64      `json:"side_outputs"`
	Instances   []Instance `json:"instances"`
}

// Instance is one running (or registered but silent) operator instance.
type Instance struct {
	Instance string `json:"instance"`
	// Service is the micro service's ID; empty when discovery missed it.
	Service    string `json:"service,omitempty"`
	Version    string `json:"version,omitempty"`
	Registered bool   `json:"registered"`
	// Ingress is set for an instance reading the ingress.
	Ingress    bool      `json:"ingress"`
	Started    time.Time `json:"started,omitzero"`
	Responding bool      `json:"responding"`
	// Stats are the instance's counters since it started.
	Stats  Stats   `json:"stats"`
	Inputs []Input `json:"inputs"`
	Lag    int64   `json:"lag"`
	Error  string  `json:"error,omitempty"`
}

// Input is one input partition of an instance and its durable consumer.
type Input struct {
	Name      string `json:"name"`
	Partition int    `json:"partition"`
	Stream    string `json:"stream"`
	Subject   string `json:"subject"`
	Consumer  string `json:"consumer"`
	// Pending messages not delivered yet and AckPending delivered but not
	// acknowledged; Lag is both.
	Pending    uint64 `json:"pending"`
	AckPending int    `json:"ack_pending"`
	Lag        int64  `json:"lag"`
	// Delivered is the stream sequence last delivered.
	Delivered uint64 `json:"delivered"`
	Paused    bool   `json:"paused"`
	// Busy is the share of the instance's last seconds spent decoding and
	// processing this partition's messages.
	Busy float64 `json:"busy,omitempty"`
	// Watermark is the input's watermark, when the instance reports it.
	Watermark time.Time `json:"watermark,omitzero"`
	Error     string    `json:"error,omitempty"`
}

// Edge is a stream of the graph: the ingress or an internal edge.
type Edge struct {
	Name    string `json:"name"`
	Ingress bool   `json:"ingress"`
	Stream  string `json:"stream"`
	// Streams are the streams an ingress placed over several is in
	// (ingress.streams); Stream is then the name they share.
	Streams []string `json:"streams,omitempty"`
	Format  string   `json:"format"`
	// From is the operator writing the edge; empty for the ingress.
	From       string      `json:"from,omitempty"`
	To         []string    `json:"to"`
	Messages   uint64      `json:"messages"`
	Bytes      uint64      `json:"bytes"`
	Partitions []Partition `json:"partitions"`
	// Lag is what its readers have not processed yet.
	Lag   int64  `json:"lag"`
	Error string `json:"error,omitempty"`
	// Mirror is set for an ingress the pipeline reads as a mirror of
	// the stream in the ingress's account (ingress.Mirror): how far it
	// is behind, which Lag does not count.
	Mirror *Mirror `json:"mirror,omitempty"`
}

// Mirror is the state of a pipeline's mirror of the ingress.
type Mirror struct {
	// Lag is how many messages of the ingress it has not copied yet.
	Lag uint64 `json:"lag"`
	// Active is how long ago it last heard from the ingress; -1: never.
	Active time.Duration `json:"active"`
	Error  string        `json:"error,omitempty"`
}

// mirrorSilence is how long a mirror may hear nothing from its ingress,
// which heartbeats every second, before the status calls it a problem.
const mirrorSilence = 10 * time.Second

// Partition is one partition of an edge.
type Partition struct {
	Partition int    `json:"partition"`
	Subject   string `json:"subject"`
	Messages  uint64 `json:"messages"`
	Lag       int64  `json:"lag"`
}

// CoordinatorRef is a running coordinator found by discovery.
type CoordinatorRef struct {
	Holder  string `json:"holder"`
	Service string `json:"service"`
	Leader  bool   `json:"leader"`
	// Memory is the resident memory, in bytes, the coordinator declares
	// it stays under.
	Memory int64 `json:"memory,omitempty"`
}

// Checkpoint is one line of the checkpoint log with its figures: the
// slowest instance's start delay, alignment, snapshot and upload times.
type Checkpoint struct {
	ID         uint64        `json:"id"`
	Status     string        `json:"status"`
	Triggered  time.Time     `json:"triggered"`
	Completed  time.Time     `json:"completed,omitzero"`
	Took       time.Duration `json:"took"`
	StartDelay time.Duration `json:"start_delay"`
	Alignment  time.Duration `json:"alignment"`
	Snapshot   time.Duration `json:"snapshot"`
	Upload     time.Duration `json:"upload"`
	FullBytes  int64         `json:"full_bytes"`
	NewBytes   int64         `json:"new_bytes"`
	Acks       int           `json:"acks"`
	Expected   int           `json:"expected"`
	Savepoint  string        `json:"savepoint,omitempty"`
	Reason     string        `json:"reason,omitempty"`
}

// Latest is the latest completed checkpoint.
type Latest struct {
	ID        uint64    `json:"id"`
	Completed time.Time `json:"completed"`
	Instances int       `json:"instances"`
}

// HistoryLength is how many checkpoint records Gather reads.
const HistoryLength = 20

// DiscoveryWait bounds how long Gather waits for $SRV.INFO replies when
// some registered instance has not answered.
const DiscoveryWait = 300 * time.Millisecond

// Gather reads the pipeline's status from NATS: the graph from the
// contract, the instances from micro discovery and their status endpoints,
// lag from the durable consumers, edge sizes from stream info and the
// checkpoint log from the pipeline's KV bucket. What cannot be read is
// listed in Problems; the error is for a context or connection that fails.
func Gather(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, c *contracts.Contract) (Status, error) {
	p := c.Pipeline
	s := Status{Pipeline: p, Contract: c.File, Fingerprint: c.Fingerprint(), Gathered: time.Now().UTC()}
	store, err := checkpoint.Existing(ctx, js, p)
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
		store = nil
	case err != nil:
		if ctx.Err() != nil || nc.IsClosed() {
			return s, err
		}
		s.problem("checkpoint bucket: %v", err)
		store = nil
	}
	registered := map[string]checkpoint.Instance{}
	if store != nil {
		if registered, err = store.Instances(ctx); err != nil {
			s.problem("instance registrations: %v", err)
		}
		if s.Leader, err = store.LeaseHolder(ctx); err != nil {
			s.problem("coordinator lease: %v", err)
		}
	}
	found, coordinators, err := s.discover(ctx, nc, c, len(registered), s.Leader)
	if err != nil {
		return s, err
	}
	if store != nil {
		s.Checkpoints, s.Latest = s.history(ctx, store)
	}
	for _, co := range coordinators {
		co.Leader = co.Holder == s.Leader
		s.Coordinators = append(s.Coordinators, co)
	}
	slices.SortFunc(s.Coordinators, func(a, b CoordinatorRef) int { return cmp.Compare(a.Holder, b.Holder) })

	for _, op := range c.Operators {
		o := Operator{ID: op.ID, Service: op.Service, Input: op.Input, Output: op.Output, Keying: op.Keying, State: op.State}
		ids := map[string]bool{}
		for k, r := range registered {
			if r.Operator == op.ID {
				ids[k] = true
			}
		}
		for k, info := range found {
			if info.Metadata[meta.Operator] == op.ID {
				ids[k] = true
			}
		}
		for k := range ids {
			var in Instance
			if r, ok := registered[k]; ok {
				in.Instance, in.Registered, in.Ingress, in.Started = r.Instance, true, r.Ingress, r.Started
			}
			if info, ok := found[k]; ok {
				in.Instance, in.Service, in.Version = info.Metadata[meta.Instance], info.ID, info.Version
			}
			o.Instances = append(o.Instances, in)
		}
		slices.SortFunc(o.Instances, func(a, b Instance) int {
			return cmp.Or(cmp.Compare(len(a.Instance), len(b.Instance)), cmp.Compare(a.Instance, b.Instance))
		})
		var wg sync.WaitGroup
		for i := range o.Instances {
			wg.Go(func() { gatherInstance(ctx, nc, js, c, op, found, &o.Instances[i]) })
		}
		wg.Wait()
		for _, in := range o.Instances {
			o.In += in.Stats.In
			o.Out += in.Stats.Out
			o.Lag += in.Lag
			if wm := in.Stats.Watermark; !wm.IsZero() && (o.Watermark.IsZero() || wm.Before(o.Watermark)) {
				o.Watermark = wm
			}
		}
		s.Operators = append(s.Operators, o)
	}
	if err := ctx.Err(); err != nil {
		return s, err
	}
	s.edges(ctx, js, c)
	s.deadLetters(ctx, js)
	s.Bottleneck = s.bottleneck(c.Recovery.CheckpointInterval.D())
	s.HotKeys = s.hotKeys()
	return s, ctx.Err()
}

// HotSkew is the key-group skew from which an instance's load counts as
// hot: its busiest key group carries this many times the mean.
const HotSkew = 4

// hotMinRecords is the fewest records a skew is judged on.
const hotMinRecords = 100

// HotKey is an instance whose records crowd into one key group.
type HotKey struct {
	Operator string  `json:"operator"`
	Instance string  `json:"instance"`
	Group    int     `json:"group"`
	Share    float64 `json:"share"`
	Skew     float64 `json:"skew"`
	Records  int64   `json:"records"`
}

func (h HotKey) String() string {
	return fmt.Sprintf("%s/%s: key group %d carries %.0f%% of %d records (%.0f× the mean)", h.Operator, h.Instance, h.Group, 100*h.Share, h.Records, h.Skew)
}

func (s *Status) hotKeys() []HotKey {
	var out []HotKey
	for _, o := range s.Operators {
		if len(o.State) == 0 {
			continue // stateless: nothing holds a key to one instance
		}
		for _, in := range o.Instances {
			st := in.Stats
			if st.KeyGroupSkew >= HotSkew && st.KeyGroupRecords >= hotMinRecords {
				out = append(out, HotKey{Operator: o.ID, Instance: in.Instance, Group: st.HotKeyGroup, Share: st.HotShare, Skew: st.KeyGroupSkew, Records: st.KeyGroupRecords})
			}
		}
	}
	return out
}

// BusyThreshold is the share of the wall clock above which an instance
// counts as busy.
const BusyThreshold = 0.5

// Bottleneck names where a pipeline is stuck, by the specification's rule:
// the operator that is busy and not itself waiting on its output. In weir
// an operator writes to a durable stream, so a slow operator does not slow
// its upstream down — its input lag grows instead — and the busiest
// instance is the bottleneck; one that mostly waits for the broker to
// store its output names the broker.
type Bottleneck struct {
	Operator string `json:"operator,omitempty"`
	Instance string `json:"instance,omitempty"`
	// Busy and Backpressured are the instance's shares of the last
	// seconds.
	Busy          float64 `json:"busy"`
	Backpressured float64 `json:"backpressured"`
	// Partition is its input partition furthest behind, and Lag how far;
	// Busiest the partition it spent the most time on, and BusiestShare
	// that share of the clock.
	Partition    string  `json:"partition,omitempty"`
	Lag          int64   `json:"lag"`
	Busiest      string  `json:"busiest,omitempty"`
	BusiestShare float64 `json:"busiest_share,omitempty"`
	// StateIO is the share of the clock it spent committing state.
	StateIO float64 `json:"state_io"`
	// TimersFired and StateKeys are the instance's timer and state
	// figures: timer storms and state growth are where busy time goes.
	TimersFired int64 `json:"timers_fired"`
	StateKeys   int64 `json:"state_keys"`
	// Alignment is set when checkpoint alignment, not steady processing,
	// is what stalls: the latest checkpoint's alignment took more than a
	// quarter of the interval.
	Alignment string `json:"alignment,omitempty"`
	// Summary says it in a line.
	Summary string `json:"summary"`
}

// bottleneck applies the rule to the gathered instances.
func (s *Status) bottleneck(interval time.Duration) *Bottleneck {
	b := &Bottleneck{}
	var at *Instance
	var atOp *Operator
	for i := range s.Operators {
		o := &s.Operators[i]
		for j := range o.Instances {
			in := &o.Instances[j]
			if in.Stats.Busy+in.Stats.Backpressured >= BusyThreshold && (at == nil || in.Stats.Busy+in.Stats.Backpressured > at.Stats.Busy+at.Stats.Backpressured) {
				at, atOp, b.Operator = in, o, o.ID
			}
		}
	}
	for _, c := range s.Checkpoints {
		if c.Status != "complete" {
			continue
		}
		if interval > 0 && c.Alignment > interval/4 {
			b.Alignment = fmt.Sprintf("checkpoint %d spent %s aligning barriers, more than a quarter of the %s interval: alignment, not processing, stalls the pipeline", c.ID, c.Alignment.Round(time.Millisecond), interval)
		}
		break
	}
	if at == nil {
		b.Summary = fmt.Sprintf("none: no instance is busy more than %.0f%% of the time; the pipeline keeps up with its input", 100*BusyThreshold)
		if b.Alignment != "" {
			b.Summary = b.Alignment
		}
		return b
	}
	b.Instance, b.Busy, b.Backpressured = at.Instance, at.Stats.Busy, at.Stats.Backpressured
	b.TimersFired = at.Stats.TimersFired
	for _, n := range at.Stats.StateKeys {
		b.StateKeys += n
	}
	b.StateIO = at.Stats.StateIO
	for _, in := range at.Inputs {
		if b.Partition == "" || in.Lag > b.Lag {
			b.Partition, b.Lag = in.Name, in.Lag
		}
		if in.Busy > b.BusiestShare {
			b.Busiest, b.BusiestShare = in.Name, in.Busy
		}
	}
	who := fmt.Sprintf("operator %s (instance %s)", b.Operator, b.Instance)
	if b.Backpressured > b.Busy {
		b.Summary = fmt.Sprintf("the broker: %s spends %.0f%% of its time waiting for its output to be stored, %.0f%% processing", who, 100*b.Backpressured, 100*b.Busy)
	} else {
		b.Summary = fmt.Sprintf("%s: busy %.0f%% of the time (committing state %.0f%%), waiting on its output %.0f%%; its input %s is %d behind",
			who, 100*b.Busy, 100*b.StateIO, 100*b.Backpressured, b.Partition, b.Lag)
		if b.Busiest != "" {
			b.Summary += fmt.Sprintf("; its busiest partition %s takes %.0f%% of the clock", b.Busiest, 100*b.BusiestShare)
		}
		b.Summary += fmt.Sprintf("; %d timers fired, %d state keys", b.TimersFired, b.StateKeys)
	}
	// A hot key matters where state holds each key to one instance.
	if st := at.Stats; len(atOp.State) > 0 && st.KeyGroupSkew >= HotSkew && st.KeyGroupRecords >= hotMinRecords {
		b.Summary += fmt.Sprintf("; a hot key: key group %d carries %.0f%% of its records (%.0f× the mean)", st.HotKeyGroup, 100*st.HotShare, st.KeyGroupSkew)
	}
	if b.Alignment != "" {
		b.Summary += "; " + b.Alignment
	}
	return b
}

func (s *Status) problem(format string, args ...any) {
	s.Problems = append(s.Problems, fmt.Sprintf(format, args...))
}

// discover asks the pipeline's micro services — its operators' and its
// coordinators', by name — for their info and keeps the weir operators
// and coordinators of the pipeline. It waits until want operator instances
// and the leader (if any) answered, or DiscoveryWait. Asking by name
// reaches no other pipeline's coordinators and only the services of other
// pipelines' operators of the same name, which may not answer it.
func (s *Status) discover(ctx context.Context, nc *nats.Conn, c *contracts.Contract, want int, leader string) (map[string]micro.Info, []CoordinatorRef, error) {
	pipeline := c.Pipeline
	names := []string{CoordinatorService(pipeline)}
	for _, op := range c.Operators {
		if n := ServiceName(op.ID); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	inbox := natsconn.AnswerInbox(nc)
	replies := make(chan *nats.Msg, 256)
	sub, err := nc.ChanSubscribe(inbox, replies)
	if err != nil {
		return nil, nil, fmt.Errorf("status: discovery: %w", err)
	}
	defer sub.Unsubscribe()
	for _, name := range names {
		subject, err := micro.ControlSubject(micro.InfoVerb, name, "")
		if err != nil {
			return nil, nil, fmt.Errorf("status: discovery: %w", err)
		}
		if err := nc.PublishRequest(subject, inbox, nil); err != nil {
			return nil, nil, fmt.Errorf("status: discovery: %w", err)
		}
	}
	found := map[string]micro.Info{}
	var coordinators []CoordinatorRef
	timer := time.NewTimer(DiscoveryWait)
	defer timer.Stop()
	leaderFound := leader == ""
	for want == 0 || len(found) < want || !leaderFound {
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-timer.C:
			return found, coordinators, nil
		case m := <-replies:
			var info micro.Info
			// Replies are the micro framework's, from any service that
			// answers the name: one that is none of the pipeline's is not
			// for this discovery.
			if json.Unmarshal(m.Data, &info) != nil || info.Metadata[meta.Pipeline] != pipeline {
				continue
			}
			switch {
			case info.Name == CoordinatorService(pipeline):
				ref, err := coordinatorOf(info)
				if err != nil {
					s.problem("%v", err)
				}
				coordinators = append(coordinators, ref)
				leaderFound = leaderFound || ref.Holder == leader
			case strings.HasPrefix(info.Name, servicePrefix) && info.Metadata[meta.Operator] != "":
				found[info.Metadata[meta.Operator]+"/"+info.Metadata[meta.Instance]] = info
			}
		}
	}
	return found, coordinators, nil
}

// gatherInstance asks an instance for its counters and reads its
// consumers.
func gatherInstance(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, c *contracts.Contract, op contracts.Operator, found map[string]micro.Info, in *Instance) {
	var reply Stats
	in.Stats = Stats{Operator: op.ID, Instance: in.Instance}
	info, running := found[op.ID+"/"+in.Instance]
	subject := ""
	for _, e := range info.Endpoints {
		if e.Name == "status" {
			subject = e.Subject
		}
	}
	switch {
	case !running:
		in.Error = "registered, but not answering discovery: not running"
	case subject == "":
		in.Error = "no status endpoint"
	default:
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		got, err := requestStats(rctx, nc, subject)
		cancel()
		if err != nil {
			in.Error = err.Error()
		} else {
			reply = got
			in.Responding = true
			in.Stats = reply
		}
	}
	prefix := edge.ConsumerPrefix(c.Pipeline, op.ID, in.Instance)
	for _, input := range inputsOf(c, op) {
		input.Consumer = edge.ConsumerName(prefix, input.Name)
		input.Paused = slices.Contains(in.Stats.Paused, input.Name)
		input.Watermark = reply.InputWatermarks[input.Name]
		input.Busy = reply.InputBusy[input.Name]
		ci, err := consumerInfo(ctx, js, input.Stream, input.Consumer)
		if err != nil {
			input.Error = err.Error()
		} else {
			input.Pending, input.AckPending, input.Delivered = ci.NumPending, ci.NumAckPending, ci.Delivered.Stream
			input.Lag = int64(ci.NumPending) + int64(ci.NumAckPending)
		}
		in.Lag += input.Lag
		in.Inputs = append(in.Inputs, input)
	}
}

func consumerInfo(ctx context.Context, js jetstream.JetStream, streamName, name string) (*jetstream.ConsumerInfo, error) {
	cons, err := js.Consumer(ctx, streamName, name)
	if err != nil {
		return nil, err
	}
	return cons.CachedInfo(), nil
}

// inputsOf lists an operator's input partitions as the runtime names them.
func inputsOf(c *contracts.Contract, op contracts.Operator) []Input {
	var out []Input
	if op.Input == "ingress" {
		for i := range c.Ingress.Partitions {
			out = append(out, Input{Name: "ingress/" + strconv.Itoa(i), Partition: i, Stream: c.Ingress.StreamOf(i), Subject: c.Ingress.Subject(i)})
		}
		return out
	}
	e, ok := c.Edge(op.Input)
	if !ok {
		return nil
	}
	spec := edge.Spec{Pipeline: c.Pipeline, Edge: e.Name, Partitions: e.Partitions}
	for i := range e.Partitions {
		out = append(out, Input{Name: e.Name + "/" + strconv.Itoa(i), Partition: i, Stream: spec.StreamName(), Subject: spec.Subject(i)})
	}
	return out
}

// edges reads the size of the ingress and every edge stream, per
// partition, and adds up their readers' lag.
func (s *Status) edges(ctx context.Context, js jetstream.JetStream, c *contracts.Contract) {
	all := []Edge{{Name: "ingress", Ingress: true, Stream: c.Ingress.Stream, Format: "json"}}
	if c.Ingress.StreamCount() > 1 {
		all[0].Streams = c.Ingress.StreamNames()
	}
	parts := []int{c.Ingress.Partitions}
	filters := []string{c.Ingress.SubjectPrefix + ".*"}
	subject := []func(int) string{c.Ingress.Subject}
	for _, e := range c.Edges {
		spec := edge.Spec{Pipeline: c.Pipeline, Edge: e.Name, Partitions: e.Partitions}
		if e.JSON() && c.Sink.Effect == contracts.EffectVersionedUpsert {
			// A versioned view: a KV bucket, keyed by key and window.
			b := view.Bucket(c.Pipeline, e.Name)
			all = append(all, Edge{Name: e.Name, Stream: "KV_" + b, Format: "view"})
			parts = append(parts, 0)
			filters = append(filters, "$KV."+b+".>")
			subject = append(subject, spec.Subject)
			continue
		}
		all = append(all, Edge{Name: e.Name, Stream: spec.StreamName(), Format: cmp.Or(e.Format, contracts.FormatFrames)})
		parts = append(parts, e.Partitions)
		filters = append(filters, spec.Subjects())
		subject = append(subject, spec.Subject)
	}
	for i := range all {
		e := &all[i]
		for _, op := range s.Operators {
			if op.Output == e.Name {
				e.From = op.ID
			}
			if op.Input != e.Name {
				continue
			}
			e.To = append(e.To, op.ID)
		}
		e.Partitions = make([]Partition, parts[i])
		for p := range e.Partitions {
			e.Partitions[p] = Partition{Partition: p, Subject: subject[i](p)}
		}
		for _, op := range s.Operators {
			if op.Input != e.Name {
				continue
			}
			for _, in := range op.Instances {
				for _, input := range in.Inputs {
					if input.Partition < len(e.Partitions) {
						e.Partitions[input.Partition].Lag += input.Lag
					}
					e.Lag += input.Lag
				}
			}
		}
		names := e.Streams
		if len(names) == 0 {
			names = []string{e.Stream}
		}
		for _, name := range names {
			if err := s.streamState(ctx, js, e, name, filters[i]); err != nil {
				e.Error = err.Error()
				break
			}
		}
	}
	s.Edges = all
}

// streamState adds the messages and bytes of stream name, one of edge e's,
// to e's, and the state of an ingress's mirror.
func (s *Status) streamState(ctx context.Context, js jetstream.JetStream, e *Edge, name, filter string) error {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return err
	}
	e.Messages, e.Bytes = e.Messages+info.State.Msgs, e.Bytes+info.State.Bytes
	if m := info.Mirror; m != nil && e.Ingress {
		if e.Mirror == nil {
			e.Mirror = &Mirror{Active: m.Active}
		}
		e.Mirror.Lag += m.Lag
		if m.Active < 0 || m.Active > e.Mirror.Active {
			e.Mirror.Active = m.Active
		}
		if m.Error != nil {
			e.Mirror.Error = m.Error.Error()
			s.problem("the ingress mirror %s: %s", name, e.Mirror.Error)
		} else if m.Active < 0 || m.Active > mirrorSilence {
			s.problem("the ingress mirror %s has not heard from the ingress for %s (%d messages behind): its consumer in the ingress's account may be missing (weir provision -ingress) or the accounts not sharing it (weir auth)",
				name, m.Active.Round(time.Second), m.Lag)
		}
	}
	for p := range e.Partitions {
		if n, ok := info.State.Subjects[e.Partitions[p].Subject]; ok {
			e.Partitions[p].Messages = n
		}
	}
	return nil
}

// deadLetters counts the dead-letter stream's letters per operator.
func (s *Status) deadLetters(ctx context.Context, js jetstream.JetStream) {
	st, err := js.Stream(ctx, deadletter.StreamName(s.Pipeline))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return
	}
	if err != nil {
		s.problem("dead letters: %v", err)
		return
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter("weir."+s.Pipeline+".>"))
	if err != nil {
		s.problem("dead letters: %v", err)
		return
	}
	for i := range s.Operators {
		o := &s.Operators[i]
		o.DeadLetters = int64(info.State.Subjects[deadletter.Subject(s.Pipeline, o.ID)])
		o.SideOutputs = int64(info.State.Subjects[deadletter.SideSubject(s.Pipeline, o.ID)])
		s.DeadLetters += o.DeadLetters
		s.SideOutputs += o.SideOutputs
	}
}

// history reads the last HistoryLength checkpoint records, newest first,
// and the latest completed checkpoint.
func (s *Status) history(ctx context.Context, store *checkpoint.Store) ([]Checkpoint, *Latest) {
	var latest *Latest
	switch l, _, err := store.Latest(ctx); {
	case err == nil:
		latest = &Latest{ID: l.Checkpoint, Completed: l.Completed, Instances: len(l.Manifests)}
	case !errors.Is(err, checkpoint.ErrNotFound):
		s.problem("latest checkpoint: %v", err)
	}
	recs, err := store.Recent(ctx, HistoryLength)
	if err != nil {
		s.problem("checkpoint log: %v", err)
	}
	var out []Checkpoint
	for _, r := range recs {
		full, inc := r.Sizes()
		out = append(out, Checkpoint{ID: r.Checkpoint, Status: r.Status, Triggered: r.Triggered, Completed: r.Completed,
			Took:       r.Duration(),
			StartDelay: r.Max(func(a checkpoint.Ack) time.Duration { return a.StartDelay }),
			Alignment:  r.Max(func(a checkpoint.Ack) time.Duration { return a.Alignment }),
			Snapshot:   r.Max(func(a checkpoint.Ack) time.Duration { return a.Snapshot }),
			Upload:     r.Max(func(a checkpoint.Ack) time.Duration { return a.Upload }),
			FullBytes:  full, NewBytes: inc, Acks: len(r.Acks), Expected: len(r.Expected),
			Savepoint: r.Savepoint, Reason: r.Reason})
	}
	return out, latest
}
