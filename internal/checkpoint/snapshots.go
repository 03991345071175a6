package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
)

// Snapshot is a completed checkpoint or a savepoint a pipeline can restart
// from.
type Snapshot struct {
	// Savepoint names a savepoint; empty for a checkpoint.
	Savepoint  string    `json:"savepoint,omitempty"`
	Checkpoint uint64    `json:"checkpoint"`
	Completed  time.Time `json:"completed"`
	// Manifests maps "operator/instance" to its manifest key.
	Manifests map[string]string `json:"manifests"`
}

func (s Snapshot) String() string {
	if s.Savepoint != "" {
		return "savepoint " + s.Savepoint
	}
	return fmt.Sprintf("checkpoint %d", s.Checkpoint)
}

// Snapshots lists what the pipeline can restart from, newest first: the
// last n complete checkpoints of the log and every savepoint.
func (s *Store) Snapshots(ctx context.Context, n int) ([]Snapshot, error) {
	// The whole log: after an outage its newest records may all be
	// checkpoints that aborted.
	recs, err := s.Records(ctx)
	if err != nil {
		return nil, err
	}
	var out []Snapshot
	for i := len(recs) - 1; i >= 0 && len(out) < n; i-- {
		r := recs[i]
		if r.Status != Complete || r.Savepoint != "" || r.Collected {
			continue
		}
		out = append(out, Snapshot{Checkpoint: r.Checkpoint, Completed: r.Completed, Manifests: r.manifests()})
	}
	sps, err := s.Savepoints(ctx)
	if err != nil {
		return nil, err
	}
	for name, l := range sps {
		out = append(out, Snapshot{Savepoint: name, Checkpoint: l.Checkpoint, Completed: l.Completed, Manifests: l.Manifests})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Completed.After(out[j].Completed) })
	return out, nil
}

// manifests are the manifest keys of a record's acknowledgements.
func (r Record) manifests() map[string]string {
	m := map[string]string{}
	for key, a := range r.Acks {
		if a.Manifest != "" {
			m[key] = a.Manifest
		}
	}
	return m
}

// SnapshotOf finds a complete checkpoint (savepoint empty) or a savepoint.
func (s *Store) SnapshotOf(ctx context.Context, checkpoint uint64, savepoint string) (Snapshot, error) {
	if savepoint != "" {
		l, err := s.Savepoint(ctx, savepoint)
		if err != nil {
			return Snapshot{}, err
		}
		return Snapshot{Savepoint: savepoint, Checkpoint: l.Checkpoint, Completed: l.Completed, Manifests: l.Manifests}, nil
	}
	r, err := s.GetRecord(ctx, checkpoint)
	if err != nil {
		return Snapshot{}, err
	}
	if r.Status != Complete {
		return Snapshot{}, fmt.Errorf("checkpoint: checkpoint %d is %s, not complete: it cannot be restored", checkpoint, r.Status)
	}
	if r.Collected {
		return Snapshot{}, fmt.Errorf("checkpoint: checkpoint %d was collected (recovery.retained_checkpoints): its snapshots are gone", checkpoint)
	}
	return Snapshot{Checkpoint: r.Checkpoint, Completed: r.Completed, Manifests: r.manifests()}, nil
}

// Gap is an input of a snapshot whose stream no longer holds what a
// restore of it would read next.
type Gap struct {
	Instance string `json:"instance"` // "operator/instance"
	Input    string `json:"input"`
	Stream   string `json:"stream"`
	// Needs is the first sequence the restore reads; First is where the
	// stream now begins.
	Needs uint64 `json:"needs"`
	First uint64 `json:"first"`
}

// Gaps reads the snapshot's manifests and returns the inputs whose streams
// have removed what a restore of it needs, and the instances whose
// manifests record no positions (taken by an older build: unknown).
func (s *Store) Gaps(ctx context.Context, sn Snapshot) (gaps []Gap, unknown []string, err error) {
	firsts := map[string]uint64{}
	for _, inst := range slices.Sorted(maps.Keys(sn.Manifests)) {
		m, err := s.Manifest(ctx, sn.Manifests[inst])
		if err != nil {
			return nil, nil, err
		}
		if m.Positions == nil {
			unknown = append(unknown, inst)
			continue
		}
		for _, in := range slices.Sorted(maps.Keys(m.Positions)) {
			h := m.Positions[in]
			first, ok := firsts[h.Stream]
			if !ok {
				st, err := s.js.Stream(ctx, h.Stream)
				if err != nil {
					return nil, nil, fmt.Errorf("checkpoint: %s: stream %s: %w", sn, h.Stream, err)
				}
				first = st.CachedInfo().State.FirstSeq
				firsts[h.Stream] = first
			}
			if first > h.Needs() {
				gaps = append(gaps, Gap{Instance: inst, Input: in, Stream: h.Stream, Needs: h.Needs(), First: first})
			}
		}
	}
	return gaps, unknown, nil
}

// Restart restarts the pipeline from snapshot sn: it writes an assignment
// naming sn, which every running instance watches, so the whole pipeline
// restarts from that one cut, and fences the instances that took it at
// its cut at once. Operators keep the instances the current assignment
// gives them — a snapshot taken before a rescale restores into today's
// layout, as a rescale does — and the others get the instances that took
// it. Nothing is checked against the streams here; an instance whose
// inputs were trimmed refuses to start.
func Restart(ctx context.Context, js jetstream.JetStream, c *contracts.Contract, sn Snapshot) (Assignment, error) {
	return restart(ctx, js, c, sn, nil)
}

// RestartIf is Restart only while the assignment is still at version (0:
// none): otherwise ErrConflict, since another restart came first.
func RestartIf(ctx context.Context, js jetstream.JetStream, c *contracts.Contract, sn Snapshot, version uint64) (Assignment, error) {
	return restart(ctx, js, c, sn, &version)
}

func restart(ctx context.Context, js jetstream.JetStream, c *contracts.Contract, sn Snapshot, version *uint64) (Assignment, error) {
	st, err := Open(ctx, js, c.Pipeline, 0)
	if err != nil {
		return Assignment{}, err
	}
	if len(sn.Manifests) == 0 {
		return Assignment{}, fmt.Errorf("checkpoint: %s has no snapshots to restore", sn)
	}
	cur, _, err := st.Assignment(ctx)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Assignment{}, err
	}
	type inst struct {
		name string
		lo   int
	}
	perOp := map[string][]inst{}
	for key, mk := range sn.Manifests {
		op, name, _ := strings.Cut(key, "/")
		m, err := st.Manifest(ctx, mk)
		if err != nil {
			return Assignment{}, err
		}
		lo, _ := m.PartitionRange(0)
		perOp[op] = append(perOp[op], inst{name, lo})
	}
	set := map[string][]string{}
	for op, insts := range perOp {
		if now := cur.Operators[op]; len(now) > 0 {
			set[op] = slices.Clone(now)
			continue
		}
		sort.Slice(insts, func(i, j int) bool { return insts[i].lo < insts[j].lo })
		for _, in := range insts {
			set[op] = append(set[op], in.name)
		}
	}
	return reassign(ctx, st, js, c, set, &sn, version)
}

// Refers reports whether any of the snapshot's manifests has a file in
// the object; a manifest that cannot be read counts as having it.
func (s *Store) Refers(ctx context.Context, sn Snapshot, object string) bool {
	for _, key := range sn.Manifests {
		m, err := s.Manifest(ctx, key)
		if err != nil || m.Refers(object) {
			return true
		}
	}
	return false
}
