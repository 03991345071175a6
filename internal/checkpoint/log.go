package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/jsapi"
)

// Checkpoint statuses.
const (
	Pending  = "pending"
	Complete = "complete"
	Aborted  = "aborted"
)

// Record is the log entry of one checkpoint, kept by the coordinator.
type Record struct {
	Checkpoint uint64    `json:"checkpoint"`
	Status     string    `json:"status"`
	Triggered  time.Time `json:"triggered"`
	Completed  time.Time `json:"completed,omitzero"`
	// Expected lists "operator/instance" of every acknowledgement needed.
	Expected []string       `json:"expected"`
	Acks     map[string]Ack `json:"acks"`
	Reason   string         `json:"reason,omitempty"`
	// Savepoint names the savepoint this checkpoint was taken for.
	Savepoint string `json:"savepoint,omitempty"`
	// Assignment is the assignment version every acknowledgement must
	// have been taken under.
	Assignment uint64 `json:"assignment,omitempty"`
	// Collected marks a completed checkpoint whose snapshots were removed
	// (Store.Collect): it can no longer be restored.
	Collected bool `json:"collected,omitempty"`
}

// Duration is the time from trigger to completion.
func (r Record) Duration() time.Duration {
	if r.Completed.IsZero() {
		return 0
	}
	return r.Completed.Sub(r.Triggered)
}

// Sizes adds up the acknowledged snapshot sizes.
func (r Record) Sizes() (full, incremental int64) {
	for _, a := range r.Acks {
		full += a.FullBytes
		incremental += a.NewBytes
	}
	return full, incremental
}

// Max returns the largest of a per-ack duration.
func (r Record) Max(f func(Ack) time.Duration) time.Duration {
	var m time.Duration
	for _, a := range r.Acks {
		m = max(m, f(a))
	}
	return m
}

// RecordKey is the KV key of a checkpoint's record.
func RecordKey(n uint64) string { return fmt.Sprintf("checkpoint.%020d", n) }

// PutRecord writes a checkpoint's record.
func (s *Store) PutRecord(ctx context.Context, r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := s.kv.Put(ctx, RecordKey(r.Checkpoint), b); err != nil {
		return fmt.Errorf("checkpoint: record %d: %w", r.Checkpoint, err)
	}
	return nil
}

// GetRecord reads a checkpoint's record.
func (s *Store) GetRecord(ctx context.Context, n uint64) (Record, error) {
	var r Record
	if _, err := getJSON(ctx, s.kv, RecordKey(n), fmt.Sprintf("checkpoint %d", n), &r); err != nil {
		return Record{}, err
	}
	return r, nil
}

// Records lists the log, oldest first.
func (s *Store) Records(ctx context.Context) ([]Record, error) {
	keys, err := jsapi.ListKeys(ctx, s.js, s.kv.Bucket(), "checkpoint.*")
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, k := range keys {
		n, err := strconv.ParseUint(strings.TrimPrefix(k, "checkpoint."), 10, 64)
		if err != nil {
			continue
		}
		r, err := s.GetRecord(ctx, n)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Checkpoint < out[j].Checkpoint })
	return out, nil
}

// Recent reads the last n checkpoint records, newest first. The newest
// record is the last one written to the bucket's stream, so reading a few
// costs as many gets however long the log is. A record is missing only for
// a checkpoint that failed before it started; the search stops 3n numbers
// back, so a gappy log stays cheap.
func (s *Store) Recent(ctx context.Context, n int) ([]Record, error) {
	newest := uint64(0)
	if l, _, err := s.Latest(ctx); err == nil {
		newest = l.Checkpoint
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	// A KV bucket B is the stream KV_B; key K is the subject $KV.B.K.
	raw, err := s.js.Stream(ctx, "KV_"+s.kv.Bucket())
	if err != nil {
		return nil, fmt.Errorf("checkpoint: log: %w", err)
	}
	m, err := raw.GetLastMsgForSubject(ctx, "$KV."+s.kv.Bucket()+".checkpoint.*")
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return nil, fmt.Errorf("checkpoint: log: %w", err)
	default:
		last, err := strconv.ParseUint(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: log: subject %s", m.Subject)
		}
		newest = max(newest, last)
	}
	// The records are read n at a time, concurrently: one after the other,
	// twenty reads from a broker slowed by load outlasted a status page's
	// patience.
	var out []Record
	for hi := newest; hi > 0 && hi+3*uint64(n) > newest && len(out) < n; {
		lo := hi - min(hi, uint64(n)) // the window is (lo, hi]
		recs := make([]Record, hi-lo)
		errs := make([]error, hi-lo)
		var wg sync.WaitGroup
		for i := range recs {
			wg.Go(func() { recs[i], errs[i] = s.GetRecord(ctx, hi-uint64(i)) })
		}
		wg.Wait()
		for i, r := range recs {
			switch err := errs[i]; {
			case errors.Is(err, ErrNotFound):
			case err != nil:
				return out, err
			case len(out) < n:
				out = append(out, r)
			}
		}
		hi = lo
	}
	return out, nil
}

// Latest is the pipeline's latest completed checkpoint.
type Latest struct {
	Checkpoint uint64    `json:"checkpoint"`
	Completed  time.Time `json:"completed"`
	// Manifests maps "operator/instance" to its manifest key.
	Manifests map[string]string `json:"manifests"`
	// Assignment is the assignment version the checkpoint was taken under.
	Assignment uint64 `json:"assignment,omitempty"`
}

const latestKey = "latest"

// Latest reads the latest completed checkpoint and its KV revision; a
// pipeline without one returns ErrNotFound and revision 0.
func (s *Store) Latest(ctx context.Context) (Latest, uint64, error) {
	var l Latest
	rev, err := getJSON(ctx, s.kv, latestKey, "latest completed checkpoint", &l)
	if err != nil {
		return Latest{}, 0, err
	}
	return l, rev, nil
}

// ErrConflict is returned by Commit when another coordinator moved the
// latest checkpoint first.
var ErrConflict = errors.New("checkpoint: latest checkpoint changed concurrently")

// Commit makes l the latest completed checkpoint if the latest key is still
// at revision rev (0: absent). This compare-and-set is the commit point.
func (s *Store) Commit(ctx context.Context, l Latest, rev uint64) (uint64, error) {
	b, err := json.Marshal(l)
	if err != nil {
		return 0, err
	}
	var nrev uint64
	if rev == 0 {
		nrev, err = s.kv.Create(ctx, latestKey, b)
	} else {
		nrev, err = s.kv.Update(ctx, latestKey, b, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err) {
		return 0, ErrConflict
	}
	if err != nil {
		return 0, fmt.Errorf("checkpoint: commit %d: %w", l.Checkpoint, err)
	}
	return nrev, nil
}

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// SavepointIndexKey is the KV key listing a savepoint's manifests.
func SavepointIndexKey(name string) string { return "savepoints." + name }

// PutSavepoint records a completed savepoint: its checkpoint and manifests.
func (s *Store) PutSavepoint(ctx context.Context, name string, l Latest) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	_, err = s.kv.Put(ctx, SavepointIndexKey(name), b)
	return err
}

// Savepoint reads a savepoint's manifests.
func (s *Store) Savepoint(ctx context.Context, name string) (Latest, error) {
	var l Latest
	if _, err := getJSON(ctx, s.kv, SavepointIndexKey(name), fmt.Sprintf("savepoint %q", name), &l); err != nil {
		return Latest{}, err
	}
	return l, nil
}

// Savepoints lists the savepoints by name.
func (s *Store) Savepoints(ctx context.Context) (map[string]Latest, error) {
	keys, err := jsapi.ListKeys(ctx, s.js, s.kv.Bucket(), "savepoints.*")
	if err != nil {
		return nil, err
	}
	out := map[string]Latest{}
	for _, k := range keys {
		name := strings.TrimPrefix(k, "savepoints.")
		l, err := s.Savepoint(ctx, name)
		if err != nil {
			return nil, err
		}
		out[name] = l
	}
	return out, nil
}
