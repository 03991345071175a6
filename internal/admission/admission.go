// Package admission is the producer admission of a pipeline whose
// contract declares overload.policy admission: a producer coming through
// weir (the ingest gateway) is refused, at once and with the reason,
// while the pipeline is behind by more than overload.max_lag records,
// instead of adding to a backlog the pipeline cannot work off in time.
//
// The lag is the pipeline's: for each operator reading the ingress, what
// its durable consumers have not delivered or not had acknowledged yet,
// summed over its input partitions (each partition's current reader); the
// largest over those operators. A Gate measures it every Interval; Admit answers from the
// last measurement, so a refusal costs nothing. A producer publishing
// straight to the ingress stream is not asked: admission governs the
// paths weir owns.
package admission

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/edge"
)

// Interval is how often a Gate measures the lag.
const Interval = 500 * time.Millisecond

// Refused is the error of a refused admission.
type Refused struct {
	Pipeline string
	Lag      int64 // records behind, when last measured
	MaxLag   int64
	// RetryAfter is a hint: about when to try again.
	RetryAfter time.Duration
}

func (r *Refused) Error() string {
	return fmt.Sprintf("admission refused: pipeline %s is %d records behind, more than overload.max_lag %d; retry after %s",
		r.Pipeline, r.Lag, r.MaxLag, r.RetryAfter)
}

// Gate admits producers while the pipeline's lag is within its bound.
type Gate struct {
	js       jetstream.JetStream
	c        *contracts.Contract
	prefixes []string // consumer-name prefixes of the ingress readers

	mu       sync.Mutex
	lag      int64
	measured time.Time // zero: no measurement to go by
}

// New returns the gate of a pipeline whose contract declares policy
// admission, and nil for any other policy: nil admits everything.
func New(js jetstream.JetStream, c *contracts.Contract) *Gate {
	if c.Overload.Policy != contracts.PolicyAdmission {
		return nil
	}
	g := &Gate{js: js, c: c}
	for _, op := range c.Operators {
		if op.Input == "ingress" {
			// The runtime names a consumer <pipeline>_<operator>_<instance>_<input>.
			g.prefixes = append(g.prefixes, edge.ConsumerName(c.Pipeline, op.ID)+"_")
		}
	}
	return g
}

// Run measures the lag every Interval until ctx ends.
func (g *Gate) Run(ctx context.Context) error {
	if g == nil {
		return nil
	}
	t := time.NewTicker(Interval)
	defer t.Stop()
	for {
		g.Measure(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Measure reads the lag now.
func (g *Gate) Measure(ctx context.Context) {
	lag, err := Lag(ctx, g.js, g.c.Ingress.StreamNames(), g.prefixes)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		// Not an old figure: a lag that can no longer be read admits.
		g.lag, g.measured = 0, time.Time{}
		return
	}
	g.lag, g.measured = lag, time.Now()
}

// Admit returns nil while the pipeline is within its bound, or a *Refused.
// Before the first measurement, or when the lag cannot be read, it admits:
// admission is a brake on a backlog, and a producer must not be stopped by
// a gate that knows nothing.
func (g *Gate) Admit() error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.measured.IsZero() || g.lag <= int64(g.c.Overload.MaxLag) {
		return nil
	}
	return &Refused{Pipeline: g.c.Pipeline, Lag: g.lag, MaxLag: int64(g.c.Overload.MaxLag), RetryAfter: time.Second}
}

// Lag is the largest lag, over the operators whose consumers' names start
// with one of prefixes, of what their consumers on streams have not
// delivered or not had acknowledged yet: per input partition the least
// over the consumers reading it — the instance that owns it now; a
// consumer an earlier instance left behind (it lingers until its inactive
// threshold) is further behind and does not count — summed over the
// partitions.
func Lag(ctx context.Context, js jetstream.JetStream, streams []string, prefixes []string) (int64, error) {
	// byPartition[i] maps operator i's input partitions (the consumer
	// name's last element) to the least lag of their consumers.
	byPartition := make([]map[string]int64, len(prefixes))
	for i := range byPartition {
		byPartition[i] = map[string]int64{}
	}
	for _, stream := range streams {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return 0, err
		}
		list := st.ListConsumers(ctx)
		for info := range list.Info() {
			for i, p := range prefixes {
				if !strings.HasPrefix(info.Name, p) {
					continue
				}
				part := info.Name[strings.LastIndexByte(info.Name, '_')+1:]
				lag := int64(info.NumPending) + int64(info.NumAckPending)
				if old, ok := byPartition[i][part]; !ok || lag < old {
					byPartition[i][part] = lag
				}
			}
		}
		if err := list.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
			return 0, err
		}
	}
	var most int64
	for _, parts := range byPartition {
		var sum int64
		for _, l := range parts {
			sum += l
		}
		most = max(most, sum)
	}
	return most, nil
}
