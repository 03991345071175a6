package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Collection is what Collect removed.
type Collection struct {
	Checkpoints []uint64
	Manifests   int
	Objects     int
	Bytes       uint64
}

// Collect removes the snapshots of every completed checkpoint but the
// newest keep, except those something still needs: the checkpoint the
// assignment restarts from (a rescale or a recovery may be restoring it),
// every savepoint, and anything newer than the oldest kept (a checkpoint
// in progress). An Object Store file is removed only when no manifest
// left refers to it and it was stored before the newest completed
// checkpoint was triggered: a later one may belong to a snapshot being
// uploaded, whose manifest does not exist yet. The collected checkpoints'
// records stay in the log, marked Collected.
func (s *Store) Collect(ctx context.Context, keep int) (Collection, error) {
	var c Collection
	if keep < 1 {
		return c, fmt.Errorf("checkpoint: collect: keep %d checkpoints: at least 1", keep)
	}
	recs, err := s.Records(ctx)
	if err != nil {
		return c, err
	}
	var complete []Record
	for _, r := range recs {
		if r.Status == Complete && r.Savepoint == "" {
			complete = append(complete, r)
		}
	}
	if len(complete) <= keep {
		return c, nil
	}
	oldest := complete[len(complete)-keep].Checkpoint
	// Files stored after the newest complete checkpoint's record was
	// written may belong to a snapshot being uploaded. Both times are the
	// server's: no clock of this process's is compared with them.
	newest, err := s.kv.Get(ctx, RecordKey(complete[len(complete)-1].Checkpoint))
	if err != nil {
		return c, fmt.Errorf("checkpoint: collect: %w", err)
	}
	cutoff := newest.Created()
	// What a restore may still read: the assignment's snapshots, the
	// latest's and every savepoint's — whose manifests may be those of a
	// checkpoint, for instances that took it at a barrier.
	protect, needed := map[uint64]bool{}, map[string]bool{}
	need := func(n uint64, manifests map[string]string) {
		protect[n] = true
		for _, k := range manifests {
			needed[k] = true
		}
	}
	if a, _, err := s.Assignment(ctx); err == nil {
		need(a.Checkpoint, a.Manifests)
	} else if !errors.Is(err, ErrNotFound) {
		return c, err
	}
	if l, _, err := s.Latest(ctx); err == nil {
		need(l.Checkpoint, l.Manifests)
	} else if !errors.Is(err, ErrNotFound) {
		return c, err
	}
	sps, err := s.Savepoints(ctx)
	if err != nil {
		return c, err
	}
	for _, sp := range sps {
		need(sp.Checkpoint, sp.Manifests)
	}
	collectable := func(n uint64) bool { return n < oldest && !protect[n] }

	// The records first: a collection cut short leaves no checkpoint
	// offered for a restore whose files may be gone.
	for _, r := range complete {
		if !collectable(r.Checkpoint) {
			continue
		}
		if !r.Collected {
			r.Collected = true
			if err := s.PutRecord(ctx, r); err != nil {
				return c, err
			}
			c.Checkpoints = append(c.Checkpoints, r.Checkpoint)
		}
	}
	// Manifests of collected checkpoints go; the rest say which files stay.
	referenced := map[string]bool{}
	for _, filter := range []string{"manifest.>", "savepoint.>"} {
		keys, err := s.kv.ListKeysFiltered(ctx, filter)
		if err != nil {
			return c, fmt.Errorf("checkpoint: collect: list %s: %w", filter, err)
		}
		for key := range keys.Keys() {
			if filter == "manifest.>" {
				n, err := strconv.ParseUint(key[strings.LastIndexByte(key, '.')+1:], 10, 64)
				if err == nil && collectable(n) && !needed[key] {
					if err := s.kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
						return c, fmt.Errorf("checkpoint: collect %s: %w", key, err)
					}
					c.Manifests++
					continue
				}
			}
			m, err := s.Manifest(ctx, key)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				// A manifest that cannot be read says nothing of its files:
				// keep every file rather than lose one it needs.
				return c, fmt.Errorf("checkpoint: collect: %w", err)
			}
			for _, f := range m.Files {
				referenced[f.Object] = true
			}
		}
	}
	objs, err := s.obj.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return c, fmt.Errorf("checkpoint: collect: list files: %w", err)
	}
	for _, o := range objs {
		if referenced[o.Name] || !o.ModTime.Before(cutoff) {
			continue
		}
		if err := s.obj.Delete(ctx, o.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return c, fmt.Errorf("checkpoint: collect file %s: %w", o.Name, err)
		}
		s.mu.Lock()
		delete(s.mu.known, o.Name)
		s.mu.Unlock()
		c.Objects++
		c.Bytes += o.Size
	}
	return c, nil
}
