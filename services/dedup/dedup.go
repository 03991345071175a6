// Package dedup is the deduplication service: it drops records whose event
// ID it has already seen, and passes every other record on, once.
//
// The IDs it has seen are keyed state (keyed by event ID, so the contract
// must give the operator keying: id) in the family the contract marks role: dedup.
// Each ID is kept for the family's TTL, which the contract checks against
// the replay horizon: a duplicate can arrive as long as the ingress stream
// can replay the original, so a shorter TTL would let duplicates through.
// The number of IDs held is bounded by the family's max_keys; crossing it is
// the contract's declared action (fail, or dead-letter the new record).
//
// The service also runs the publish operator, which puts every
// deduplicated event on the pipeline's json edge (weir.nexmark.events.<p>),
// where anyone can read it with `nats sub`.
//
// The service directory is a library package so that `weir demo` can run
// the operators in one process with the others; cmd/dedup is its main.
package dedup

import (
	"context"
	"io"
	"sync/atomic"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream"
)

// Version is reported to $SRV.INFO.
const Version = "0.1.0"

// Family is the state family holding seen IDs.
const Family = "seen"

// Operator drops duplicate event IDs.
type Operator struct {
	duplicates atomic.Int64
}

// New returns a dedup operator.
func New() *Operator { return &Operator{} }

// Families names the state the operator keeps.
func (o *Operator) Families() []string { return []string{Family} }

// Duplicates is how many records this instance dropped since it started.
func (o *Operator) Duplicates() int64 { return o.duplicates.Load() }

// Process passes r on unless its ID was seen. State is scoped to the
// record's ID by the runtime.
func (o *Operator) Process(c operator.Env, r record.Record) error {
	seen := c.Value(Family)
	_, ok, err := seen.Get()
	if err != nil {
		return err
	}
	if ok {
		o.duplicates.Add(1)
		return nil
	}
	// The value is where the ID was first seen, for whoever debugs a
	// duplicate later.
	if err := seen.Set([]byte(r.At.String())); err != nil {
		return err
	}
	return c.Emit(r)
}

// Publish is the publish operator: it passes each deduplicated event on to
// the pipeline's json edge of events, where anyone can read them.
type Publish struct{}

// Process passes r on unchanged.
func (Publish) Process(c operator.Env, r record.Record) error { return c.Emit(r) }

// Factories are the service's operators.
func Factories() map[string]stream.Factory {
	return map[string]stream.Factory{
		"dedup":   func(*contracts.Contract) (operator.Operator, error) { return New(), nil },
		"publish": func(*contracts.Contract) (operator.Operator, error) { return Publish{}, nil },
	}
}

// Run runs the service with command-line args and environment; main only
// adds signals.
func Run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	return stream.Main(ctx, "dedup", Version, args, getenv, stderr, Factories())
}
