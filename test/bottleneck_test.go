package test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/status"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/dedup"
)

// throttled slows an operator down by a fixed time per record — while
// while says so, when it is set — keeping the state families it declares.
type throttled struct {
	operator.Operator
	per   time.Duration
	while func() bool
}

func (o throttled) Process(env operator.Env, r record.Record) error {
	if o.while == nil || o.while() {
		time.Sleep(o.per) // the throttle itself: work the operator does per record
	}
	return o.Operator.Process(env, r)
}

func (o throttled) Families() []string {
	if su, ok := o.Operator.(operator.StateUser); ok {
		return su.Families()
	}
	return nil
}

// threeOperators is the dedup pipeline with a relay between dedup and
// publish: dedup → deduped → relay → relayed → publish → events.
func threeOperators(t *testing.T) *contracts.Contract {
	t.Helper()
	data, err := os.ReadFile(contractPath(t))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(data), "\noperators:\n", `  - name: relayed
    partitions: 4
    retention: 24h

operators:
  - id: relay
    service: dedup
    input: deduped
    output: relayed
    keying: key
    state: []
    dead_letter: true
`, 1)
	text = strings.Replace(text, "  - id: publish\n    service: dedup\n    input: deduped", "  - id: publish\n    service: dedup\n    input: relayed", 1)
	c, err := contracts.Parse("three-operators.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if ps := c.Lint(); len(ps) > 0 {
		t.Fatal(ps)
	}
	return c
}

// TestStatusNamesTheBottleneck runs a three-operator pipeline fed at a
// steady rate with one operator throttled to less than that rate: the
// status names it as the bottleneck, busy most of the time and its input
// falling behind; throttling another one moves the name.
func TestStatusNamesTheBottleneck(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a pipeline for seconds")
	}
	for _, slow := range []string{"relay", "dedup"} {
		t.Run(slow, func(t *testing.T) {
			srv := natstest.Run(t)
			js := srv.JetStream(t)
			c := threeOperators(t)
			factories := map[string]stream.Factory{
				"dedup":   dedup.Factories()["dedup"],
				"publish": dedup.Factories()["publish"],
				"relay": func(*contracts.Contract) (operator.Operator, error) {
					return operator.Func(func(env operator.Env, r record.Record) error { return env.Emit(r) }), nil
				},
			}
			inner := factories[slow]
			factories[slow] = func(c *contracts.Contract) (operator.Operator, error) {
				o, err := inner(c)
				return throttled{Operator: o, per: 3 * time.Millisecond}, err
			}
			cfg := genConfig(c, 30000)
			cfg.Rate = 600 // above the throttled operator's ~300 records/s, far below the others'
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _, _ = publishErr(ctx, js, cfg) }()
			streamtest.Run(t, srv.ClientURL(), c, t.TempDir(), factories)
			nc := srv.Connect(t)
			var s status.Status
			streamtest.CheckFor(t, 60*time.Second, func() error {
				var err error
				if s, err = status.Gather(ctx, nc, js, c); err != nil {
					return err
				}
				if b := s.Bottleneck; b == nil || b.Operator != slow || b.Lag == 0 {
					return fmt.Errorf("bottleneck %+v, want %s", b, slow)
				}
				// Over a few seconds, not the first moments of a start.
				for _, o := range s.Operators {
					for _, in := range o.Instances {
						if in.Stats.LoadSeconds < 3 {
							return fmt.Errorf("%s's load covers %.1fs so far", o.ID, in.Stats.LoadSeconds)
						}
					}
				}
				return nil
			})
			b := s.Bottleneck
			for _, o := range s.Operators {
				for _, in := range o.Instances {
					if o.ID != slow && in.Stats.Busy >= b.Busy {
						t.Errorf("%s is as busy (%.2f) as the throttled %s (%.2f)", o.ID, in.Stats.Busy, slow, b.Busy)
					}
				}
			}
			// Its time per input partition accounts for most of its busy
			// time, the throttle being per record; the state commits are
			// part of it.
			var parts float64
			for _, o := range s.Operators {
				for _, in := range o.Instances {
					if o.ID == slow {
						for _, p := range in.Inputs {
							parts += p.Busy
						}
					}
				}
			}
			if b.Busiest == "" || b.BusiestShare <= 0 || parts < b.Busy/2 || b.StateIO <= 0 || b.StateIO >= b.Busy {
				t.Errorf("bottleneck %+v: want its busiest partition named, its partitions' busy shares (%.2f in all) most of its busy time, and a state I/O share below it", b, parts)
			}
			t.Logf("bottleneck %s", b.Summary)
		})
	}
}
