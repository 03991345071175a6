package stream

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/telemetry"
)

// RunGroup runs several runtimes — the operators of one service — until
// ctx ends or one of them fails; a failure stops the others, and the first
// failure is returned.
func RunGroup(ctx context.Context, rts ...*Runtime) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(rts))
	for i, rt := range rts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := rt.Run(ctx); err != nil {
				errs[i] = err
				cancel()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ForOperator derives the configuration of one operator of a multi-operator
// service: the same connection, contract and instance, its own operator ID
// and a data directory of its own under the service's.
func (c Config) ForOperator(id string) Config {
	c.Operator = id
	c.DataDir = filepath.Join(c.DataDir, id)
	return c
}

// AllOperators is the operator setting that runs every operator the
// contract assigns to the service.
const AllOperators = "*"

// Factory builds an operator from the pipeline's contract.
type Factory func(c *contracts.Contract) (operator.Operator, error)

// RunService runs a service's operators: the one cfg.Operator names, or,
// when it is AllOperators, every operator the contract assigns to service
// (operators[].service). factories maps operator IDs to constructors. It
// loads and lints the contract first and refuses to start on a bad one.
func RunService(ctx context.Context, cfg Config, service string, factories map[string]Factory) error {
	c := cfg.Contract
	if c == nil {
		var err error
		if c, err = contracts.Load(cfg.ContractPath); err != nil {
			return fmt.Errorf("stream: refusing to start: %w", err)
		}
	}
	var ids []string
	if cfg.Operator != AllOperators {
		ids = []string{cfg.Operator}
	}
	cfg.Contract = c
	rts, err := Runtimes(cfg, service, factories, ids)
	if err != nil {
		return err
	}
	return RunGroup(ctx, rts...)
}

// Runtimes builds the runtimes of a pipeline's operators from cfg.Contract
// and their factories: those ids names or, with none, every operator the
// contract assigns to service (operators[].service), or every operator of
// the contract when service is "" too, in the contract's order. Each is
// configured as cfg.ForOperator(id) — its data directory under cfg.DataDir
// — and then by configure. It is the one place a contract's operators
// become runtimes: services, the demo, the benchmarks, replays and tests
// all build theirs here.
func Runtimes(cfg Config, service string, factories map[string]Factory, ids []string, configure ...func(*Config)) ([]*Runtime, error) {
	c := cfg.Contract
	if c == nil {
		return nil, errors.New("stream: Runtimes without a contract")
	}
	if len(ids) == 0 {
		for _, op := range c.Operators {
			if service == "" || op.Service == service {
				ids = append(ids, op.ID)
			}
		}
		if len(ids) == 0 {
			return nil, fmt.Errorf("stream: refusing to start: contract %s assigns no operator to service %s (operators[].service)", c.File, service)
		}
	}
	who := "service " + service
	if service == "" {
		who = "pipeline " + c.Pipeline
	}
	var rts []*Runtime
	for _, id := range ids {
		f, ok := factories[id]
		if !ok {
			return nil, fmt.Errorf("stream: refusing to start: %s has no operator %q (it has %s)", who, id, strings.Join(slices.Sorted(maps.Keys(factories)), ", "))
		}
		op, err := f(c)
		if err != nil {
			return nil, fmt.Errorf("stream: operator %s: %w", id, err)
		}
		var before map[string]operator.Operator
		if o, _ := c.Operator(id); len(o.Before) > 0 {
			before = map[string]operator.Operator{}
			for _, name := range o.Before {
				f, ok := factories[name]
				if !ok {
					return nil, fmt.Errorf("stream: refusing to start: contract %s chains operator %s before %s (operators[].before), and %s has no operator %q (it has %s)", c.File, name, id, who, name, strings.Join(slices.Sorted(maps.Keys(factories)), ", "))
				}
				if before[name], err = f(c); err != nil {
					return nil, fmt.Errorf("stream: operator %s, chained before %s: %w", name, id, err)
				}
			}
		}
		oc := cfg.ForOperator(id)
		for _, f := range configure {
			f(&oc)
		}
		rt, err := NewChained(oc, op, before)
		if err != nil {
			return nil, err
		}
		rts = append(rts, rt)
	}
	return rts, nil
}

// Main is the whole of a service's run function: configuration from
// command-line args and the environment, OpenTelemetry from the standard
// OTEL_* variables (tracing off unless they ask for it; metrics on
// WEIR_METRICS_ADDR), a JSON log to stderr, and the service's operators
// until ctx ends. The service's main adds only signals and the exit code.
func Main(ctx context.Context, service, version string, args []string, getenv func(string) string, stderr io.Writer, factories map[string]Factory) error {
	cfg, err := ParseConfig(service, AllOperators, args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil // the usage is printed
	}
	if err != nil {
		return err
	}
	cfg.Version = version
	cfg.Logger = slog.New(slog.NewJSONHandler(stderr, nil))
	if getenv("GOMEMLIMIT") == "" {
		// The process runs only this service's operators: the Go
		// runtime's soft limit follows their declared budgets.
		limitProcessMemory()
	}
	tcfg := telemetry.FromEnv(getenv, service)
	tcfg.ServiceVersion = version
	if tcfg.Instance == "" {
		tcfg.Instance = cfg.Instance
	}
	tel, err := telemetry.Start(ctx, tcfg)
	if err != nil {
		return fmt.Errorf("%s: telemetry: %w", service, err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(sctx)
	}()
	if u := tel.MetricsURL(); u != "" {
		cfg.Logger.Info("metrics", "url", u)
	}
	cfg.Telemetry = tel
	return RunService(ctx, cfg, service, factories)
}
