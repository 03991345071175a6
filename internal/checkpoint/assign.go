package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/internal/keygroup"
)

// Assignment says which instances run each operator of a pipeline. An
// operator absent from it runs as one instance that reads every partition.
// Instance k of n owns the contiguous range of its input partitions
// Owned(k, n, P) and with them the key groups those partitions carry.
//
// Changing the assignment rescales the pipeline: every instance restarts
// from Checkpoint, and an instance whose key groups changed builds its
// state from the snapshots of the instances that owned them in that
// checkpoint. A pipeline restarts whole, so every operator sees the same
// cut.
type Assignment struct {
	// Version increases with every change.
	Version uint64 `json:"version"`
	// Operators maps an operator ID to its instances, in order: the order
	// decides which partitions each owns.
	Operators map[string][]string `json:"operators"`
	// Checkpoint is the completed checkpoint the pipeline restarts from
	// under this assignment, 0 for none; Manifests are its snapshots by
	// "operator/instance".
	Checkpoint uint64            `json:"checkpoint"`
	Manifests  map[string]string `json:"manifests,omitempty"`
	Changed    time.Time         `json:"changed"`
}

// Index returns the position of instance among operator's instances, and
// their number; ok is false when the assignment does not name the operator
// (it runs as one instance owning everything).
func (a *Assignment) Index(operator, instance string) (k, n int, ok bool) {
	if a == nil {
		return 0, 1, false
	}
	list, ok := a.Operators[operator]
	if !ok {
		return 0, 1, false
	}
	return slices.Index(list, instance), len(list), true
}

// Owned returns the half-open range [lo, hi) of P partitions that instance
// k of n owns: the same contiguous split as key groups over partitions
// (keygroup.Layout.GroupRange), here of partitions over instances.
func Owned(k, n, P int) (lo, hi int) {
	return keygroup.Layout{Groups: P, Partitions: n}.GroupRange(k)
}

const assignmentKey = "assignment"

// Assignment reads the pipeline's assignment and its KV revision; a
// pipeline that was never scaled returns ErrNotFound.
func (s *Store) Assignment(ctx context.Context) (Assignment, uint64, error) {
	var a Assignment
	rev, err := getJSON(ctx, s.kv, assignmentKey, "assignment", &a)
	if err != nil {
		return Assignment{}, 0, err
	}
	return a, rev, nil
}

// PutAssignment writes a if the assignment is still at revision rev (0:
// absent); otherwise ErrConflict.
func (s *Store) PutAssignment(ctx context.Context, a Assignment, rev uint64) (uint64, error) {
	b, err := json.Marshal(a)
	if err != nil {
		return 0, err
	}
	var nrev uint64
	for attempt := 1; ; attempt++ {
		if rev == 0 {
			nrev, err = s.kv.Create(ctx, assignmentKey, b)
		} else {
			nrev, err = s.kv.Update(ctx, assignmentKey, b, rev)
		}
		if err == nil || attempt == jsapi.Attempts || ctx.Err() != nil ||
			!jsapi.Transient(err) && !errors.Is(err, jetstream.ErrNoStreamResponse) {
			break
		}
		// Unanswered — a cluster electing the bucket's leader — the write
		// may have been stored: if the key holds it now, it was; if the
		// key is still at rev, try again; anything else is a conflict.
		select {
		case <-time.After(jsapi.Backoff(attempt)):
		case <-ctx.Done():
			return 0, fmt.Errorf("checkpoint: put assignment: %w", err)
		}
		e, gerr := s.kv.Get(ctx, assignmentKey)
		switch {
		case gerr == nil && bytes.Equal(e.Value(), b) && e.Revision() > rev:
			return e.Revision(), nil
		case gerr == nil && e.Revision() != rev, errors.Is(gerr, jetstream.ErrKeyNotFound) && rev != 0:
			return 0, ErrConflict
		}
	}
	if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err) {
		return 0, ErrConflict
	}
	if err != nil {
		return 0, fmt.Errorf("checkpoint: put assignment: %w", err)
	}
	return nrev, nil
}

// WatchAssignment calls fn with every new version of the assignment written
// after it was called, until ctx ends.
func (s *Store) WatchAssignment(ctx context.Context, fn func(Assignment)) error {
	w, err := jsapi.WatchKV(ctx, s.js, s.kv.Bucket(), assignmentKey, jsapi.WatchOptions{UpdatesOnly: true})
	if err != nil {
		return fmt.Errorf("checkpoint: watch assignment: %w", err)
	}
	go func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil || e.Operation() != jetstream.KeyValuePut {
					continue
				}
				var a Assignment
				if json.Unmarshal(e.Value(), &a) == nil {
					fn(a)
				}
			}
		}
	}()
	return nil
}
