package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/edge"
	"github.com/weirflow/weir/pkg/erasure"
	"github.com/weirflow/weir/pkg/keygroup"
	"github.com/weirflow/weir/pkg/record"
)

// erasures are a run's view of the pipeline's erasure registry
// (pkg/erasure): the requests the watch delivers, and, under deletion
// erasure-wins, the erased keys whose earlier records the run drops. A
// nil *erasures (no deletion policy) erases and drops nothing.
type erasures struct {
	requests chan erasure.Request
	errs     chan error
	// dropping holds, by key, the requests whose records written before
	// them a step drops; nil unless erasure wins.
	dropping map[string]erasure.Request
}

func (e *erasures) next() <-chan erasure.Request {
	if e == nil {
		return nil
	}
	return e.requests
}

func (e *erasures) failed() <-chan error {
	if e == nil {
		return nil
	}
	return e.errs
}

// drops reports whether r, read in delivery d, belongs to an erased key
// and was written before its erasure.
func (e *erasures) drops(r record.Record, d edge.Delivery) bool {
	if e == nil || len(e.dropping) == 0 {
		return false
	}
	req, ok := e.dropping[string(r.Key)]
	if !ok {
		if req, ok = e.dropping[string(keygroup.Unsplit(r.Key))]; !ok {
			return false
		}
	}
	stream := ""
	if d.Input != nil {
		stream = d.Input.Stream
	}
	return req.Before(r.At, stream, d.Seq)
}

// erasing reports whether the operator keeps what an erasure removes:
// state keyed by key (state keyed by event ID holds no key), or a view.
func (p plan) erasing() bool {
	return len(p.families) > 0 && !p.keyByID || p.outputView
}

// startErasures opens the erasure registry when the contract has a
// deletion policy, erases every key it holds — a restore may have brought
// back state erased after its checkpoint — and then watches it for new
// requests, which the loop erases as they come, until stop.
func (rn *run) startErasures(ctx context.Context) (stop func(), err error) {
	d := rn.plan.contract.Deletion
	if !d.Declared() {
		return func() {}, nil
	}
	// A replay or shadow generation obeys its origin's erasures.
	reg, err := erasure.Ensure(ctx, rn.js, rn.plan.origin, d.Within.D(), rn.cfg.replicas())
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	ctx, stop = context.WithCancel(ctx)
	e := &erasures{requests: make(chan erasure.Request, 16), errs: make(chan error, 1)}
	if d.Replay == contracts.ErasureWins {
		e.dropping = map[string]erasure.Request{}
	}
	var held []erasure.Request
	current := make(chan struct{})
	go func() {
		starting := true
		err := reg.Watch(ctx, func(req erasure.Request) error {
			if starting {
				held = append(held, req)
				return nil
			}
			select {
			case e.requests <- req:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, func() error {
			if starting {
				starting = false
				close(current)
			}
			return nil
		})
		if err != nil && ctx.Err() == nil {
			e.errs <- err
		}
	}()
	select {
	case <-current:
	case err = <-e.errs:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err == nil && len(held) > 0 {
		rn.erasures = e
		rn.log.Info("erasing the keys the registry holds", "keys", len(held))
		err = rn.erase(ctx, held, false)
	}
	if err != nil {
		stop()
		return nil, err
	}
	rn.erasures = e
	return stop, nil
}

// erase removes each requested key from what this instance keeps — every
// state family and timer of the key and of each salt of a split key, in
// the key groups it owns, in one step; then, once every earlier pane is
// stored, the key's windows in its view — and, when asked, reports it on
// erasure.ReportSubject. Under erasure-wins, records of the key written
// before the request are dropped from then on.
func (rn *run) erase(ctx context.Context, reqs []erasure.Request, report bool) error {
	reports := make([]erasure.Report, len(reqs))
	for i, req := range reqs {
		reports[i] = erasure.Report{Operator: rn.cfg.Operator, Instance: rn.cfg.Instance, Rev: req.Rev, GroupLo: rn.lay.groupLo, GroupHi: rn.lay.groupHi}
	}
	if rn.plan.erasing() {
		if err := rn.eraseState(ctx, reqs, reports); err != nil {
			return err
		}
		if rn.view != nil {
			if err := rn.land(ctx); err != nil {
				return err
			}
			for i, req := range reqs {
				if !rn.lay.owns(keygroup.Of(req.Key, rn.plan.keyGroups)) {
					continue
				}
				n, err := rn.view.Erase(ctx, req.Key)
				if err != nil {
					return err
				}
				reports[i].ViewKeys = n
			}
		}
	}
	for _, req := range reqs {
		if rn.erasures.dropping != nil {
			rn.erasures.dropping[string(req.Key)] = req
		}
	}
	if !report || !rn.plan.erasing() {
		return nil
	}
	var errs []error
	for _, r := range reports {
		raw, err := json.Marshal(r)
		if err == nil {
			err = rn.nc.Publish(erasure.ReportSubject(rn.plan.pipeline), raw)
		}
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		rn.log.Warn("reporting an erasure", "err", err)
	}
	rn.log.Info("erased a key", "rev", reports[0].Rev, "families", reports[0].Families, "timers", reports[0].Timers, "view_keys", reports[0].ViewKeys)
	return nil
}

// eraseState erases the requested keys from state in one step.
func (rn *run) eraseState(ctx context.Context, reqs []erasure.Request, reports []erasure.Report) error {
	return rn.retried(ctx, func(ctx context.Context) error {
		s := rn.newStep(rn.now())
		defer s.close()
		for i, req := range reqs {
			reports[i].Families, reports[i].Timers = nil, 0
			for _, key := range keygroup.Forms(req.Key, rn.plan.split) {
				kg := keygroup.Of(key, rn.plan.keyGroups)
				if !rn.lay.owns(kg) {
					continue
				}
				e, err := s.batch.EraseKey(kg, key, s.now)
				if err != nil {
					return fmt.Errorf("stream: erase a key: %w", err)
				}
				for _, f := range e.Families {
					if !slices.Contains(reports[i].Families, f) {
						reports[i].Families = append(reports[i].Families, f)
					}
				}
				reports[i].Timers += e.Timers
			}
		}
		return s.finish(ctx)
	})
}
