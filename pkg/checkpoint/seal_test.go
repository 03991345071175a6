package checkpoint_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/pkg/checkpoint"
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
	obj, err := js.ObjectStore(ctx, checkpoint.BucketName("p"))
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
