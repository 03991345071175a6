package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/catalog"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/redact"
	"github.com/weirflow/weir/internal/status"
	"github.com/weirflow/weir/internal/watermark"
	"github.com/weirflow/weir/pkg/stream"
)

// replayCmd is `weir replay`: the pipeline over a closed range of its
// retained ingress, into a new result generation — pipeline
// <pipeline>-<generation>, with its own streams, buckets and state — ended
// with a final watermark so every window closes. It runs the shipped
// pipelines' operators in this process; a pipeline of other services runs
// them with the flags it prints.
func replayCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, srv, pipeline := ctlFlags("weir replay", getenv)
	srv.operatorFlags(fs)
	var from, to, gen, data, reason string
	var timeout time.Duration
	contract := newContractFlag(fs, pipeline, "the contract to replay with: a file or a shipped contract's name (default: the shipped contract of -pipeline); a changed one replays the change")
	fs.String(&from, "from", "WEIR_REPLAY_FROM", "", "the first ingress record: a stream sequence, or an RFC 3339 time (the first record stored at or after it)")
	fs.String(&to, "to", "WEIR_REPLAY_TO", "", "the last ingress record: a stream sequence, or an RFC 3339 time (the last record stored at or before it)")
	fs.String(&gen, "generation", "WEIR_REPLAY_GENERATION", "", "the result generation's name: results go to pipeline <pipeline>-<generation> (default r<time>)")
	fs.String(&data, "data", "WEIR_DATA_DIR", "", "the replay's state directory (default: a new temporary one)")
	fs.Duration(&timeout, "timeout", "WEIR_REPLAY_TIMEOUT", 30*time.Minute, "give up when the replay has not ended by then")
	fs.String(&reason, "reason", "WEIR_REASON", "", "why, for the audit stream")
	actor := actorFlag(fs)
	c, err := contract.parse(args, stdout, stderr)
	if err != nil {
		return err
	}
	if from == "" || to == "" {
		return fmt.Errorf("weir replay: -from and -to are required: the range is closed")
	}
	for _, f := range c.State.Families {
		if f.Bound == contracts.BoundWindow && c.Time.Domain != contracts.DomainEvent {
			return fmt.Errorf("weir replay: pipeline %s keeps windows in %s time: a replay's end closes windows of event time only, so its last windows would never fire", c.Pipeline, c.Time.Domain)
		}
	}
	if gen == "" {
		gen = "r" + time.Now().UTC().Format("20060102150405")
	}
	replayed, err := generationOf(c, gen)
	if err != nil {
		return fmt.Errorf("weir replay: %w", err)
	}
	nc, js, st, err := openIngress(ctx, srv, c, replayed, true)
	if err != nil {
		return fmt.Errorf("weir replay: %w", err)
	}
	defer nc.Close()
	first, last := st.CachedInfo().State.FirstSeq, st.CachedInfo().State.LastSeq
	lo, err := replayBound(ctx, st, from, false)
	if err != nil {
		return err
	}
	hi, err := replayBound(ctx, st, to, true)
	if err != nil {
		return err
	}
	switch {
	case lo < first:
		return fmt.Errorf("weir replay: the range begins at sequence %d, and stream %s now begins at %d: retention removed the records before; replay from %d or later", lo, c.Ingress.Stream, first, first)
	case hi > last:
		return fmt.Errorf("weir replay: the range ends at sequence %d, and stream %s holds up to %d", hi, c.Ingress.Stream, last)
	case hi < lo:
		return fmt.Errorf("weir replay: the range %d..%d is empty", lo, hi)
	}
	r := &stream.Replay{Generation: gen, From: lo, Until: hi}
	factories := shippedFactories(c.Pipeline)
	if factories == nil {
		fmt.Fprintf(stdout, "pipeline %s is not one weir ships: run each of its services with\n  -replay-generation %s -replay-from %d -replay-until %d -data <a new directory>\nand its results go to pipeline %s\n", c.Pipeline, gen, lo, hi, replayed)
		return nil
	}
	if data == "" {
		if data, err = mkTemp("weir-replay-" + replayed); err != nil {
			return err
		}
		defer os.RemoveAll(data)
	}
	if _, err := audit.Append(ctx, js, c.Pipeline, audit.Record{Actor: *actor, Action: audit.ActionReplay, Target: replayed,
		From: fmt.Sprintf("%s sequences %d..%d", c.Ingress.Stream, lo, hi), To: "pipeline " + replayed, Reason: reason,
		Detail: map[string]any{"contract": c.File}}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "replaying %s sequences %d..%d of pipeline %s into generation %s (pipeline %s), state in %s\n", c.Ingress.Stream, lo, hi, c.Pipeline, gen, replayed, data)
	began := time.Now()
	rts, g, rc, err := runGeneration(ctx, c, factories, srv, data, r, replayed)
	if err != nil {
		return fmt.Errorf("weir replay: %w", err)
	}
	ended, err := awaitReplay(ctx, nc, js, rc, rts, timeout, g)
	if serr := g.stop(); err == nil {
		err = serr
	}
	// The replay's consumers on the live ingress go with it.
	for _, op := range c.Operators {
		if op.Input != contracts.InputIngress {
			continue
		}
		for p := range c.Ingress.Partitions {
			name := edge.ConsumerName(edge.ConsumerPrefix(replayed, op.ID, "0"), fmt.Sprintf("%s/%d", contracts.InputIngress, p))
			if derr := st.DeleteConsumer(ctx, name); derr != nil && !errors.Is(derr, jetstream.ErrConsumerNotFound) {
				fmt.Fprintf(stderr, "weir replay: consumer %s of the replay is left on the ingress stream; delete it: %v\n", name, derr)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("weir replay: %w", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATOR\tIN\tOUT\tDEAD LETTERS\tSIDE OUTPUT")
	for _, o := range ended.Operators {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", o.ID, o.In, o.Out, o.DeadLetters, o.SideOutputs)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "replay ended in %s: results are in pipeline %s; compare them with weir compare -pipeline %s -with %s\n",
		time.Since(began).Round(time.Millisecond), replayed, c.Pipeline, replayed)
	return nil
}

// replayBound resolves -from (last false) or -to (last true): a sequence,
// or a time the stream's stored times are measured against.
func replayBound(ctx context.Context, st jetstream.Stream, v string, last bool) (uint64, error) {
	if n, err := strconv.ParseUint(v, 10, 64); err == nil {
		return n, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0, fmt.Errorf("weir replay: %q is neither a stream sequence nor an RFC 3339 time", v)
	}
	if last {
		t = t.Add(time.Nanosecond) // the first record after it ends the range
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &t})
	if err != nil {
		return 0, err
	}
	m, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
	if errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		// Nothing stored at or after t.
		if last {
			return st.CachedInfo().State.LastSeq, nil
		}
		return 0, fmt.Errorf("weir replay: stream %s stored nothing at or after %s", st.CachedInfo().Config.Name, v)
	}
	if err != nil {
		return 0, err
	}
	meta, err := m.Metadata()
	if err != nil {
		return 0, err
	}
	if last {
		return meta.Sequence.Stream - 1, nil
	}
	return meta.Sequence.Stream, nil
}

// awaitReplay waits until the replay has read its range and everything it
// read has flowed through: every ingress input ended, no edge lagging, an
// event-time pipeline's every watermark at the end (replayEnded), no
// step's results still being stored, and nothing moving over four looks,
// 300 ms apart. (What a step committed and had not published when the
// replay stops is published as the operators stop.)
func awaitReplay(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, c *contracts.Contract, rts []*stream.Runtime, timeout time.Duration, g *group) (status.Status, error) {
	ended := func(s status.Status) (bool, string) { return replayEnded(c, rts, s) }
	return awaitQuiet(ctx, nc, js, c, rts, g, "replay", timeout, ended, func(status.Status) bool { return true })
}

// awaitQuiet gathers the status of generation c every 300 ms while its
// runtimes rts run in g. Once ready holds, no step's results are still
// being stored, and the runtimes' counts stay the same over four looks in
// a row, it calls quiet, once for each such quiet spell, and returns when
// quiet says so. It also returns when ctx ends, g stops (what names the
// run: replay, shadow), or a timeout other than 0 passes, saying why it
// was not quiet yet.
func awaitQuiet(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, c *contracts.Contract, rts []*stream.Runtime, g *group,
	what string, timeout time.Duration, ready func(status.Status) (bool, string), quiet func(status.Status) bool) (status.Status, error) {
	var deadline <-chan time.Time
	if timeout > 0 {
		deadline = time.After(timeout)
	}
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	var prev string
	still, told := 0, false
	why := "no status read yet"
	var last status.Status
	for {
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-g.done:
			return last, fmt.Errorf("the %s stopped: %w", what, g.err)
		case <-deadline:
			return last, fmt.Errorf("the %s did not end within %s: %s", what, timeout, why)
		case <-tick.C:
		}
		s, err := status.Gather(ctx, nc, js, c)
		if err != nil {
			continue
		}
		last = s
		var b strings.Builder
		storing := false
		for _, rt := range rts {
			st := rt.Stats()
			fmt.Fprintf(&b, "%s:%d/%d ", st.Operator, st.In, st.Out)
			storing = storing || st.Storing > 0 // a step's results are still being stored downstream
		}
		var ok bool
		if ok, why = ready(s); ok {
			why = "results still moving"
		}
		if !ok || storing || b.String() != prev {
			prev, still, told = b.String(), 0, false
			continue
		}
		if still++; still < 3 || told {
			continue
		}
		told = true
		if quiet(s) {
			return s, nil
		}
	}
}

// replayEnded reports whether every ingress input ended and every operator
// caught up (and, in event time, reached the final watermark).
func replayEnded(c *contracts.Contract, rts []*stream.Runtime, s status.Status) (bool, string) {
	for i, rt := range rts {
		st := rt.Stats()
		op := c.Operators[i]
		if op.Input == contracts.InputIngress && st.Ended < int64(c.Ingress.Partitions) {
			return false, fmt.Sprintf("%s has read %d of %d ingress partitions to the end", op.ID, st.Ended, c.Ingress.Partitions)
		}
		if c.Time.Domain == contracts.DomainEvent && !st.Watermark.Equal(watermark.End) {
			return false, fmt.Sprintf("%s's watermark is %s", op.ID, st.Watermark)
		}
	}
	for i, o := range s.Operators {
		// An ingress reader's consumers count the live stream past the
		// range: its inputs' ends, checked above, say it is done.
		if c.Operators[i].Input != contracts.InputIngress && o.Lag != 0 {
			return false, fmt.Sprintf("%s lags %d", o.ID, o.Lag)
		}
	}
	return true, ""
}

// generationOf is the pipeline a replay or shadow of c writes result
// generation gen to: <pipeline>-<gen>. It refuses a pipeline whose sink
// releases results at checkpoints (transactional) or hands them to a
// dispatcher (outbox): a replay or shadow runs neither a coordinator nor a
// dispatcher.
func generationOf(c *contracts.Contract, gen string) (string, error) {
	if e := c.Sink.Effect; e == contracts.EffectTransactional || e == contracts.EffectOutbox {
		return "", fmt.Errorf("pipeline %s's sink is %s: its results are released by checkpoints (and an outbox's performed by a dispatcher), which a replay or shadow does not run; run one of an at-least-once or versioned-upsert pipeline", c.Pipeline, e)
	}
	name := c.Pipeline + "-" + gen
	if !contracts.ValidName(name) {
		return "", fmt.Errorf("generation %q makes pipeline name %q, which is not a valid pipeline name", gen, name)
	}
	return name, nil
}

// openIngress connects for a replay or shadow writing generation name and
// opens c's ingress stream, which it reads. A generation that starts
// (fresh) must be new (newGeneration); one that resumes exists already.
func openIngress(ctx context.Context, srv *natsServer, c *contracts.Contract, name string, fresh bool) (*nats.Conn, jetstream.JetStream, jetstream.Stream, error) {
	nc, js, err := srv.connect(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	if fresh {
		if err := newGeneration(ctx, js, c, name); err != nil {
			nc.Close()
			return nil, nil, nil, err
		}
	}
	if n := c.Ingress.StreamCount(); n > 1 {
		nc.Close()
		return nil, nil, nil, fmt.Errorf("a replay or shadow is a range of the ingress stream's sequences, and contract %s places the ingress over %d streams (ingress.streams), each with sequences of its own: not supported yet", c.File, n)
	}
	st, err := js.Stream(ctx, c.Ingress.Stream)
	if err != nil {
		nc.Close()
		return nil, nil, nil, fmt.Errorf("ingress stream %s: %w", c.Ingress.Stream, err)
	}
	return nc, js, st, nil
}

// runGeneration starts the operators of c writing generation name
// (replayRuntimes) and returns their runtimes, the group running them, and
// c as they run it, under the generation's pipeline name: what status
// gathers.
func runGeneration(ctx context.Context, c *contracts.Contract, factories map[string]stream.Factory, srv *natsServer, data string, r *stream.Replay, name string) ([]*stream.Runtime, *group, *contracts.Contract, error) {
	rts, err := replayRuntimes(c, factories, srv, data, r)
	if err != nil {
		return nil, nil, nil, err
	}
	gc := *c
	gc.Pipeline = name
	return rts, runGroup(ctx, rts), &gc, nil
}

// replayRuntimes builds a runtime for every operator of c from the shipped
// factories, reading as r says, its state under data/<operator>.
func replayRuntimes(c *contracts.Contract, factories map[string]stream.Factory, srv *natsServer, data string, r *stream.Replay) ([]*stream.Runtime, error) {
	var keys *checkpoint.Keys
	if srv.keys != "" {
		var err error
		if keys, err = checkpoint.LoadKeys(srv.keys); err != nil {
			return nil, err
		}
	}
	var redactionKey []byte
	if srv.redactionKey != "" {
		var err error
		if redactionKey, err = redact.LoadKey(srv.redactionKey); err != nil {
			return nil, err
		}
	}
	return stream.Runtimes(stream.Config{NATSURL: srv.url, Auth: srv.auth, CheckpointKeys: keys, RedactionKey: redactionKey, Contract: c, DataDir: data,
		Instance: "0", Replay: r, TickInterval: 100 * time.Millisecond}, "", factories, nil)
}

// group is a replay's or shadow's runtimes running: done is closed once
// they have returned, with err.
type group struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func runGroup(ctx context.Context, rts []*stream.Runtime) *group {
	ctx, cancel := context.WithCancel(ctx)
	g := &group{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		g.err = stream.RunGroup(ctx, rts...)
	}()
	return g
}

// stop stops the runtimes, if they still run, and returns how they ended.
func (g *group) stop() error {
	g.cancel()
	<-g.done
	return g.err
}

// shippedFactories are the operators of the shipped pipeline named
// pipeline (catalog.Shipped); nil for any other pipeline.
func shippedFactories(pipeline string) map[string]stream.Factory {
	q, _ := catalog.Shipped().ForPipeline(pipeline)
	return q.Factories
}

func mkTemp(prefix string) (string, error) { return os.MkdirTemp("", prefix+"-") }
