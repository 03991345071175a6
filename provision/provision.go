// Package provision makes, as a pipeline's administrator, every stream,
// bucket and durable consumer the pipeline's processes use, from its
// contract: the ingress, each edge (or, for a versioned-upsert result, its
// view), the dead-letter and audit streams, the checkpoint buckets (the
// key-value bucket and each operator's file bucket), the erasure registry
// when deletion is declared, and for an outbox the dispatcher's outcomes,
// dead letters and durable consumer.
//
// The runtime processes — services, coordinator, dispatcher, producers —
// create and change nothing: their credentials allow no stream to be
// created or updated (package access), because a stream's configuration
// acts with no user's permissions — a republish writes, and a source
// reads, any subject or stream of the account. Each checks at start that
// what it uses is as declared, with the same declarations provision
// applies (jsapi.Declared, built by each runtime package), and refuses
// with the field that differs. Provision is idempotent: run again it finds
// everything as declared; run with a changed contract it brings what
// exists to it. The audit trail is created once and never updated.
//
// Where each pipeline is an account of its own (package access), two
// administrators provision: the ingress's (Options.Ingress) makes the
// ingress stream, in its account, and a durable consumer feeding each
// pipeline's mirror of it; each pipeline's (Options.Accounts) makes the
// pipeline's streams and buckets, its ingress a mirror (ingress.Mirror).
package provision

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/dispatcher"
	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/erasure"
	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/pkg/ingress"
	"github.com/weirflow/weir/pkg/view"
)

// ErrConflict says that two contracts provisioned together declare one
// stream differently (a shared ingress with other limits).
var ErrConflict = errors.New("provision: contracts declare one stream differently")

// Options are what a deployment decides beyond its contracts.
type Options struct {
	// Replicas of every stream and bucket; 0 means 1. The runtime
	// processes run with the same (-replicas) and refuse another.
	Replicas int
	// Generations are the result generations (weir replay, shadow,
	// cutover) whose pipelines <pipeline>-<generation> have their own
	// edges, views, dead letters, audit trail and checkpoint buckets. A
	// replay or shadow makes its generation, as the administrator, and
	// refuses one that exists: a generation is provisioned once made,
	// before its services run on it.
	Generations []string
	// Accounts provisions a pipeline in a deployment with an account per
	// pipeline (weir auth): its ingress is a mirror of the stream in the
	// ingress account (ingress.Mirror), which Ingress provisions there.
	// The pipeline's administrator reaches its own account alone, so
	// contracts of one pipeline only.
	Accounts bool
	// Ingress provisions only the ingress streams of the contracts, and a
	// consumer feeding each pipeline's mirror (ingress.MirrorConsumer), as
	// the ingress account's administrator.
	Ingress bool
}

// Plan is what provisioning contracts makes: the streams and buckets, in
// order (an outbox before its consumer), and the durable consumers.
type Plan struct {
	Declared  []jsapi.Declared
	Consumers []Consumer
}

// Consumer is a durable consumer weir declares: the dispatcher's.
type Consumer struct {
	Stream string
	Config jetstream.ConsumerConfig
	// Differences lists the fields of an existing consumer that differ
	// from Config, among those that matter.
	Differences func(have, want jetstream.ConsumerConfig) []jsapi.Difference
}

// PlanFor lists what the processes of cs use, as declared with o. A
// stream two contracts declare (a shared ingress) is listed once, and
// refused (ErrConflict) if they declare it differently.
func PlanFor(cs []*contracts.Contract, o Options) (Plan, error) {
	var p Plan
	if err := ingress.Agree(cs); err != nil {
		return Plan{}, fmt.Errorf("%w: %v", ErrConflict, err)
	}
	if o.Accounts && o.Ingress {
		return Plan{}, errors.New("provision: a pipeline's account (-accounts) or the ingress account (-ingress), not both: each has its own administrator")
	}
	if o.Accounts {
		for _, c := range cs[min(len(cs), 1):] {
			if c.Pipeline != cs[0].Pipeline {
				return Plan{}, fmt.Errorf("provision: -accounts provisions one pipeline, in its own account, and contracts %s and %s are pipelines %s and %s", cs[0].File, c.File, cs[0].Pipeline, c.Pipeline)
			}
		}
	}
	add := func(d jsapi.Declared) error {
		for _, have := range p.Declared {
			if have.StreamName() != d.StreamName() {
				continue
			}
			if diffs := have.Differences(configOf(d)); have.Kind != d.Kind || len(diffs) > 0 {
				return fmt.Errorf("%w: %s: %v", ErrConflict, d, diffs)
			}
			return nil
		}
		p.Declared = append(p.Declared, d)
		return nil
	}
	for _, c := range cs {
		if o.Ingress {
			for i, d := range ingress.Declared(c.Ingress, max(o.Replicas, 1)) {
				if err := add(d); err != nil {
					return Plan{}, fmt.Errorf("contract %s: %w", c.File, err)
				}
				p.Consumers = append(p.Consumers, Consumer{Stream: d.StreamName(), Config: ingress.MirrorConsumerConfigOf(c.Ingress, c.Pipeline, i),
					Differences: ingress.MirrorConsumerDifferences})
			}
			continue
		}
		ds, cons, err := forContract(c, o)
		if err != nil {
			return Plan{}, err
		}
		for _, d := range ds {
			if err := add(d); err != nil {
				return Plan{}, fmt.Errorf("contract %s: %w", c.File, err)
			}
		}
		p.Consumers = append(p.Consumers, cons...)
	}
	return p, nil
}

// configOf is a declaration's stream configuration as a server would hold
// it, in the fields Differences compares: to tell whether two contracts
// declare one stream alike.
func configOf(d jsapi.Declared) jetstream.StreamConfig {
	switch d.Kind {
	case jsapi.KindKeyValue:
		return jetstream.StreamConfig{MaxMsgsPerSubject: int64(max(d.KV.History, 1)), MaxAge: d.KV.TTL, Storage: d.KV.Storage,
			Replicas: max(d.KV.Replicas, 1), RePublish: d.KV.RePublish, Sources: d.KV.Sources, Mirror: d.KV.Mirror}
	case jsapi.KindObjectStore:
		return jetstream.StreamConfig{MaxAge: d.Obj.TTL, Storage: d.Obj.Storage, Replicas: max(d.Obj.Replicas, 1)}
	}
	return d.Stream
}

// forContract is what c's processes use: its own pipeline's, and each
// generation's.
func forContract(c *contracts.Contract, o Options) ([]jsapi.Declared, []Consumer, error) {
	replicas := max(o.Replicas, 1)
	ds := ingress.Declared(c.Ingress, replicas)
	if o.Accounts {
		ds = ingress.Mirror(c.Ingress, c.Pipeline, replicas)
	}
	ds = append(ds, pipelineOf(c, replicas)...)
	if d := c.Deletion; d.Declared() {
		// A generation obeys its origin's registry.
		ds = append(ds, erasure.Declared(c.Pipeline, d.Within.D(), replicas))
	}
	var cons []Consumer
	if c.Sink.Effect == contracts.EffectOutbox {
		cfg, err := dispatcher.ForContract(c, "")
		if err != nil {
			return nil, nil, err
		}
		cfg.Replicas = replicas
		ds = append(ds, dispatcher.Declared(cfg)...)
		cons = append(cons, Consumer{Stream: cfg.Stream, Config: dispatcher.ConsumerConfig(cfg), Differences: dispatcher.ConsumerDifferences})
	}
	for _, gen := range o.Generations {
		if gen == "" || strings.ContainsAny(gen, ".*> /") {
			return nil, nil, fmt.Errorf("provision: generation %q is not a name a replay takes (a token without . * > / or spaces)", gen)
		}
		renamed := *c
		renamed.Pipeline = c.Pipeline + "-" + gen
		ds = append(ds, pipelineOf(&renamed, replicas)...)
	}
	return ds, cons, nil
}

// pipelineOf is what the operators and coordinator of c's pipeline write:
// each edge's stream (a versioned-upsert result's view instead), the dead
// letters, the audit trail and the checkpoint buckets.
func pipelineOf(c *contracts.Contract, replicas int) []jsapi.Declared {
	var ds []jsapi.Declared
	for _, e := range c.Edges {
		if e.JSON() && c.Sink.Effect == contracts.EffectVersionedUpsert {
			ds = append(ds, view.Declared(c.Pipeline, e.Name, e.Retention.D(), replicas))
			continue
		}
		spec := edge.ForContract(c, e)
		spec.Replicas = replicas
		ds = append(ds, edge.Declared(spec))
	}
	ds = append(ds,
		deadletter.Declared(c.Pipeline, c.Ingress.Retention.D(), replicas),
		audit.Trail(c.Pipeline, replicas))
	return append(ds, checkpoint.Declared(c.Pipeline, replicas, c.OperatorIDs()...)...)
}

// Run provisions plan p, reporting each stream, bucket and consumer's
// outcome as it goes, and stops at the first failure.
func Run(ctx context.Context, js jetstream.JetStream, p Plan, report func(jsapi.Outcome)) error {
	for _, d := range p.Declared {
		out, err := jsapi.Provision(ctx, js, d)
		if err != nil {
			return err
		}
		report(out)
	}
	for _, c := range p.Consumers {
		out, err := consumer(ctx, js, c)
		if err != nil {
			return err
		}
		report(out)
	}
	return nil
}

// consumer creates c, or brings it to its declaration.
func consumer(ctx context.Context, js jetstream.JetStream, c Consumer) (jsapi.Outcome, error) {
	out := jsapi.Outcome{What: "consumer " + c.Config.Durable + " of stream " + c.Stream}
	err := jsapi.Retry(ctx, "provision "+out.What, func(ctx context.Context) error {
		have, err := js.Consumer(ctx, c.Stream, c.Config.Durable)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			if _, err := js.CreateConsumer(ctx, c.Stream, c.Config); err != nil {
				return err
			}
			out.Action = jsapi.Created
			return nil
		}
		if err != nil {
			return err
		}
		out.Differences = c.Differences(have.CachedInfo().Config, c.Config)
		if cfg := have.CachedInfo().Config; cfg.MaxAckPending != c.Config.MaxAckPending || cfg.AckWait != c.Config.AckWait {
			// Brought to the declaration too, though the dispatcher
			// accepts them as they are.
			out.Differences = slices.DeleteFunc(out.Differences, func(d jsapi.Difference) bool { return d.Field == "ack_wait" })
			if cfg.AckWait != c.Config.AckWait {
				out.Differences = append(out.Differences, jsapi.Difference{Field: "ack_wait", Have: cfg.AckWait.String(), Want: c.Config.AckWait.String()})
			}
			if cfg.MaxAckPending != c.Config.MaxAckPending {
				out.Differences = append(out.Differences, jsapi.Difference{Field: "max_ack_pending", Have: fmt.Sprint(cfg.MaxAckPending), Want: fmt.Sprint(c.Config.MaxAckPending)})
			}
		}
		if len(out.Differences) == 0 {
			out.Action = jsapi.AsDeclared
			return nil
		}
		if _, err := js.UpdateConsumer(ctx, c.Stream, c.Config); err != nil {
			return err
		}
		out.Action = jsapi.Updated
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("provision: %s: %w", out.What, err)
	}
	return out, nil
}
