package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/pkg/natstest"
)

// legacy stores m as a build from before operators had file buckets of
// their own did: its files in the pipeline's shared bucket, under the
// same names, and its manifest naming no bucket — authenticated anew
// when the store seals, as that build's was.
func (s *Store) legacy(t *testing.T, m Manifest) Manifest {
	t.Helper()
	ctx := context.Background()
	obj, err := s.writable(ctx, m.Operator)
	if err != nil {
		t.Fatal(err)
	}
	shared, err := s.bucket(ctx, BucketName(s.pipeline))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		raw, err := obj.GetBytes(ctx, f.Object)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := shared.PutBytes(ctx, f.Object, raw); err != nil {
			t.Fatal(err)
		}
		if err := obj.Delete(ctx, f.Object); err != nil {
			t.Fatal(err)
		}
		delete(s.mu.known, obj.name+"/"+f.Object)
	}
	m.Bucket, m.Checksum, m.MACKey, m.MAC = "", "", "", ""
	if s.keys != nil {
		if err := s.keys.sign(&m); err != nil {
			t.Fatal(err)
		}
	}
	s.putManifest(t, m.Key(), m)
	return m
}

// putManifest stores m under key with its checksum computed anew.
func (s *Store) putManifest(t *testing.T, key string, m Manifest) {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if m.Checksum, err = manifestChecksum(b); err != nil {
		t.Fatal(err)
	}
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if _, err := s.kv.Put(context.Background(), key, b); err != nil {
		t.Fatal(err)
	}
}

// TestASnapshotFromBeforeFileBucketsRestoresFromTheSharedBucket: a
// pipeline whose checkpoint 1 was taken when its operators shared one
// file bucket restores it from there, and takes checkpoint 2 in its
// operator's own bucket, uploading again the table file it shares with
// checkpoint 1. A manifest naming another operator's bucket is corrupt,
// and a sealed one whose bucket was struck out or changed is forged.
// Once checkpoint 1 is collected, its files go from the shared bucket.
func TestASnapshotFromBeforeFileBucketsRestoresFromTheSharedBucket(t *testing.T) {
	ctx := context.Background()
	js := natstest.Run(t).JetStream(t)
	for _, sealed := range []bool{false, true} {
		p := map[bool]string{false: "plain", true: "sealed"}[sealed]
		// The shared bucket as weir declared it then.
		if _, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: BucketName(p), Storage: jetstream.FileStorage}); err != nil {
			t.Fatal(err)
		}
		s, err := Open(ctx, js, p, 1, "op")
		if err != nil {
			t.Fatal(err)
		}
		if sealed {
			line, err := NewKeyLine("k1")
			if err != nil {
				t.Fatal(err)
			}
			k, err := ParseKeys(line)
			if err != nil {
				t.Fatal(err)
			}
			s.Seal(k)
		}
		files := map[string]string{}
		take := func(n uint64) Manifest {
			t.Helper()
			files["00000"+string(rune('0'+n))+".sst"] = "table of checkpoint " + string(rune('0'+n))
			files["MANIFEST-000001"] = "manifest at " + string(rune('0'+n))
			dir := t.TempDir()
			for name, b := range files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(b), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			m, err := s.Upload(ctx, dir, Manifest{Operator: "op", Instance: "0", Checkpoint: n, Generation: 1})
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		restores := func(key string, want map[string]string) error {
			t.Helper()
			m, err := s.Manifest(ctx, key)
			if err != nil {
				return err
			}
			dir := filepath.Join(t.TempDir(), "r")
			if err := s.Download(ctx, m, dir); err != nil {
				return err
			}
			for name, b := range want {
				if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != b {
					t.Errorf("%s: %s restored as %q (%v), want %q", p, name, got, err, b)
				}
			}
			sn := Snapshot{Checkpoint: m.Checkpoint, Manifests: map[string]string{"op/0": key}}
			return s.Verify(ctx, sn)
		}

		m1 := s.legacy(t, take(1))
		at1 := map[string]string{"000001.sst": files["000001.sst"], "MANIFEST-000001": files["MANIFEST-000001"]}
		if err := restores(m1.Key(), at1); err != nil {
			t.Fatalf("%s: checkpoint 1, in the shared bucket: %v", p, err)
		}
		m2 := take(2)
		if m2.Bucket != FilesBucket(p, "op") || m2.NewBytes != m2.FullBytes {
			t.Fatalf("%s: checkpoint 2 names bucket %q and sent %d of %d bytes, want all of them in %s",
				p, m2.Bucket, m2.NewBytes, m2.FullBytes, FilesBucket(p, "op"))
		}
		if err := restores(m2.Key(), map[string]string{"000001.sst": files["000001.sst"], "000002.sst": files["000002.sst"]}); err != nil {
			t.Fatalf("%s: checkpoint 2, in the operator's bucket: %v", p, err)
		}
		if err := restores(m1.Key(), at1); err != nil {
			t.Fatalf("%s: checkpoint 1 after checkpoint 2 was taken: %v", p, err)
		}

		for _, v := range []struct {
			what   string
			bucket string
		}{{"struck out", ""}, {"another operator's", FilesBucket(p, "other")}} {
			forged := m2
			forged.Bucket = v.bucket
			s.putManifest(t, m2.Key(), forged)
			err := restores(m2.Key(), nil)
			want := map[bool]error{false: ErrCorrupt, true: ErrForged}[sealed]
			if !errors.Is(err, want) {
				t.Errorf("%s: checkpoint 2 with its bucket %s: %v, want %v", p, v.what, err, want)
			}
			s.putManifest(t, m2.Key(), m2)
		}

		m3 := take(3)
		for _, m := range []Manifest{m1, m2, m3} {
			key := m.Key()
			if err := s.PutRecord(ctx, Record{Checkpoint: m.Checkpoint, Status: Complete, Triggered: time.Now().UTC(), Completed: time.Now().UTC(),
				Acks: map[string]Ack{"op/0": {Manifest: key}}}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Commit(ctx, Latest{Checkpoint: 3, Manifests: map[string]string{"op/0": m3.Key()}}, 0); err != nil {
			t.Fatal(err)
		}
		c, err := s.Collect(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Checkpoints) != 2 {
			t.Errorf("%s: collected %+v, want checkpoints 1 and 2", p, c)
		}
		shared, err := s.bucket(ctx, BucketName(p))
		if err != nil {
			t.Fatal(err)
		}
		if objs, err := shared.List(ctx); !errors.Is(err, jetstream.ErrNoObjectsFound) {
			t.Errorf("%s: the shared bucket holds %d files after checkpoint 1 was collected (%v), want none", p, len(objs), err)
		}
		if err := restores(m3.Key(), files); err != nil {
			t.Fatalf("%s: checkpoint 3 after the collection: %v", p, err)
		}
	}
}

// TestAFileBucketUnfoundForAMomentIsNotCorrupt: a cluster node that has
// not yet applied a bucket's creation answers that it does not exist. A
// download that finds no file bucket looks again for bucketSettle, and
// restores the snapshot once the bucket answers; a bucket still missing
// after that (jsapi.Settled's attempts, 11 s) makes the snapshot corrupt.
func TestAFileBucketUnfoundForAMomentIsNotCorrupt(t *testing.T) {
	ctx := context.Background()
	js := natstest.Run(t).JetStream(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "000001.sst"), []byte("table"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A store opened for operator op makes its file bucket; one opened
	// for none only reads it, as a restore of op's snapshot may.
	open := func(operators ...string) *Store {
		t.Helper()
		s, err := Open(ctx, js, "p", 1, operators...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	header := Manifest{Operator: "op", Instance: "0", Checkpoint: 1, Generation: 1}
	m, err := open("op").Upload(ctx, dir, header)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteObjectStore(ctx, FilesBucket("p", "op")); err != nil {
		t.Fatal(err)
	}
	// The bucket answers again, with the same objects, a second after the
	// download first misses it.
	back := make(chan error, 1)
	go func() {
		time.Sleep(time.Second)
		_, err := open("op").Upload(ctx, dir, header)
		back <- err
	}()
	restored := filepath.Join(t.TempDir(), "r")
	if err := open().Download(ctx, m, restored); err != nil {
		t.Fatalf("a bucket unfound for a second: %v", err)
	}
	if err := <-back; err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(restored, "000001.sst")); err != nil || string(b) != "table" {
		t.Fatalf("restored %q (%v), want %q", b, err, "table")
	}
	if err := js.DeleteObjectStore(ctx, FilesBucket("p", "op")); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	err = open().Download(ctx, m, filepath.Join(t.TempDir(), "r"))
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a bucket missing for good: %v, want ErrCorrupt", err)
	}
	if took := time.Since(began); took < 10*time.Second {
		t.Fatalf("a missing bucket was judged corrupt after %v, without looking again for it", took)
	}
}
