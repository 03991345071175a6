package stream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/erasure"
	"github.com/weirflow/weir/internal/keygroup"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
)

// erasures are a run's view of the pipeline's erasure registry
// (internal/erasure): the requests the watch delivers, and, under deletion
// erasure-wins, the erased keys whose earlier records the run drops. A
// nil *erasures (no deletion policy) erases and drops nothing.
type erasures struct {
	requests chan erasure.Request
	errs     chan error
	// dropping holds, by key and by tenant, the requests whose records
	// written before them a step drops; nil unless erasure wins.
	dropping, droppingTenants map[string]erasure.Request
	// erasedThrough is the registry revision of the last erasure the run
	// has applied (stampErased).
	erasedThrough uint64

	// What erasing reads of the run: the state, the plan, the key groups
	// the instance owns.
	store *state.Store
	plan  *plan
	lay   *layout
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
// and was written before its erasure: its coordinate, or the delivery's
// stream sequence, is at or before the request's mark of that stream — or
// it came in a weir frame whose writer had not applied the erasure yet
// (edge.HeaderErased; none said is none applied), which a window's timer
// may have filled from the key's state before its erasure after the
// marks were taken.
func (e *erasures) drops(r record.Record, d edge.Delivery) bool {
	if e == nil || len(e.dropping)+len(e.droppingTenants) == 0 {
		return false
	}
	req, ok := e.dropping[string(r.Key)]
	if !ok && r.Tenant != "" {
		req, ok = e.droppingTenants[r.Tenant]
	}
	if !ok {
		return false
	}
	stream := ""
	if d.Input != nil {
		stream = d.Input.Stream
	}
	if d.Input != nil && d.Input.Frames && d.Msg != nil {
		applied, _ := strconv.ParseUint(d.Msg.Headers().Get(edge.HeaderErased), 10, 64)
		if applied < req.Rev {
			return true
		}
	}
	return req.Before(r.At, stream, d.Seq)
}

// erasing reports whether the operator keeps what an erasure removes —
// state keyed by key (state keyed by event ID holds no key), or a view —
// or writes an outbox's intents by key, which it reports holding
// (erasure.Report.Held).
func (p plan) erasing() bool {
	return len(p.families) > 0 && !p.keyByID || p.outputView || p.outbox && !p.keyByID
}

// startErasures opens the erasure registry when the contract has a
// deletion policy and applies, before the reader opens, every request the
// state does not record as applied — a restore from a checkpoint taken
// before an erasure brings the key's state back, and it goes again, while
// one taken after it keeps what the key gathered since. Then it watches
// the registry for new requests, which the loop applies as they come,
// until stop.
func (rn *run) startErasures(ctx context.Context) (stop func(), err error) {
	d := rn.plan.contract.Deletion
	if !d.Declared() {
		return func() {}, nil
	}
	// A replay or shadow generation obeys its origin's erasures.
	reg, err := erasure.Ensure(ctx, rn.conn.js, rn.plan.origin, d.Within.D(), rn.rt.cfg.replicas())
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	ctx, stop = context.WithCancel(ctx)
	e := &erasures{requests: make(chan erasure.Request, 16), errs: make(chan error, 1), store: rn.store, plan: &rn.plan, lay: &rn.lay}
	if d.Replay == contracts.ErasureWins {
		e.dropping, e.droppingTenants = map[string]erasure.Request{}, map[string]erasure.Request{}
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
	if err == nil {
		rn.erasures = e
		err = rn.erase(ctx, held)
	}
	if err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// appliedKey is the state's record that the instance applied an erasure:
// the registry revision, under the key's digest.
func appliedKey(req erasure.Request) string { return "erased/" + req.Name() }

// erase applies the requests the state does not record as applied: each
// key goes from what this instance keeps — every state family and timer
// of the key and of each salt of a split key, in the key groups it owns,
// in one step, then from the table files (state.Store.Purge); then, once
// every earlier pane is stored, the key's windows from its view — and the
// state records them applied, in a step of their own after all that, so
// that a crash part way applies them again. Each is reported on
// erasure.ReportSubject. Under erasure-wins, records of a requested key
// written before the request are dropped from then on, applied here or
// not.
func (rn *run) erase(ctx context.Context, reqs []erasure.Request) (err error) {
	defer func() {
		if err == nil {
			rn.out.stampErased(rn.erasures.erasedThrough)
		}
	}()
	for _, req := range reqs {
		rn.erasures.erasedThrough = max(rn.erasures.erasedThrough, req.Rev)
		switch {
		case rn.erasures.dropping == nil:
		case req.Tenant != "":
			rn.erasures.droppingTenants[req.Tenant] = req
		default:
			rn.erasures.dropping[string(req.Key)] = req
		}
	}
	if !rn.plan.erasing() {
		return nil
	}
	var todo []erasure.Request
	for _, req := range reqs {
		done, err := rn.erasures.applied(req)
		if err != nil {
			return fmt.Errorf("stream: erasure: %w", err)
		}
		if !done {
			todo = append(todo, req)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	reports := make([]erasure.Report, len(todo))
	for i, req := range todo {
		reports[i] = erasure.Report{Operator: rn.rt.cfg.Operator, Instance: rn.rt.cfg.Instance, Rev: req.Rev, GroupLo: rn.lay.groupLo, GroupHi: rn.lay.groupHi}
	}
	groups, err := rn.eraseState(ctx, todo, reports)
	if err != nil {
		return err
	}
	if err := rn.heldIntents(todo, reports); err != nil {
		return err
	}
	for _, kg := range groups {
		if err := rn.store.Purge(ctx, kg); err != nil {
			return fmt.Errorf("stream: erasure: %w", err)
		}
	}
	if rn.out.view != nil {
		if err := rn.out.land(ctx); err != nil {
			return err
		}
		for i, req := range todo {
			var n int
			var err error
			switch {
			case req.Tenant != "":
				// Each instance purges every pane of the tenant once its
				// own are stored: the last to apply the erasure leaves
				// none.
				n, err = rn.out.view.EraseTenant(ctx, req.Tenant)
			case rn.lay.owns(keygroup.Of(req.Key, rn.plan.keyGroups)):
				n, err = rn.out.view.Erase(ctx, req.Key)
			}
			if err != nil {
				return err
			}
			reports[i].ViewKeys = n
		}
	}
	b := rn.store.NewBatch()
	defer b.Close()
	for _, req := range todo {
		if err := b.PutMeta(appliedKey(req), binary.BigEndian.AppendUint64(nil, req.Rev)); err != nil {
			return err
		}
	}
	if err := b.Commit(); err != nil {
		return fmt.Errorf("stream: erasure: %w", err)
	}
	var errs []error
	for _, r := range reports {
		raw, err := erasure.EncodeReport(r)
		if err == nil {
			err = rn.conn.nc.Publish(erasure.ReportSubject(rn.plan.pipeline, rn.rt.cfg.Operator, rn.rt.cfg.Instance), raw)
		}
		errs = append(errs, err)
		rn.rt.log.Info("erased a key", "rev", r.Rev, "families", r.Families, "timers", r.Timers, "view_keys", r.ViewKeys, "held_intents", r.Held)
	}
	if err := errors.Join(errs...); err != nil {
		rn.rt.log.Warn("reporting an erasure", "err", err)
	}
	return nil
}

// heldIntents counts, in each report, the outbox intents of its request's
// key the state holds for a checkpoint not yet complete (txn.go). They
// are not erased: the effect was decided before the erasure, and dropping
// them would cancel it. Stored once their checkpoint completes, they carry
// the key's erasure names, and weir erase lists them until it finds them
// settled.
func (rn *run) heldIntents(reqs []erasure.Request, reports []erasure.Report) error {
	if rn.out.txn == nil || !rn.plan.outbox {
		return nil
	}
	err := rn.store.HeldOutputs(0, func(_ uint64, v []byte) error {
		_, _, m, err := parseHeld(v)
		if err != nil {
			return err
		}
		for i, req := range reqs {
			if req.Reaches(m.Erasable) {
				reports[i].Held++
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("stream: erasure: held intents: %w", err)
	}
	return nil
}

// eraseState erases the requested keys from state in one step, and
// returns the key groups it erased from.
func (rn *run) eraseState(ctx context.Context, reqs []erasure.Request, reports []erasure.Report) (groups []int, err error) {
	err = rn.retried(ctx, func(ctx context.Context) error {
		s := rn.newStep(rn.rt.now())
		defer s.close()
		groups = groups[:0]
		for i, req := range reqs {
			reports[i].Families, reports[i].Timers, reports[i].Keys = nil, 0, 0
			keys, err := rn.erasures.erasedKeys(req)
			if err != nil {
				return err
			}
			for _, key := range keys {
				kg := keygroup.Of(key, rn.plan.keyGroups)
				e, err := s.batch.EraseKey(kg, key, s.now)
				if err != nil {
					return fmt.Errorf("stream: erase a key: %w", err)
				}
				if !slices.Contains(groups, kg) {
					groups = append(groups, kg)
				}
				if len(e.Families) > 0 || e.Timers > 0 {
					reports[i].Keys++
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
	return groups, err
}

// stampErased has the writer stamp what it cuts from now on with the last
// erasure the run has applied (edge.Writer.SetErased): downstream, a
// record of a key erased later came from state the erasure had not yet
// reached, and erasure-wins drops it (erasures.drops).
func (o *output) stampErased(rev uint64) {
	if o.writer != nil {
		o.writer.SetErased(rev)
	}
}

// applied reports whether the state records req as applied.
func (e *erasures) applied(req erasure.Request) (bool, error) {
	v, ok, err := e.store.Meta(appliedKey(req))
	if err != nil || !ok || len(v) != 8 {
		return false, err
	}
	return binary.BigEndian.Uint64(v) >= req.Rev, nil
}

// erasedKeys are the state keys of the key groups the instance owns that
// req erases: the key and each of its salted forms, or every key of the
// tenant.
func (e *erasures) erasedKeys(req erasure.Request) ([][]byte, error) {
	var out [][]byte
	if req.Tenant == "" {
		for _, key := range keygroup.Forms(req.Key, e.plan.split) {
			if e.lay.owns(keygroup.Of(key, e.plan.keyGroups)) {
				out = append(out, key)
			}
		}
		return out, nil
	}
	for kg := e.lay.groupLo; kg < e.lay.groupHi; kg++ {
		keys, err := e.store.KeysOf(kg, func(key []byte) bool {
			t, ok := keygroup.TenantOf(key)
			return ok && t == req.Tenant
		})
		if err != nil {
			return nil, fmt.Errorf("stream: erase a tenant: %w", err)
		}
		out = append(out, keys...)
	}
	return out, nil
}
