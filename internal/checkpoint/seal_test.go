package checkpoint_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/pkg/natstest"
)

// keys parses key lines.
func keys(t *testing.T, lines ...string) *checkpoint.Keys {
	t.Helper()
	k, err := checkpoint.ParseKeys(strings.Join(lines, ""))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func keyLine(t *testing.T, id string) string {
	t.Helper()
	line, err := checkpoint.NewKeyLine(id)
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// TestSealedSnapshotsHoldNoPlaintext: a snapshot uploaded with keys holds
// none of its files' bytes in the Object Store, names its key in the
// manifest, and restores with that key; without it, the download fails
// saying which key it needs, never as corruption. After a rotation new
// snapshots are sealed with the new key and the old ones still restore
// with the old; a sealed object altered in the bucket is corrupt.
func TestSealedSnapshotsHoldNoPlaintext(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Run(t)
	js, err := jetstream.New(srv.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	store := func(k *checkpoint.Keys) *checkpoint.Store {
		s, err := checkpoint.Open(ctx, js, "p", 1)
		if err != nil {
			t.Fatal(err)
		}
		if k != nil {
			s.Seal(k)
		}
		return s
	}
	secret := bytes.Repeat([]byte("card 4111-1111-1111-1111 of alice; "), 5000) // 175 KB: several packages
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "000001.sst"), secret, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "MANIFEST-000001"), []byte("alice"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Pebble's markers are empty files: an empty stream seals and opens too.
	if err := os.WriteFile(filepath.Join(dir, "marker.manifest.000001.MANIFEST-000001"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	line1, line2 := keyLine(t, "k1"), keyLine(t, "k2")
	k1 := keys(t, line1)
	m1, err := store(k1).Upload(ctx, dir, checkpoint.Manifest{Operator: "op", Instance: "0", Checkpoint: 1})
	if err != nil {
		t.Fatal(err)
	}
	obj, err := js.ObjectStore(ctx, checkpoint.FilesBucket("p", "op"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m1.Files {
		if f.Key != "k1" {
			t.Errorf("%s: key %q in the manifest, want k1", f.Name, f.Key)
		}
		raw, err := obj.GetBytes(ctx, f.Object)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(raw, []byte("4111")) || bytes.Contains(raw, []byte("alice")) {
			t.Errorf("object %s holds its file's plaintext", f.Object)
		}
	}
	restore := func(s *checkpoint.Store, m checkpoint.Manifest) error {
		d := filepath.Join(t.TempDir(), "r")
		if err := s.Download(ctx, m, d); err != nil {
			return err
		}
		got, err := os.ReadFile(filepath.Join(d, "000001.sst"))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, secret) {
			t.Fatalf("restored %d bytes unlike the %d uploaded", len(got), len(secret))
		}
		if fi, err := os.Stat(filepath.Join(d, "marker.manifest.000001.MANIFEST-000001")); err != nil || fi.Size() != 0 {
			t.Fatalf("the empty marker restored as %v, %v", fi, err)
		}
		return nil
	}
	if err := restore(store(k1), m1); err != nil {
		t.Fatalf("restore with the key: %v", err)
	}
	err = restore(store(nil), m1)
	if !errors.Is(err, checkpoint.ErrNoKey) || errors.Is(err, checkpoint.ErrCorrupt) || !strings.Contains(err.Error(), `"k1"`) {
		t.Fatalf("restore without a key: %v, want ErrNoKey naming k1", err)
	}
	t.Logf("without a key: %v", err)

	// A rotation: k2 appended, and current.
	k12 := keys(t, line1, line2)
	if k12.Current() != "k2" {
		t.Fatalf("current key %s, want the last, k2", k12.Current())
	}
	m2, err := store(k12).Upload(ctx, dir, checkpoint.Manifest{Operator: "op", Instance: "0", Checkpoint: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m2.Files {
		if f.Key != "k2" {
			t.Errorf("after the rotation %s is sealed with %q, want k2", f.Name, f.Key)
		}
	}
	if err := restore(store(k12), m1); err != nil {
		t.Errorf("the old snapshot with both keys: %v", err)
	}
	if err := restore(store(k12), m2); err != nil {
		t.Errorf("the new snapshot with both keys: %v", err)
	}
	if err := restore(store(keys(t, line2)), m1); !errors.Is(err, checkpoint.ErrNoKey) {
		t.Errorf("the old snapshot without the old key: %v, want ErrNoKey", err)
	}
	// Its manifest is authenticated with the old key too.
	if _, err := store(keys(t, line2)).Manifest(ctx, m1.Key()); !errors.Is(err, checkpoint.ErrNoKey) || errors.Is(err, checkpoint.ErrCorrupt) {
		t.Errorf("the old manifest without the old key: %v, want ErrNoKey", err)
	}

	// Altered in the bucket — a byte flipped, cut short, its header naming
	// another key — a sealed object is corrupt, and never opens. The
	// manifest's digest is set to the altered object's each time, as by
	// someone who can write the manifest too: the seal alone refuses it.
	var sst checkpoint.File
	var at int
	for i, f := range m2.Files {
		if f.Name == "000001.sst" {
			sst, at = f, i
		}
	}
	orig, err := obj.GetBytes(ctx, sst.Object)
	if err != nil {
		t.Fatal(err)
	}
	for _, alter := range []struct {
		what string
		f    func([]byte) []byte
		want error
	}{
		{"a byte flipped", func(b []byte) []byte { b[len(b)/2] ^= 1; return b }, checkpoint.ErrCorrupt},
		{"cut inside its last package", func(b []byte) []byte { return b[:len(b)-100] }, checkpoint.ErrCorrupt},
		{"cut after its first package", func(b []byte) []byte {
			// The header's three lines, then DARE packages of 16 bytes of
			// header, 64 KiB of content and a 16-byte tag.
			h := 0
			for range 3 {
				h += bytes.IndexByte(b[h:], '\n') + 1
			}
			return b[:h+16+64<<10+16]
		}, checkpoint.ErrCorrupt},
		{"its header naming key k1", func(b []byte) []byte { return bytes.Replace(b, []byte("\nk2\n"), []byte("\nk1\n"), 1) }, checkpoint.ErrCorrupt},
	} {
		raw := alter.f(bytes.Clone(orig))
		oi, err := obj.PutBytes(ctx, sst.Object, raw)
		if err != nil {
			t.Fatal(err)
		}
		m := m2
		m.Files = slices.Clone(m2.Files)
		m.Files[at].Digest = oi.Digest
		if err := restore(store(k12), m); !errors.Is(err, alter.want) {
			t.Errorf("a sealed object %s: %v, want %v", alter.what, err, alter.want)
		} else {
			t.Logf("a sealed object %s: %v", alter.what, err)
		}
	}
}

// attack is a pipeline's checkpoint buckets as someone who can write them
// but holds no checkpoint key sees them, beside the stores of pipelines
// that do.
type attack struct {
	t    *testing.T
	js   jetstream.JetStream
	keys *checkpoint.Keys
}

func newAttack(t *testing.T) *attack {
	return &attack{t: t, js: natstest.Run(t).JetStream(t), keys: keys(t, keyLine(t, "k1"))}
}

// store opens pipeline's checkpoint store, sealed with the attack's keys
// when sealed.
func (a *attack) store(pipeline string, sealed bool) *checkpoint.Store {
	a.t.Helper()
	s, err := checkpoint.Open(context.Background(), a.js, pipeline, 1)
	if err != nil {
		a.t.Fatal(err)
	}
	if sealed {
		s.Seal(a.keys)
	}
	return s
}

// take uploads a snapshot whose table file holds content as m, in
// pipeline's store sealed.
func (a *attack) take(pipeline string, m checkpoint.Manifest, content string) checkpoint.Manifest {
	a.t.Helper()
	dir := a.t.TempDir()
	for name, b := range map[string]string{"000001.sst": content, "MANIFEST-000001": "manifest of " + content} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(b), 0o644); err != nil {
			a.t.Fatal(err)
		}
	}
	m, err := a.store(pipeline, true).Upload(context.Background(), dir, m)
	if err != nil {
		a.t.Fatal(err)
	}
	return m
}

func (a *attack) kv(pipeline string) jetstream.KeyValue {
	a.t.Helper()
	kv, err := a.js.KeyValue(context.Background(), checkpoint.BucketName(pipeline))
	if err != nil {
		a.t.Fatal(err)
	}
	return kv
}

// obj is the bucket of the files of pipeline's operator "op".
func (a *attack) obj(pipeline string) jetstream.ObjectStore {
	a.t.Helper()
	obj, err := a.js.ObjectStore(context.Background(), checkpoint.FilesBucket(pipeline, "op"))
	if err != nil {
		a.t.Fatal(err)
	}
	return obj
}

// forge writes the manifest stored under from in pipeline's KV to the key
// to, its JSON members changed by edit and its checksum, which needs no
// key, computed anew. It returns what was stored under to before.
func (a *attack) forge(pipeline, from, to string, edit func(members map[string]json.RawMessage)) []byte {
	a.t.Helper()
	ctx := context.Background()
	kv := a.kv(pipeline)
	e, err := kv.Get(ctx, from)
	if err != nil {
		a.t.Fatal(err)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(e.Value(), &members); err != nil {
		a.t.Fatal(err)
	}
	delete(members, "checksum")
	if edit != nil {
		edit(members)
	}
	b, err := json.Marshal(members)
	if err != nil {
		a.t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	members["checksum"] = a.json(hex.EncodeToString(sum[:]))
	if b, err = json.Marshal(members); err != nil {
		a.t.Fatal(err)
	}
	var old []byte
	if o, err := kv.Get(ctx, to); err == nil {
		old = o.Value()
	}
	if _, err := kv.Put(ctx, to, b); err != nil {
		a.t.Fatal(err)
	}
	return old
}

func (a *attack) json(v any) json.RawMessage {
	a.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		a.t.Fatal(err)
	}
	return b
}

// editFile changes the manifest's file name with change.
func (a *attack) editFile(members map[string]json.RawMessage, name string, change func(*checkpoint.File)) {
	a.t.Helper()
	var files []checkpoint.File
	if err := json.Unmarshal(members["files"], &files); err != nil {
		a.t.Fatal(err)
	}
	for i := range files {
		if files[i].Name == name {
			change(&files[i])
		}
	}
	members["files"] = a.json(files)
}

// restore reads the manifest under key from s and downloads its files,
// failing the test if the table file restores with plaintext it should
// never show.
func (a *attack) restore(s *checkpoint.Store, key, never string) error {
	a.t.Helper()
	ctx := context.Background()
	m, err := s.Manifest(ctx, key)
	if err != nil {
		return err
	}
	return a.download(s, m, never)
}

func (a *attack) download(s *checkpoint.Store, m checkpoint.Manifest, never string) error {
	a.t.Helper()
	dir := filepath.Join(a.t.TempDir(), "r")
	if err := s.Download(context.Background(), m, dir); err != nil {
		return err
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "000001.sst")); never != "" && bytes.Contains(b, []byte(never)) {
		a.t.Errorf("restored the table file as %q", b)
	}
	return nil
}

// refused fails the test unless err wraps want and is not corruption,
// which would fall back to an older snapshot rather than stop.
func refused(t *testing.T, what string, err, want error) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: restored, want it refused (%v)", what, want)
	case !errors.Is(err, want) || errors.Is(err, checkpoint.ErrCorrupt):
		t.Errorf("%s: %v, want %v and not corruption", what, err, want)
	default:
		t.Logf("%s: %v", what, err)
	}
}

// TestUnsealedSnapshotIsRefused: someone who can write a pipeline's
// checkpoint buckets but holds no key replaces a sealed snapshot's table
// file with a plaintext object of their own and removes its key ID from
// the manifest, whose checksum they compute anew. A store with keys
// restores none of it, and says so: not as corruption, which would fall
// back, but as a snapshot not sealed (or a manifest not authentic), which
// stops the instance.
func TestUnsealedSnapshotIsRefused(t *testing.T) {
	ctx := context.Background()
	a := newAttack(t)
	m := a.take("p", checkpoint.Manifest{Operator: "op", Instance: "0", Checkpoint: 1, Generation: 1}, "real state")
	s := a.store("p", true)
	if err := a.restore(s, m.Key(), ""); err != nil {
		t.Fatalf("the sealed snapshot does not restore: %v", err)
	}
	forged := "forged state"
	oi, err := a.obj("p").PutBytes(ctx, "op/0/forged/000001.sst", []byte(forged))
	if err != nil {
		t.Fatal(err)
	}
	plaintext := func(f *checkpoint.File) {
		f.Object, f.Digest, f.Size, f.Key = oi.Name, oi.Digest, int64(len(forged)), ""
	}
	for _, v := range []struct {
		what string
		drop []string
		want error
	}{
		{"a plaintext file, the manifest's MAC dropped", []string{"mac", "mac_key"}, checkpoint.ErrUnsealed},
		{"a plaintext file, the manifest's MAC left as it was", nil, checkpoint.ErrForged},
	} {
		old := a.forge("p", m.Key(), m.Key(), func(members map[string]json.RawMessage) {
			a.editFile(members, "000001.sst", plaintext)
			for _, d := range v.drop {
				delete(members, d)
			}
		})
		refused(t, v.what, a.restore(s, m.Key(), forged), v.want)
		if _, err := a.kv("p").Put(ctx, m.Key(), old); err != nil {
			t.Fatal(err)
		}
	}
	// A manifest handed to Download with a file unsealed is refused too.
	m2 := m
	m2.Files = slices.Clone(m.Files)
	for i := range m2.Files {
		if m2.Files[i].Name == "000001.sst" {
			plaintext(&m2.Files[i])
		}
	}
	refused(t, "a plaintext file downloaded", a.download(s, m2, forged), checkpoint.ErrUnsealed)
}

// TestSealedSnapshotDoesNotOpenInAnotherPipeline: pipelines a and b seal
// their snapshots with the same key file. Someone who can write b's
// buckets but holds no key copies a's sealed objects and manifest into
// b's, as they are and with the manifest's pipeline renamed; b restores
// neither.
func TestSealedSnapshotDoesNotOpenInAnotherPipeline(t *testing.T) {
	ctx := context.Background()
	a := newAttack(t)
	m := a.take("a", checkpoint.Manifest{Operator: "op", Instance: "0", Checkpoint: 1, Generation: 1}, "state of a")
	a.take("b", checkpoint.Manifest{Operator: "op", Instance: "0", Checkpoint: 1, Generation: 1}, "state of b")
	for _, f := range m.Files {
		raw, err := a.obj("a").GetBytes(ctx, f.Object)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.obj("b").PutBytes(ctx, f.Object, raw); err != nil {
			t.Fatal(err)
		}
	}
	b := a.store("b", true)
	for _, v := range []struct {
		what string
		edit func(map[string]json.RawMessage)
	}{
		{"a's manifest and objects copied as they are", nil},
		{"a's manifest renamed to b's and its objects copied", func(members map[string]json.RawMessage) { members["pipeline"] = a.json("b") }},
	} {
		a.forge("a", m.Key(), m.Key(), nil) // the copy's source, its checksum as it was
		e, err := a.kv("a").Get(ctx, m.Key())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.kv("b").Put(ctx, m.Key(), e.Value()); err != nil {
			t.Fatal(err)
		}
		a.forge("b", m.Key(), m.Key(), v.edit)
		refused(t, v.what, a.restore(b, m.Key(), "state of a"), checkpoint.ErrForged)
	}
}

// TestEditedManifestIsRefused: someone who can write a pipeline's
// checkpoint KV but holds no key edits the manifest of checkpoint 2 —
// points its table file at checkpoint 1's object, moves an input's
// position on, puts checkpoint 1's manifest in its place — and computes
// its checksum anew. A store with keys refuses each as not authentic;
// a store without keys (weir status, the coordinator) still reads the
// manifest as it was written.
func TestEditedManifestIsRefused(t *testing.T) {
	ctx := context.Background()
	a := newAttack(t)
	held := func(seq uint64) map[string]checkpoint.Held {
		return map[string]checkpoint.Held{"in": {Stream: "S", Seq: seq}}
	}
	m1 := a.take("p", checkpoint.Manifest{Operator: "op", Instance: "0", Checkpoint: 1, Generation: 1, Positions: held(5)}, "state at 1")
	m2 := a.take("p", checkpoint.Manifest{Operator: "op", Instance: "0", Checkpoint: 2, Generation: 2, Positions: held(10)}, "state at 2")
	var old checkpoint.File
	for _, f := range m1.Files {
		if f.Name == "000001.sst" {
			old = f
		}
	}
	s := a.store("p", true)
	for _, v := range []struct {
		what, from string
		edit       func(map[string]json.RawMessage)
	}{
		{"its table file pointed at checkpoint 1's", m2.Key(), func(members map[string]json.RawMessage) {
			a.editFile(members, "000001.sst", func(f *checkpoint.File) { *f = old })
		}},
		{"an input's position moved on", m2.Key(), func(members map[string]json.RawMessage) { members["positions"] = a.json(held(1000)) }},
		{"checkpoint 1's manifest in its place", m1.Key(), nil},
	} {
		orig := a.forge("p", v.from, m2.Key(), v.edit)
		refused(t, v.what, a.restore(s, m2.Key(), "state at 1"), checkpoint.ErrForged)
		// Nor does it verify, as a fallback would ask.
		sn := checkpoint.Snapshot{Checkpoint: 2, Manifests: map[string]string{"op/0": m2.Key()}}
		if err := s.Verify(ctx, sn); !errors.Is(err, checkpoint.ErrForged) {
			t.Errorf("%s: Verify = %v, want ErrForged", v.what, err)
		}
		if _, err := a.kv("p").Put(ctx, m2.Key(), orig); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.restore(s, m2.Key(), "state at 1"); err != nil {
		t.Fatalf("checkpoint 2 as written: %v", err)
	}
	got, err := a.store("p", false).Manifest(ctx, m2.Key())
	if err != nil || got.Positions["in"].Seq != 10 {
		t.Fatalf("a store without keys reads checkpoint 2 as %+v, %v", got.Positions, err)
	}
}
