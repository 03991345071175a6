package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/internal/redact"
	"github.com/weirflow/weir/pkg/operator"
)

// Runtime runs one operator instance. Create it with New, run it with Run.
// What it learns while it runs — connections, state, positions, layout,
// checkpoint bookkeeping — belongs to a run (run.go), which starts afresh
// whenever the pipeline's assignment changes; the Runtime keeps only its
// configuration and its counters.
type Runtime struct {
	cfg Config
	op  operator.Operator
	// before are the stateless operators the contract chains into op's
	// step (operators[].before), in order, and their names.
	before      []operator.Operator
	beforeNames []string
	log         *slog.Logger
	now         func() time.Time
	// base is the plan the contract gives; a run narrows it to the
	// partitions it owns.
	base plan

	stats counters
	// groups counts records per key group: the hot-key indicator.
	groups *groupLoad
	ready  atomic.Bool
	// cur is the run in progress, for Stats; nil between runs.
	cur atomic.Pointer[run]
}

// New checks the configuration and the contract and returns a Runtime. It
// refuses an incomplete or self-contradicting contract.
func New(cfg Config, op operator.Operator) (*Runtime, error) {
	return NewChained(cfg, op, nil)
}

// NewChained is New for an operator whose contract chains stateless
// operators into its step (operators[].before): before holds them by
// name. It refuses a chained operator missing, one the contract does not
// chain, and one that keeps state. Runtimes builds every chain from a
// service's factories.
func NewChained(cfg Config, op operator.Operator, before map[string]operator.Operator) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if op == nil {
		return nil, errors.New("stream: nil operator")
	}
	c := cfg.Contract
	if c == nil {
		var err error
		if c, err = contracts.Load(cfg.ContractPath); err != nil {
			return nil, fmt.Errorf("stream: refusing to start: %w", err)
		}
	} else if problems := c.Lint(); len(problems) > 0 {
		return nil, fmt.Errorf("stream: refusing to start: %w", &contracts.Invalid{Problems: problems})
	}
	origin := c.Pipeline
	if r := cfg.Replay; r != nil {
		if n := c.Ingress.StreamCount(); n > 1 {
			// A range of stream sequences names records of one stream.
			return nil, fmt.Errorf("stream: refusing to start: a replay is a range of the ingress stream's sequences, and contract %s places the ingress over %d streams (ingress.streams), each with sequences of its own: replaying such an ingress is not supported yet", c.File, n)
		}
		// Everything weir names after the pipeline — edges, buckets,
		// the dead-letter and audit streams, the views — is the
		// generation's own; the ingress is the contract's.
		renamed := *c
		renamed.Pipeline = r.Pipeline(c.Pipeline)
		c = &renamed
	}
	p, err := makePlan(c, cfg.Operator)
	if err != nil {
		return nil, err
	}
	p.origin = origin
	if p.redact, err = redact.For(c, cfg.RedactionKey); err != nil {
		return nil, fmt.Errorf("stream: refusing to start: %w", err)
	}
	if su, ok := op.(operator.StateUser); ok {
		for _, name := range su.Families() {
			if o, _ := c.Operator(cfg.Operator); !o.Uses(name) {
				return nil, fmt.Errorf("stream: refusing to start: operator %s keeps state family %q, which contract %s does not give it (operators[].state, state.families)", cfg.Operator, name, c.File)
			}
		}
	}
	if h, ok := op.(operator.Horizoned); ok && h.StateHorizon() > 0 {
		// The state of a window lives from its first element until the
		// watermark — out_of_orderness behind — has passed the window and
		// its lateness; a TTL shorter than that frees it too soon.
		need := h.StateHorizon() + c.Progress.OutOfOrderness.D()
		for _, f := range p.families {
			if f.TTL > 0 && f.TTL <= need {
				return nil, fmt.Errorf("stream: refusing to start: state family %q of operator %s expires after %s (state.families[].ttl in %s), but its windows need their state for %s (window and allowed lateness %s, plus out_of_orderness %s); remove the ttl or raise it",
					f.Name, cfg.Operator, f.TTL, c.File, need, h.StateHorizon(), c.Progress.OutOfOrderness.D())
			}
		}
	}
	chain, names, err := chained(c, cfg.Operator, before)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	now := cfg.Clock
	if now == nil {
		now = time.Now
	}
	return &Runtime{
		cfg:         cfg,
		op:          op,
		before:      chain,
		beforeNames: names,
		log:         logger.With("operator", cfg.Operator, "instance", cfg.Instance),
		now:         now,
		base:        p,
		groups:      newGroupLoad(p.keyGroups),
	}, nil
}

// Producer is the name this instance stamps on its frames.
func (rt *Runtime) Producer() string { return rt.cfg.Operator + "/" + rt.cfg.Instance }

// Ready reports whether the runtime has recovered and is reading input.
func (rt *Runtime) Ready() bool { return rt.ready.Load() }

// Run connects, recovers from the local state and processes input until ctx
// is cancelled or an unrecoverable error occurs. On cancellation it stops
// fetching, commits, and returns nil. When the pipeline's assignment
// changes it starts a new run under the new one; when the assignment no
// longer names the instance it stops and returns nil. A run the broker
// ended by not answering in time — down, restarting, busy recovering its
// streams — starts again after a back-off, as a process restarted would,
// without ending this one.
func (rt *Runtime) Run(ctx context.Context) error {
	for attempt := 1; ; {
		err := rt.cfg.Auth.GuardAnswering(ctx, func(ctx context.Context, denied func(error)) error {
			rn := newRun(rt)
			rn.conn.denied = denied
			return rn.execute(ctx)
		})
		switch {
		case errors.Is(err, errReassigned):
			rt.log.Info("restarting under the new assignment")
		case errors.Is(err, errRetired):
			rt.log.Warn("not running", "reason", err)
			return nil
		case err != nil && ctx.Err() == nil && jsapi.Unreachable(err):
			rt.log.Warn("the broker did not answer; starting again", "attempt", attempt, "err", err)
			if err := sleep(ctx, jsapi.Backoff(attempt)); err != nil {
				return nil // a stop requested while waiting is a clean stop
			}
			attempt++
		default:
			return err
		}
	}
}

// chained returns, in the contract's order, the operators contract c
// chains before operator id, from before: each one the contract names,
// none it does not, and none that keeps state.
func chained(c *contracts.Contract, id string, before map[string]operator.Operator) ([]operator.Operator, []string, error) {
	o, _ := c.Operator(id)
	var ops []operator.Operator
	for _, name := range o.Before {
		op, ok := before[name]
		if !ok || op == nil {
			return nil, nil, fmt.Errorf("stream: refusing to start: contract %s chains operator %s before %s (operators[].before), and the service has no %s", c.File, name, id, name)
		}
		if su, ok := op.(operator.StateUser); ok && len(su.Families()) > 0 {
			return nil, nil, fmt.Errorf("stream: refusing to start: operator %s, chained before %s (operators[].before in %s), keeps state (%s): only a stateless operator runs in another's step", name, id, c.File, strings.Join(su.Families(), ", "))
		}
		ops = append(ops, op)
	}
	for name := range before {
		if !slices.Contains(o.Before, name) {
			return nil, nil, fmt.Errorf("stream: refusing to start: operator %s is given to run before %s, and contract %s does not chain it there (operators[].before)", name, id, c.File)
		}
	}
	return ops, slices.Clone(o.Before), nil
}
