package checkpoint_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
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

	// Altered in the bucket: one byte of the sealed table file flipped.
	var sst checkpoint.File
	for _, f := range m2.Files {
		if f.Name == "000001.sst" {
			sst = f
		}
	}
	raw, err := obj.GetBytes(ctx, sst.Object)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 1
	if _, err := obj.PutBytes(ctx, sst.Object, raw); err != nil {
		t.Fatal(err)
	}
	if err := restore(store(k12), m2); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Errorf("an altered sealed object: %v, want ErrCorrupt", err)
	}
}
