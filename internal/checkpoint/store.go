package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/minio/sio"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/jsapi"
)

// ErrNotFound is returned for a manifest or checkpoint that does not exist.
var ErrNotFound = errors.New("checkpoint: not found")

// getJSON reads key from kv and decodes its JSON value into v, returning
// the entry's revision. A missing key is ErrNotFound, naming what; a
// failed read or decode names it too.
func getJSON(ctx context.Context, kv jetstream.KeyValue, key, what string, v any) (uint64, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, fmt.Errorf("%w: %s", ErrNotFound, what)
	}
	if err != nil {
		return 0, fmt.Errorf("checkpoint: %s: %w", what, err)
	}
	if err := json.Unmarshal(e.Value(), v); err != nil {
		return 0, fmt.Errorf("checkpoint: %s: %w", what, err)
	}
	return e.Revision(), nil
}

// ErrCorrupt is returned for a snapshot that cannot be restored as it was
// taken: a manifest whose checksum does not match, a file missing from the
// Object Store, or one whose bytes differ from the digest its manifest
// recorded.
var ErrCorrupt = errors.New("checkpoint: corrupt snapshot")

// CorruptObject is an Object Store file of a snapshot found missing or
// damaged; errors wrapping ErrCorrupt for a file wrap it too.
type CorruptObject struct {
	Object string
	Why    string
}

func (e *CorruptObject) Error() string { return "object " + e.Object + " " + e.Why }

// Refers reports whether the snapshot manifest m has a file in the
// object.
func (m Manifest) Refers(object string) bool {
	for _, f := range m.Files {
		if f.Object == object {
			return true
		}
	}
	return false
}

// File is one file of a snapshot.
type File struct {
	// Name is the file's name in the snapshot directory.
	Name string `json:"name"`
	Size int64  `json:"size"`
	// Object is the object holding its bytes; immutable files of earlier
	// snapshots are shared.
	Object string `json:"object"`
	// Digest is the SHA-256 of its object's bytes, as the Object Store
	// writes digests ("SHA-256=<base64url>"), checked on every download.
	Digest string `json:"digest,omitempty"`
	// Key is the ID of the key the object is sealed with (Keys); empty
	// when it holds the file as it is.
	Key string `json:"key,omitempty"`
}

// Manifest describes one instance's snapshot.
type Manifest struct {
	Pipeline   string `json:"pipeline"`
	Operator   string `json:"operator"`
	Instance   string `json:"instance"`
	Checkpoint uint64 `json:"checkpoint"`
	// Savepoint names a retained savepoint; empty for a checkpoint.
	Savepoint string `json:"savepoint,omitempty"`
	// Generation of the instance that took the snapshot.
	Generation uint64 `json:"generation"`
	// SchemaVersion of the operator's state; a restore checks it.
	SchemaVersion int    `json:"schema_version"`
	Files         []File `json:"files"`
	// FullBytes is the snapshot's size; NewBytes what this upload sent.
	FullBytes int64 `json:"full_bytes"`
	NewBytes  int64 `json:"new_bytes"`
	// Timings of taking the snapshot.
	Taken    time.Time     `json:"taken"`
	Snapshot time.Duration `json:"snapshot"`
	Upload   time.Duration `json:"upload"`
	// Outputs are the last frame sequences per output partition at the
	// snapshot: frames after them belong to the next epoch.
	Outputs []uint64 `json:"outputs,omitempty"`
	// Partitions are the input partitions the instance owned, [lo, hi);
	// nil means every partition.
	Partitions []int `json:"partitions,omitempty"`
	// Positions are the instance's input positions at the snapshot, by
	// input name: where a restore resumes reading, so whether the
	// streams still hold what it needs can be told without restoring.
	Positions map[string]Held `json:"positions,omitempty"`
	// Meaning is what the instance's state meant when it was taken; nil
	// for a snapshot of a build that did not record it.
	Meaning *Meaning `json:"meaning,omitempty"`
	// Bucket is the object bucket holding the files: the operator's own
	// (FilesBucket). A manifest without it was written before operators
	// had buckets of their own, and its files are in the pipeline's
	// shared bucket (filesIn).
	Bucket string `json:"bucket,omitempty"`
	// MACKey is the ID of the key MAC is computed under; empty, with MAC,
	// for a manifest of a store without keys.
	MACKey string `json:"mac_key,omitempty"`
	// MAC is the HMAC-SHA256, in hex, of the manifest's JSON members but
	// Checksum and MAC, in key order, under a key derived from the key
	// MACKey and the pipeline's name (Keys). A store with keys reads no
	// manifest without a MAC that authenticates it.
	MAC string `json:"mac,omitempty"`
	// Checksum is the SHA-256 of the manifest's JSON with Checksum empty,
	// checked whenever it is read. It finds damage, not forgery: anyone
	// can compute it.
	Checksum string `json:"checksum,omitempty"`
}

// manifestCanonical is a manifest's JSON members but those named in drop,
// in key order: it covers members a later build adds, so that build's
// manifests check here too.
func manifestCanonical(raw []byte, drop ...string) ([]byte, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		return nil, err
	}
	for _, d := range drop {
		delete(members, d)
	}
	return json.Marshal(members)
}

// manifestChecksum is the SHA-256 of a manifest's JSON members but its
// checksum, in key order.
func manifestChecksum(raw []byte) (string, error) {
	b, err := manifestCanonical(raw, "checksum")
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Held is an input's position in a snapshot: the stream, the last
// sequence processed and the sequence through which the input's subject
// was known to hold nothing more to read (state.Position.Clear).
type Held struct {
	Stream string `json:"stream"`
	Seq    uint64 `json:"seq"`
	Clear  uint64 `json:"clear,omitempty"`
}

// Needs is the first sequence of its stream a restore of h reads, when
// the subject holds more: a stream whose first sequence is past it has
// removed records the restore needs.
func (h Held) Needs() uint64 { return max(h.Seq, h.Clear) + 1 }

// PartitionRange returns the input partitions [lo, hi) the instance owned
// among all.
func (m Manifest) PartitionRange(all int) (lo, hi int) {
	if len(m.Partitions) == 2 {
		return m.Partitions[0], m.Partitions[1]
	}
	return 0, all
}

// Key is the manifest's KV key.
func (m Manifest) Key() string {
	return ManifestKey(m.Operator, m.Instance, m.Checkpoint)
}

// ManifestKey is the KV key of a manifest.
func ManifestKey(operator, instance string, n uint64) string {
	return "manifest." + operator + "." + instance + "." + strconv.FormatUint(n, 10)
}

// Store is a pipeline's checkpoint storage: an Object Store bucket of
// files per operator (FilesBucket) and a KV bucket for manifests, the
// checkpoint log and the other records of the control plane
// (registry.go). It owns every key it stores: callers read and write
// typed records, never the raw buckets.
type Store struct {
	pipeline string
	js       jetstream.JetStream
	kv       jetstream.KeyValue
	// replicas is what an operator's file bucket is checked against
	// before the store first writes to it (writable); 0 takes it as
	// deployed.
	replicas int
	// keys seal the files uploaded and open the sealed ones downloaded;
	// nil uploads them as they are.
	keys *Keys

	mu struct {
		sync.Mutex
		known map[string]string // digests of objects known to exist, by bucket/object
		// buckets are the object buckets opened, by name; checked those
		// found as declared (jsapi.Check), which the store may write.
		buckets map[string]fileBucket
		checked map[string]bool
	}
}

// Seal makes the store encrypt every snapshot file it uploads from now on
// with keys' current key and authenticate every manifest it stores, and
// open sealed files with whichever of keys sealed them. From then on it
// reads only authenticated manifests and downloads only sealed files
// (ErrUnsealed, ErrForged). Without it, files are uploaded as they are,
// manifests are checked for damage only, and a sealed file does not
// download (ErrNoKey).
func (s *Store) Seal(keys *Keys) { s.keys = keys }

// BucketName is the name of the pipeline's key-value bucket of manifests
// and the log, and of the object bucket in which its operators shared
// their snapshot files before each had its own (FilesBucket).
func BucketName(pipeline string) string {
	return "WEIR_" + strings.ToUpper(strings.ReplaceAll(pipeline, "-", "_")) + "_CHECKPOINTS"
}

// Declared is the pipeline's checkpoint buckets as weir declares them:
// the key-value bucket of manifests and the log, and the object bucket of
// each of operators' snapshot files, with the given replicas; replicas 0
// leaves an existing bucket's as deployed (and means 1 for a new one).
// The pipeline's shared object bucket of files is declared no more: it is
// read as long as it exists (filesIn).
func Declared(pipeline string, replicas int, operators ...string) []jsapi.Declared {
	name := BucketName(pipeline)
	ds := []jsapi.Declared{
		// No key of it is ever purged: a rollup, which any writer of one
		// key could send to purge them all, is refused (DenyPurge).
		{Kind: jsapi.KindKeyValue, AnyReplicas: replicas == 0, DenyPurge: true, KV: jetstream.KeyValueConfig{
			Bucket: name, Description: "weir checkpoint manifests and log of pipeline " + pipeline,
			Storage: jetstream.FileStorage, Replicas: max(replicas, 1), History: 16,
		}},
	}
	for _, op := range operators {
		ds = append(ds, filesDeclared(pipeline, op, replicas))
	}
	return ds
}

// Open opens the pipeline's checkpoint buckets after checking that they
// are as declared with the given replicas (jsapi.Check): the key-value
// bucket, and the file buckets of the operators named — those the
// process writes. One that differs is refused, never changed — weir
// provision scales them — and missing ones are created when the server
// allows. Any other operator's file bucket is opened when a manifest
// names it: what a tool that knows no contract needs. replicas 0 takes
// existing buckets' replicas as they are, what a tool wants, which must
// never refuse or change a deployment's scale. It reads the bucket once
// before returning: one just created on a cluster may not answer reads
// for a moment ("no responders").
func Open(ctx context.Context, js jetstream.JetStream, pipeline string, replicas int, operators ...string) (*Store, error) {
	for _, d := range Declared(pipeline, replicas, operators...) {
		if err := jsapi.Check(ctx, js, d); err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
	}
	var s *Store
	err := jsapi.Retry(ctx, "open checkpoint store", func(ctx context.Context) (err error) {
		if s, err = open(ctx, js, pipeline); err != nil {
			return err
		}
		if _, err = s.kv.Get(ctx, latestKey); errors.Is(err, jetstream.ErrKeyNotFound) {
			err = nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	s.replicas = replicas
	for _, op := range operators {
		s.mu.checked[FilesBucket(pipeline, op)] = true
		if _, err := s.writable(ctx, op); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func open(ctx context.Context, js jetstream.JetStream, pipeline string) (*Store, error) {
	name := BucketName(pipeline)
	kv, err := js.KeyValue(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: kv %s: %w", name, err)
	}
	return newStore(pipeline, js, kv), nil
}

// Existing opens the pipeline's checkpoint buckets only if they exist:
// reading a pipeline's status must not create them. A pipeline that never
// ran returns an error wrapping ErrNotFound. File buckets are opened when
// a manifest names them, and never created.
func Existing(ctx context.Context, js jetstream.JetStream, pipeline string) (*Store, error) {
	name := BucketName(pipeline)
	kv, err := js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: checkpoint bucket %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: kv %s: %w", name, err)
	}
	return newStore(pipeline, js, kv), nil
}

func newStore(pipeline string, js jetstream.JetStream, kv jetstream.KeyValue) *Store {
	s := &Store{pipeline: pipeline, js: js, kv: kv}
	s.mu.known = map[string]string{}
	s.mu.buckets = map[string]fileBucket{}
	s.mu.checked = map[string]bool{}
	return s
}

// immutable reports whether a Pebble file never changes once written, so
// that one upload serves every later snapshot that includes it.
func immutable(name string) bool {
	return strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob")
}

// Upload uploads the snapshot in dir to its operator's file bucket and
// stores its manifest. Files an earlier snapshot of the same instance and
// generation already uploaded are not sent.
func (s *Store) Upload(ctx context.Context, dir string, m Manifest) (Manifest, error) {
	start := time.Now()
	obj, err := s.writable(ctx, m.Operator)
	if err != nil {
		return Manifest{}, err
	}
	m.Pipeline, m.Bucket = s.pipeline, obj.name
	m.Files, m.FullBytes, m.NewBytes = nil, 0, 0
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		info, err := d.Info()
		if err != nil {
			return err
		}
		// Table file names repeat across the instance's incarnations (a
		// restored or rebuilt store numbers its files anew), never within
		// one: the generation keeps a name to one content.
		object := m.Operator + "/" + m.Instance + "/g" + strconv.FormatUint(m.Generation, 10) + "/" + filepath.ToSlash(rel)
		if !immutable(rel) {
			snap := strconv.FormatUint(m.Checkpoint, 10)
			if m.Savepoint != "" {
				snap += "-" + m.Savepoint
			}
			object = m.Operator + "/" + m.Instance + "/" + snap + "/" + filepath.ToSlash(rel)
		}
		var key string
		if s.keys != nil {
			// A file sealed with another key is another object: after a
			// rotation every file is sealed anew, and the old key is
			// needed only by the snapshots taken before.
			key = s.keys.Current()
			object += ".sealed-" + key
		}
		f := File{Name: filepath.ToSlash(rel), Size: info.Size(), Object: object, Key: key}
		m.FullBytes += f.Size
		if immutable(rel) {
			if f.Digest = s.digestOf(ctx, obj, object); f.Digest != "" {
				m.Files = append(m.Files, f)
				return nil
			}
		}
		r, err := os.Open(path)
		if err != nil {
			return err
		}
		defer r.Close()
		var body io.Reader = r
		if s.keys != nil {
			if body, err = s.keys.seal(r, s.pipeline, object); err != nil {
				return fmt.Errorf("checkpoint: seal %s: %w", object, err)
			}
		}
		oi, err := obj.Put(ctx, jetstream.ObjectMeta{Name: object}, body)
		if err != nil {
			// A put that fails after its meta message was stored — its
			// acknowledgement lost — purges the chunks and leaves the
			// meta: an object whose info says complete and whose
			// download waits for ever, which digestOf would reuse in the
			// next snapshot (weir chaos, auctions: a restore stuck on it).
			// It is marked deleted; its chunks go at the coordinator's
			// next collection.
			if ferr := s.forget(context.WithoutCancel(ctx), obj, object); ferr != nil {
				err = errors.Join(err, fmt.Errorf("and marking it deleted: %w", ferr))
			}
			return fmt.Errorf("checkpoint: upload %s: %w", object, err)
		}
		f.Digest = oi.Digest
		s.mu.Lock()
		s.mu.known[obj.name+"/"+object] = oi.Digest
		s.mu.Unlock()
		m.Files = append(m.Files, f)
		m.NewBytes += f.Size
		return nil
	})
	if err != nil {
		return Manifest{}, err
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Name < m.Files[j].Name })
	m.Upload = time.Since(start)
	m.Checksum, m.MACKey, m.MAC = "", "", ""
	if s.keys != nil {
		if err := s.keys.sign(&m); err != nil {
			return Manifest{}, fmt.Errorf("checkpoint: authenticate manifest: %w", err)
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return Manifest{}, err
	}
	if m.Checksum, err = manifestChecksum(b); err != nil {
		return Manifest{}, err
	}
	if b, err = json.Marshal(m); err != nil {
		return Manifest{}, err
	}
	key := m.Key()
	if m.Savepoint != "" {
		key = SavepointKey(m.Savepoint, m.Operator, m.Instance)
	}
	if _, err := s.kv.Put(ctx, key, b); err != nil {
		return Manifest{}, fmt.Errorf("checkpoint: store manifest %s: %w", key, err)
	}
	return m, nil
}

// SavepointKey is the KV key of a savepoint manifest.
func SavepointKey(name, operator, instance string) string {
	return "savepoint." + name + "." + operator + "." + instance
}

// digestOf returns the digest of an object already stored in obj, or ""
// when it is not.
func (s *Store) digestOf(ctx context.Context, obj fileBucket, object string) string {
	known := obj.name + "/" + object
	s.mu.Lock()
	d := s.mu.known[known]
	s.mu.Unlock()
	if d != "" {
		return d
	}
	if oi, err := obj.GetInfo(ctx, object); err == nil && oi.Digest != "" {
		s.mu.Lock()
		s.mu.known[known] = oi.Digest
		s.mu.Unlock()
		return oi.Digest
	}
	return ""
}

// Manifest reads a manifest by key. A store with keys (Seal) reads only
// a manifest its MAC authenticates, stored under its own key in its own
// pipeline's bucket, and listing sealed files only.
func (s *Store) Manifest(ctx context.Context, key string) (Manifest, error) {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Manifest{}, fmt.Errorf("%w: manifest %s", ErrNotFound, key)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("checkpoint: manifest %s: %w", key, err)
	}
	var m Manifest
	if err := json.Unmarshal(e.Value(), &m); err != nil {
		return Manifest{}, fmt.Errorf("%w: manifest %s: %v", ErrCorrupt, key, err)
	}
	if m.Checksum != "" {
		if sum, err := manifestChecksum(e.Value()); err != nil || sum != m.Checksum {
			return Manifest{}, fmt.Errorf("%w: manifest %s: its checksum %s does not match its content (%s)", ErrCorrupt, key, m.Checksum, sum)
		}
	}
	if s.keys != nil {
		if err := s.keys.authentic(s.pipeline, key, e.Value(), m); err != nil {
			return Manifest{}, err
		}
	}
	return m, nil
}

// Download writes a snapshot's files into dir, which must not hold a store.
// m is as Manifest read it; a store with keys downloads no unsealed file.
// The files are read from the bucket the manifest names (filesIn).
func (s *Store) Download(ctx context.Context, m Manifest, dir string) error {
	if err := s.sealed(m); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	obj, err := s.files(ctx, m)
	if err != nil {
		return err
	}
	for _, f := range m.Files {
		p := filepath.Join(dir, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		var err error
		if f.Key != "" {
			err = s.openFile(ctx, obj, f, p)
		} else {
			err = obj.GetFile(ctx, f.Object, p)
		}
		switch {
		case errors.Is(err, ErrNoKey):
			return fmt.Errorf("checkpoint: %s of %s/%s checkpoint %d: %w", f.Name, m.Operator, m.Instance, m.Checkpoint, err)
		case errors.Is(err, jetstream.ErrObjectNotFound):
			return fmt.Errorf("%w: %s of %s/%s checkpoint %d: %w", ErrCorrupt, f.Name, m.Operator, m.Instance, m.Checkpoint, &CorruptObject{f.Object, "is missing"})
		case errors.Is(err, jetstream.ErrDigestMismatch):
			return fmt.Errorf("%w: %s of %s/%s checkpoint %d: %w", ErrCorrupt, f.Name, m.Operator, m.Instance, m.Checkpoint, &CorruptObject{f.Object, "does not match its own digest"})
		case errors.As(err, new(*CorruptObject)):
			return fmt.Errorf("%w: %s of %s/%s checkpoint %d: %w", ErrCorrupt, f.Name, m.Operator, m.Instance, m.Checkpoint, err)
		case err != nil:
			return fmt.Errorf("checkpoint: download %s: %w", f.Object, err)
		}
		if err := verifyFile(p, f); err != nil {
			return fmt.Errorf("%w: %s of %s/%s checkpoint %d: %w", ErrCorrupt, f.Name, m.Operator, m.Instance, m.Checkpoint, &CorruptObject{f.Object, err.Error()})
		}
	}
	return nil
}

// sealed refuses, in a store with keys, a manifest listing a file without
// a key ID: its object would be read as plaintext.
func (s *Store) sealed(m Manifest) error {
	if s.keys == nil {
		return nil
	}
	for _, f := range m.Files {
		if f.Key == "" {
			return fmt.Errorf("checkpoint: %s of %s/%s checkpoint %d: %w: the manifest lists it without a key ID, and this process, given keys, restores no plaintext",
				f.Name, m.Operator, m.Instance, m.Checkpoint, ErrUnsealed)
		}
	}
	return nil
}

// openFile downloads a sealed file's object and writes what it holds to
// path, checking the object's digest against the manifest's as it reads.
// A sealed file altered, cut short or put in another's place does not
// open: it is corrupt.
func (s *Store) openFile(ctx context.Context, obj fileBucket, f File, path string) error {
	rd, err := obj.Get(ctx, f.Object)
	if err != nil {
		return err
	}
	defer rd.Close()
	h := sha256.New()
	sealed := io.TeeReader(rd, h)
	plain, err := s.keys.open(sealed, s.pipeline, f.Object, f.Key)
	var notAuthentic sio.Error
	switch {
	case errors.Is(err, ErrNoKey):
		return err
	case errors.As(err, &notAuthentic):
		return &CorruptObject{f.Object, "does not open with its key: " + err.Error()}
	case err != nil:
		return &CorruptObject{f.Object, err.Error()}
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, plain)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// Whatever follows the last package is read too: the digest
		// covers the whole object.
		_, err = io.Copy(io.Discard, sealed)
	}
	switch {
	case errors.As(err, &notAuthentic):
		return &CorruptObject{f.Object, "does not open with its key: " + err.Error()}
	case err != nil:
		return err
	}
	if d := jetstream.GetObjectDigestValue(h); d != f.Digest {
		return &CorruptObject{f.Object, fmt.Sprintf("has digest %s, the manifest recorded %s", d, f.Digest)}
	}
	return nil
}

// verifyFile checks a downloaded file's size and digest against its
// manifest's record of them (a manifest written before digests were
// recorded has none to check).
func verifyFile(path string, f File) error {
	r, err := os.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return err
	}
	if n != f.Size {
		return fmt.Errorf("holds %d bytes, the manifest says %d", n, f.Size)
	}
	// A sealed file's digest is its object's, checked as it was opened.
	if d := jetstream.GetObjectDigestValue(h); f.Key == "" && f.Digest != "" && d != f.Digest {
		return fmt.Errorf("has digest %s, the manifest recorded %s", d, f.Digest)
	}
	return nil
}

// Verify checks, without downloading, that a snapshot can be restored as
// far as can be told: every manifest reads back with its checksum (and,
// in a store with keys, authenticates: Manifest), and every file's object
// exists with the digest its manifest recorded. A file whose bytes were
// damaged in place is found only when downloaded.
func (s *Store) Verify(ctx context.Context, sn Snapshot) error {
	if len(sn.Manifests) == 0 {
		return fmt.Errorf("%w: %s has no manifests", ErrCorrupt, sn)
	}
	for _, key := range sn.Manifests {
		m, err := s.Manifest(ctx, key)
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("%w: %s: %v", ErrCorrupt, sn, err)
		}
		if err != nil {
			return err
		}
		obj, err := s.files(ctx, m)
		if err != nil {
			return fmt.Errorf("%s: %w", sn, err)
		}
		for _, f := range m.Files {
			oi, err := obj.GetInfo(ctx, f.Object)
			if errors.Is(err, jetstream.ErrObjectNotFound) {
				return fmt.Errorf("%w: %s: %s of %s/%s: %w", ErrCorrupt, sn, f.Name, m.Operator, m.Instance, &CorruptObject{f.Object, "is missing"})
			}
			if err != nil {
				return err
			}
			if f.Digest != "" && oi.Digest != f.Digest {
				return fmt.Errorf("%w: %s: %s of %s/%s: %w", ErrCorrupt, sn, f.Name, m.Operator, m.Instance, &CorruptObject{f.Object, fmt.Sprintf("has digest %s, the manifest recorded %s", oi.Digest, f.Digest)})
			}
		}
	}
	return nil
}
