package checkpoint

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/jsapi"
)

// Collection is what Collect removed.
type Collection struct {
	Checkpoints []uint64
	Manifests   int
	Objects     int
	Bytes       uint64
	// Unreadable are the keys of manifests that could not be decoded or
	// authenticated: the files of the buckets each may name — its
	// operator's and the shared one — were all kept.
	Unreadable []string
}

// Collect removes the snapshots of every completed checkpoint but the
// newest keep, except those something still needs: the checkpoint the
// assignment restarts from (a rescale or a recovery may be restoring it),
// every savepoint, and anything newer than the oldest kept (a checkpoint
// in progress). An Object Store file is removed only when no manifest
// left refers to it and it was stored before the newest completed
// checkpoint was triggered: a later one may belong to a snapshot being
// uploaded, whose manifest does not exist yet. Files are collected in the
// bucket of every operator the store was opened with or a manifest
// names, and in the pipeline's shared bucket while it exists (filesIn).
// The collected checkpoints' records stay in the log, marked Collected.
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
	// Manifests of collected checkpoints go; the rest say which files
	// stay, in which bucket. Every operator named has its files looked
	// at, those of the manifests going included.
	referenced := map[string]map[string]bool{} // bucket → object
	held := map[string]bool{}                  // buckets an unreadable manifest may name
	buckets := map[string]bool{BucketName(s.pipeline): true}
	s.mu.Lock()
	for name := range s.mu.checked {
		buckets[name] = true
	}
	s.mu.Unlock()
	for _, filter := range []string{"manifest.>", "savepoint.>"} {
		keys, err := jsapi.ListKeys(ctx, s.js, s.kv.Bucket(), filter)
		if err != nil {
			return c, fmt.Errorf("checkpoint: collect: list %s: %w", filter, err)
		}
		for _, key := range keys {
			if op, ok := keyOperator(key); ok {
				buckets[FilesBucket(s.pipeline, op)] = true
			}
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
			if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrForged) || errors.Is(err, ErrUnsealed) {
				// It says nothing of its files: keep every file of the
				// buckets it may name, its operator's — whose services
				// alone may write its key — and the shared one, and
				// collect the others'. Stopping here would let one
				// operator's key stop every operator's collection.
				held[BucketName(s.pipeline)] = true
				if op, ok := keyOwner(key); ok {
					held[FilesBucket(s.pipeline, op)] = true
				} else {
					return c, fmt.Errorf("checkpoint: collect: %w", err)
				}
				c.Unreadable = append(c.Unreadable, key)
				continue
			}
			if err != nil {
				// A manifest that cannot be read says nothing of its files:
				// keep every file rather than lose one it needs.
				return c, fmt.Errorf("checkpoint: collect: %w", err)
			}
			bucket, err := s.filesIn(m)
			if err != nil {
				return c, fmt.Errorf("checkpoint: collect: %w", err)
			}
			if referenced[bucket] == nil {
				referenced[bucket] = map[string]bool{}
			}
			for _, f := range m.Files {
				referenced[bucket][f.Object] = true
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(buckets)) {
		if held[name] {
			continue
		}
		if err := s.collectFiles(ctx, name, referenced[name], cutoff, &c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// keyOperator is the operator a manifest's key names:
// manifest.<operator>.<instance>.<n> or savepoint.<name>.<operator>.<instance>.
func keyOperator(key string) (string, bool) {
	parts := strings.Split(key, ".")
	switch {
	case len(parts) == 4 && parts[0] == "manifest":
		return parts[1], true
	case len(parts) == 4 && parts[0] == "savepoint":
		return parts[2], true
	}
	return "", false
}

// keyOwner is the operator whose services may write a manifest's key,
// whatever its depth: manifest.<operator>.… or savepoint.<name>.<operator>.…
// (access grants them no other).
func keyOwner(key string) (string, bool) {
	parts := strings.Split(key, ".")
	switch {
	case len(parts) >= 3 && parts[0] == "manifest":
		return parts[1], true
	case len(parts) >= 4 && parts[0] == "savepoint":
		return parts[2], true
	}
	return "", false
}

// collectFiles removes the files of bucket name that no manifest refers
// to (referenced) and that were stored before cutoff. A bucket that does
// not exist holds nothing to remove.
func (s *Store) collectFiles(ctx context.Context, name string, referenced map[string]bool, cutoff time.Time, c *Collection) error {
	obj, err := s.bucket(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint: collect: %w", err)
	}
	objs, err := obj.List(ctx, jetstream.ListObjectsShowDeleted())
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return fmt.Errorf("checkpoint: collect: list files of %s: %w", name, err)
	}
	if err := s.purgeForgotten(ctx, name, objs); err != nil {
		return err
	}
	for _, o := range objs {
		if o.Deleted || referenced[o.Name] || !o.ModTime.Before(cutoff) {
			continue
		}
		if err := obj.Delete(ctx, o.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("checkpoint: collect file %s of %s: %w", o.Name, name, err)
		}
		s.mu.Lock()
		delete(s.mu.known, name+"/"+o.Name)
		s.mu.Unlock()
		c.Objects++
		c.Bytes += o.Size
	}
	return nil
}

// forget marks object of obj deleted, so that nothing reuses it
// (digestOf), and leaves its chunks to the coordinator's next collection:
// an instance may not purge the bucket's stream — a purge takes any
// subject the request names — and an object's chunks go only by a purge.
func (s *Store) forget(ctx context.Context, obj fileBucket, object string) error {
	info, err := obj.GetInfo(ctx, object, jetstream.GetObjectInfoShowDeleted())
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if info.Deleted {
		return nil
	}
	info.Deleted, info.Size, info.Chunks, info.Digest, info.ModTime = true, 0, 0, "", time.Time{}
	data, err := json.Marshal(info)
	if err != nil {
		return err
	}
	// As the object store writes a deletion: its metadata, rolled up.
	m := nats.NewMsg("$O." + obj.name + ".M." + base64.URLEncoding.EncodeToString([]byte(object)))
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Data = data
	_, err = s.js.PublishMsg(ctx, m)
	return err
}

// purgeForgotten purges the chunks that objects of bucket name marked
// deleted (forget) left: those of a deleted object whose chunk subject
// still holds messages. An upload in progress has chunks and no deleted
// metadata, so it is never touched.
func (s *Store) purgeForgotten(ctx context.Context, name string, objs []*jetstream.ObjectInfo) error {
	var deleted []string
	for _, o := range objs {
		if o.Deleted && o.NUID != "" {
			deleted = append(deleted, o.NUID)
		}
	}
	if len(deleted) == 0 {
		return nil
	}
	st, err := s.js.Stream(ctx, "OBJ_"+name)
	if err != nil {
		return fmt.Errorf("checkpoint: collect: %w", err)
	}
	prefix := "$O." + name + ".C."
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return fmt.Errorf("checkpoint: collect: chunks: %w", err)
	}
	for _, nuid := range deleted {
		if info.State.Subjects[prefix+nuid] == 0 {
			continue
		}
		if err := st.Purge(ctx, jetstream.WithPurgeSubject(prefix+nuid)); err != nil {
			return fmt.Errorf("checkpoint: collect: chunks of a deleted file: %w", err)
		}
	}
	return nil
}
