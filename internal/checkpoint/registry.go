package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/jsapi"
)

// The records of the checkpoint bucket besides manifests and the log:
//
//	instance.<operator>.<instance>  Instance: a running instance, whose
//	                                acknowledgement a checkpoint needs
//	fence.<operator>.<instance>     Fence: where a restored writer's older
//	                                generations' valid frames end
//	trimmed.<operator>.<instance>   TrimmedReport: an instance refusing
//	                                to start past records retention
//	                                removed, for weir recover
//	coordinator                     the coordinator lease
//
// Operator and instance names hold no dots (ValidName), so a key splits
// back into them.

// Instance is an instance's registration: it tells the coordinator whose
// acknowledgements a checkpoint needs.
type Instance struct {
	Operator string `json:"operator"`
	Instance string `json:"instance"`
	// Ingress is set for an instance that reads the ingress: it starts
	// each checkpoint at the trigger.
	Ingress bool      `json:"ingress"`
	Started time.Time `json:"started"`
}

func instanceKey(operator, instance string) string { return "instance." + operator + "." + instance }

// Register records a running instance.
func (s *Store) Register(ctx context.Context, in Instance) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	if _, err := s.kv.Put(ctx, instanceKey(in.Operator, in.Instance), b); err != nil {
		return fmt.Errorf("checkpoint: register instance %s/%s: %w", in.Operator, in.Instance, err)
	}
	return nil
}

// Deregister forgets an instance that stopped or was retired.
func (s *Store) Deregister(ctx context.Context, operator, instance string) error {
	return s.kv.Delete(ctx, instanceKey(operator, instance))
}

// Instances lists the registered instances by "operator/instance".
func (s *Store) Instances(ctx context.Context) (map[string]Instance, error) {
	out := map[string]Instance{}
	err := s.each(ctx, "instance.>", func(key string, v []byte) {
		var in Instance
		if json.Unmarshal(v, &in) == nil && ownKey(key, "instance", in.Operator, in.Instance) {
			out[in.Operator+"/"+in.Instance] = in
		}
	})
	return out, err
}

// Fence tells readers which frames of a restored writer's older
// generations to ignore: those after the restore cut.
type Fence struct {
	Generation uint64   `json:"generation"`
	Cut        []uint64 `json:"cut"`
	// Checkpoint is the checkpoint the writer restored from, and
	// Assignment the assignment version it restored under: together they
	// name the restore, so a reader restoring from the same checkpoint
	// again does not take an older restore's fence for this one's.
	Checkpoint uint64 `json:"checkpoint"`
	Assignment uint64 `json:"assignment,omitempty"`
}

func fenceKey(operator, instance string) string { return "fence." + operator + "." + instance }

// PutFence publishes an instance's fence.
func (s *Store) PutFence(ctx context.Context, operator, instance string, f Fence) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if _, err := s.kv.Put(ctx, fenceKey(operator, instance), b); err != nil {
		return fmt.Errorf("checkpoint: fence %s/%s: %w", operator, instance, err)
	}
	return nil
}

// Fence reads an instance's fence; ok is false when it has none.
func (s *Store) Fence(ctx context.Context, operator, instance string) (f Fence, ok bool, err error) {
	_, err = getJSON(ctx, s.kv, fenceKey(operator, instance), "fence "+operator+"/"+instance, &f)
	switch {
	case errors.Is(err, ErrNotFound):
		return Fence{}, false, nil
	case err != nil:
		return Fence{}, false, err
	}
	return f, true, nil
}

// FencesOf lists the fences of operator's instances by writer,
// "operator/instance": what a reader of the edge operator writes needs,
// and nothing a service of another operator could write. A fence that
// cannot be decoded is an error, never skipped — a writer without its
// fence would have its older generation's frames read as its own — and
// stops only the readers of that operator's frames.
func (s *Store) FencesOf(ctx context.Context, operator string) (map[string]Fence, error) {
	return s.fences(ctx, "fence."+operator+".*")
}

func (s *Store) fences(ctx context.Context, filter string) (map[string]Fence, error) {
	out := map[string]Fence{}
	var bad error
	err := s.each(ctx, filter, func(k string, v []byte) {
		var f Fence
		op, inst, _ := strings.Cut(strings.TrimPrefix(k, "fence."), ".")
		if err := json.Unmarshal(v, &f); err != nil {
			bad = errors.Join(bad, fmt.Errorf("checkpoint: fence %s/%s: %w", op, inst, err))
			return
		}
		out[op+"/"+inst] = f
	})
	return out, errors.Join(err, bad)
}

// TrimmedReport is an instance's refusal to start: the inputs whose
// positions retention has passed.
type TrimmedReport struct {
	Operator string         `json:"operator"`
	Instance string         `json:"instance"`
	At       time.Time      `json:"at"`
	Inputs   []edge.Trimmed `json:"inputs"`
}

func trimmedKey(operator, instance string) string { return "trimmed." + operator + "." + instance }

// PutTrimmed records an instance's refusal to start.
func (s *Store) PutTrimmed(ctx context.Context, r TrimmedReport) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := s.kv.Put(ctx, trimmedKey(r.Operator, r.Instance), b); err != nil {
		return fmt.Errorf("checkpoint: report trimmed inputs of %s/%s: %w", r.Operator, r.Instance, err)
	}
	return nil
}

// DeleteTrimmed forgets an instance's refusal: it started.
func (s *Store) DeleteTrimmed(ctx context.Context, operator, instance string) error {
	err := s.kv.Delete(ctx, trimmedKey(operator, instance))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	return err
}

// TrimmedReports lists the instances refusing to start, by
// "operator/instance".
func (s *Store) TrimmedReports(ctx context.Context) (map[string]TrimmedReport, error) {
	out := map[string]TrimmedReport{}
	err := s.each(ctx, "trimmed.>", func(key string, v []byte) {
		var r TrimmedReport
		if json.Unmarshal(v, &r) == nil && ownKey(key, "trimmed", r.Operator, r.Instance) {
			out[r.Operator+"/"+r.Instance] = r
		}
	})
	return out, err
}

// ownKey reports whether key is kind.<operator>.<instance> for the
// operator and instance its value names. Only an operator's services may
// write under its name (access), so a value naming another operator than
// its key — a registration or a refusal filed for someone else — is not
// taken at its word.
func ownKey(key, kind, operator, instance string) bool {
	return key == kind+"."+operator+"."+instance
}

// each calls fn with every key matching filter and its value. A key
// deleted between the listing and the read is skipped.
func (s *Store) each(ctx context.Context, filter string, fn func(key string, value []byte)) error {
	keys, err := jsapi.ListKeys(ctx, s.js, s.kv.Bucket(), filter)
	if err != nil {
		return fmt.Errorf("checkpoint: list %s: %w", filter, err)
	}
	for _, k := range keys {
		e, err := s.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("checkpoint: read %s: %w", k, err)
		}
		fn(k, e.Value())
	}
	return nil
}

// Lease is the coordinator lease: one coordinator of a pipeline leads, the
// others stand by until it lapses.
type Lease struct {
	Holder string    `json:"holder"`
	Until  time.Time `json:"until"`
}

const leaseKey = "coordinator"

// TakeLease acquires or renews the lease for holder until now+ttl, with a
// compare-and-set; it reports whether holder holds it. Losing a race to
// another coordinator is not an error.
func (s *Store) TakeLease(ctx context.Context, holder string, ttl time.Duration) (bool, error) {
	mine, _ := json.Marshal(Lease{Holder: holder, Until: time.Now().Add(ttl)})
	e, err := s.kv.Get(ctx, leaseKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		_, err = s.kv.Create(ctx, leaseKey, mine)
	case err != nil:
		return false, err
	default:
		var l Lease
		// A lease that does not decode holds no one: it is taken over
		// below, by a compare-and-set on its revision.
		_ = json.Unmarshal(e.Value(), &l)
		if l.Holder != holder && time.Now().Before(l.Until) {
			return false, nil
		}
		_, err = s.kv.Update(ctx, leaseKey, mine, e.Revision())
	}
	return err == nil, nil // an error here is another coordinator winning the race
}

// ReleaseLease gives the lease up, if holder still holds it, so that a
// standby takes over at once.
func (s *Store) ReleaseLease(ctx context.Context, holder string) error {
	e, err := s.kv.Get(ctx, leaseKey)
	if err != nil {
		return err
	}
	var l Lease
	if json.Unmarshal(e.Value(), &l) != nil || l.Holder != holder {
		return nil
	}
	return s.kv.Delete(ctx, leaseKey, jetstream.LastRevision(e.Revision()))
}

// LeaseHolder is the coordinator holding a live lease; "" when none does.
func (s *Store) LeaseHolder(ctx context.Context) (string, error) {
	e, err := s.kv.Get(ctx, leaseKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var l Lease
	if json.Unmarshal(e.Value(), &l) != nil || time.Now().After(l.Until) {
		return "", nil
	}
	return l.Holder, nil
}
