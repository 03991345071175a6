package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/jsapi"
)

// Each operator of a pipeline keeps its snapshot files in an object
// bucket of its own, FilesBucket, which only the services running it may
// write (package access). An object bucket cannot refuse rollups — its
// metadata subjects are rolled up — so one bucket shared by every
// operator, as the pipeline's first one was, lets any of its writers
// purge every operator's files with one message carrying Nats-Rollup:
// all. A manifest names the bucket its files are in (Manifest.Bucket).

// maxBucket is the longest name a bucket's stream, "OBJ_" and the bucket,
// may have: nats-server refuses a stream name over 255 bytes
// (JSMaxNameLen).
const maxBucket = 255 - len("OBJ_")

// FilesBucket is the name of the object bucket of operator's snapshot
// files in pipeline: BucketName(pipeline), a '-', and the operator's name
// upper-cased, e.g. WEIR_NEXMARK_CHECKPOINTS-DEDUP. Lowercase letters are
// upper-cased, digits and '-' kept, and any other byte written as '_'
// and two hexadecimal digits, so that every operator has a name of its
// own (a contract's names hold only lowercase letters, digits and '-').
// The part before the first '-' is the pipeline's: BucketName holds no
// '-', so no operator's name can make it another pipeline's, and no file
// bucket is named as a key-value bucket. A name that would reach
// maxBucket is cut short and ends in '_' and 32 hexadecimal digits of
// the SHA-256 of the whole: it has exactly maxBucket bytes, which no
// name that is not cut has.
func FilesBucket(pipeline, operator string) string {
	var b strings.Builder
	b.WriteString(BucketName(pipeline))
	b.WriteByte('-')
	for i := 0; i < len(operator); i++ {
		switch c := operator[i]; {
		case c >= 'a' && c <= 'z':
			b.WriteByte(c - 'a' + 'A')
		case c >= '0' && c <= '9' || c == '-':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "_%02X", c)
		}
	}
	name := b.String()
	if len(name) >= maxBucket {
		sum := sha256.Sum256([]byte(name))
		name = name[:maxBucket-33] + "_" + hex.EncodeToString(sum[:16])
	}
	return name
}

// FilesPurgeSubject is the JetStream API subject of a purge of the
// snapshot files of operator in pipeline: what the object store requests
// when an upload fails, and only the coordinator and the administrator
// may.
func FilesPurgeSubject(pipeline, operator string) string {
	return "$JS.API.STREAM.PURGE.OBJ_" + FilesBucket(pipeline, operator)
}

// filesDeclared is the object bucket of operator's snapshot files as weir
// declares it (Declared).
func filesDeclared(pipeline, operator string, replicas int) jsapi.Declared {
	return jsapi.Declared{Kind: jsapi.KindObjectStore, AnyReplicas: replicas == 0, Obj: jetstream.ObjectStoreConfig{
		Bucket:      FilesBucket(pipeline, operator),
		Description: "weir checkpoint files of operator " + operator + " of pipeline " + pipeline,
		Storage:     jetstream.FileStorage, Replicas: max(replicas, 1),
	}}
}

// filesIn is the object bucket holding m's files: its operator's, as the
// manifest names it, or the pipeline's shared bucket for a manifest that
// names none. Every manifest Upload stores names its bucket, so one that
// does not was stored by a build from before operators had buckets of
// their own, when every file was in the shared bucket: its checkpoints
// and savepoints restore from there as long as the bucket is kept. A
// store with keys reads only manifests whose MAC covers the name, or its
// absence. A manifest naming another bucket — another operator's — is
// corrupt: no build writes one.
func (s *Store) filesIn(m Manifest) (string, error) {
	switch m.Bucket {
	case FilesBucket(s.pipeline, m.Operator):
		return m.Bucket, nil
	case "":
		return BucketName(s.pipeline), nil
	}
	return "", fmt.Errorf("%w: manifest of %s/%s checkpoint %d names object bucket %s for its files, not its operator's %s",
		ErrCorrupt, m.Operator, m.Instance, m.Checkpoint, m.Bucket, FilesBucket(s.pipeline, m.Operator))
}

// fileBucket is an object bucket of snapshot files, opened, and its name.
type fileBucket struct {
	name string
	jetstream.ObjectStore
}

// files opens the bucket holding m's files (filesIn); for a snapshot
// without files, none. A bucket that does not exist holds none of them:
// the snapshot is corrupt — once it has gone unfound for a while
// (settledBucket), since a cluster's look-up can miss a bucket for a
// moment.
func (s *Store) files(ctx context.Context, m Manifest) (fileBucket, error) {
	if len(m.Files) == 0 {
		return fileBucket{}, nil
	}
	name, err := s.filesIn(m)
	if err != nil {
		return fileBucket{}, err
	}
	obj, err := s.settledBucket(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return obj, fmt.Errorf("%w: %s/%s checkpoint %d: %w", ErrCorrupt, m.Operator, m.Instance, m.Checkpoint,
			&CorruptObject{m.Files[0].Object, "is missing: the object bucket " + name + " of its files does not exist"})
	}
	return obj, err
}

// bucket opens the object bucket name, never creating it: a missing one
// is jetstream.ErrBucketNotFound. It retries while a cluster leaves the
// look-up unanswered: a bucket just created may not answer for a moment.
func (s *Store) bucket(ctx context.Context, name string) (fileBucket, error) {
	s.mu.Lock()
	obj, ok := s.mu.buckets[name]
	s.mu.Unlock()
	if ok {
		return obj, nil
	}
	var o jetstream.ObjectStore
	err := jsapi.Retry(ctx, "open object store "+name, func(ctx context.Context) (err error) {
		o, err = s.js.ObjectStore(ctx, name)
		return err
	})
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return fileBucket{}, err
	}
	if err != nil {
		return fileBucket{}, fmt.Errorf("checkpoint: object store %s: %w", name, err)
	}
	obj = fileBucket{name, o}
	s.mu.Lock()
	s.mu.buckets[name] = obj
	s.mu.Unlock()
	return obj, nil
}

// writable opens operator's file bucket to store files in, checking it
// against its declaration (jsapi.Check) the first time, as Open checks
// the buckets of the operators it is given.
func (s *Store) writable(ctx context.Context, operator string) (fileBucket, error) {
	name := FilesBucket(s.pipeline, operator)
	s.mu.Lock()
	checked := s.mu.checked[name]
	s.mu.Unlock()
	if !checked {
		if err := jsapi.Check(ctx, s.js, filesDeclared(s.pipeline, operator, s.replicas)); err != nil {
			return fileBucket{}, fmt.Errorf("checkpoint: %w", err)
		}
		s.mu.Lock()
		s.mu.checked[name] = true
		s.mu.Unlock()
	}
	// The bucket was just checked or created. On a cluster a look-up can
	// still miss it for a moment, answered by a node that has not applied
	// its creation yet (TestChaosOnACluster: a coordinator ended on it).
	obj, err := s.settledBucket(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		err = fmt.Errorf("checkpoint: object store %s: %w", name, err)
	}
	return obj, err
}

// settledBucket opens the object bucket name (bucket), looking again
// while it is not found, as jsapi.Settled does: a cluster node that has
// not yet applied a bucket's creation answers that it does not exist.
func (s *Store) settledBucket(ctx context.Context, name string) (fileBucket, error) {
	var obj fileBucket
	err := jsapi.Settled(ctx, "open object store "+name, func(ctx context.Context) (err error) {
		obj, err = s.bucket(ctx, name)
		return err
	})
	return obj, err
}
