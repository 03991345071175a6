package edge

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/jsapi"
)

// Spec declares one edge of a pipeline.
type Spec struct {
	Pipeline   string
	Edge       string
	Partitions int
	// Retention is the edge stream's MaxAge. It must cover the recovery
	// envelope (checkpoint interval plus recovery time); the contract checks.
	Retention time.Duration
	// Replicas of the stream; 0 means 1. Clusters use 3.
	Replicas int
	// Transactional marks a result edge whose writers release results
	// only when a checkpoint completes, with a commit marker per batch on
	// their own commit subject (PublishCommitted).
	Transactional bool
	// Split routes each record by its key split that many ways
	// (keygroup.Split), so that a hot key spreads over partitions and
	// instances; 0 routes by the key itself.
	Split int
}

// Validate reports whether the spec names a usable edge.
func (s Spec) Validate() error {
	switch {
	case !validToken(s.Pipeline):
		return fmt.Errorf("edge: pipeline name %q must be a non-empty subject token", s.Pipeline)
	case !validToken(s.Edge):
		return fmt.Errorf("edge: edge name %q must be a non-empty subject token", s.Edge)
	case s.Partitions <= 0:
		return fmt.Errorf("edge: %s has %d partitions, want at least 1", s.Edge, s.Partitions)
	case s.Retention <= 0:
		return fmt.Errorf("edge: %s has no retention", s.Edge)
	}
	return nil
}

func validToken(s string) bool {
	return s != "" && !strings.ContainsAny(s, ".*> \t\r\n")
}

// StreamName is the JetStream stream that holds the edge.
func (s Spec) StreamName() string { return StreamName(s.Pipeline, s.Edge) }

// StreamName is the JetStream stream name of an edge: WEIR_<PIPELINE>_<EDGE>.
func StreamName(pipeline, edge string) string {
	up := func(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }
	return "WEIR_" + up(pipeline) + "_" + up(edge)
}

// Subject is the subject of partition p: weir.<pipeline>.<edge>.<p>.
func (s Spec) Subject(p int) string {
	return "weir." + s.Pipeline + "." + s.Edge + "." + strconv.Itoa(p)
}

// Subjects is the wildcard subject covering every partition.
func (s Spec) Subjects() string { return "weir." + s.Pipeline + "." + s.Edge + ".*" }

// DuplicateWindow is how long JetStream remembers frame IDs: a producer that
// restarts within it re-publishes staged frames without creating duplicates.
// Readers drop older duplicates by frame sequence.
const DuplicateWindow = 10 * time.Minute

// Declared is the edge's stream as weir declares it — what weir provision
// creates and a writer or reader checks before it starts. Edges use limits
// retention, never work-queue or interest: records that were already
// acknowledged must stay readable for a restore to replay them.
func Declared(s Spec) jsapi.Declared {
	dup := DuplicateWindow
	if s.Retention < dup {
		dup = s.Retention
	}
	subjects := []string{s.Subjects()}
	if s.Transactional {
		subjects = append(subjects, s.commitSubjects())
	}
	return jsapi.Declared{Stream: jetstream.StreamConfig{
		Name:        s.StreamName(),
		Description: fmt.Sprintf("weir edge %s of pipeline %s (%d partitions)", s.Edge, s.Pipeline, s.Partitions),
		Subjects:    subjects,
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      s.Retention,
		Duplicates:  dup,
		Replicas:    max(s.Replicas, 1),
		Discard:     jetstream.DiscardOld,
		// A step's frames, and a json edge's messages, are stored in
		// atomic batches: one fsync per batch (edge.Publish).
		AllowAtomicPublish: true,
	}}
}

// Ensure returns the edge's stream after checking that it is as the spec
// declares (jsapi.Check): a stream that differs is refused, naming the
// field, and never updated — weir provision does that — and a missing one
// is created when the server allows.
func Ensure(ctx context.Context, js jetstream.JetStream, s Spec) (jetstream.Stream, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if err := jsapi.Check(ctx, js, Declared(s)); err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	var st jetstream.Stream
	err := jsapi.Settled(ctx, "look up "+s.StreamName(), func(ctx context.Context) (err error) {
		st, err = js.Stream(ctx, s.StreamName())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("edge: stream %s: %w", s.StreamName(), err)
	}
	return st, nil
}

// ForContract is the spec of edge e of contract c, as its writer, its
// readers and weir provision declare it: a json edge of a transactional or
// outbox sink carries commit markers.
func ForContract(c *contracts.Contract, e contracts.Edge) Spec {
	return Spec{Pipeline: c.Pipeline, Edge: e.Name, Partitions: e.Partitions, Retention: e.Retention.D(), Split: e.Split,
		Transactional: e.JSON() && (c.Sink.Effect == contracts.EffectTransactional || c.Sink.Effect == contracts.EffectOutbox)}
}

// deleteConsumer removes a consumer, treating "not found" as success.
func deleteConsumer(ctx context.Context, st jetstream.Stream, name string) error {
	err := st.DeleteConsumer(ctx, name)
	if err == nil || errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	return err
}
