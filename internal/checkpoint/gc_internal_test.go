package checkpoint

import (
	"bytes"
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/pkg/natstest"
)

// TestAForgottenFileIsNotReusedAndItsChunksAreCollected: a file an
// upload failed on is marked deleted (forget) — what an instance, which
// may not purge the bucket, does in place of the object store's delete —
// so no later snapshot reuses it by its info, not even after a restart;
// its chunks stay until the coordinator's collection purges them.
func TestAForgottenFileIsNotReusedAndItsChunksAreCollected(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Run(t)
	js, err := jetstream.New(srv.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, js, "p", 1, "op")
	if err != nil {
		t.Fatal(err)
	}
	obj, err := s.writable(ctx, "op")
	if err != nil {
		t.Fatal(err)
	}
	const name = "op/0/g1/000007.sst"
	if _, err := obj.PutBytes(ctx, name, bytes.Repeat([]byte("x"), 300<<10)); err != nil {
		t.Fatal(err)
	}
	chunks := func() uint64 {
		t.Helper()
		st, err := js.Stream(ctx, "OBJ_"+obj.name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter("$O."+obj.name+".C.>"))
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, c := range info.State.Subjects {
			n += c
		}
		return n
	}
	if s.digestOf(ctx, obj, name) == "" || chunks() == 0 {
		t.Fatal("the file was not stored")
	}
	if err := s.forget(ctx, obj, name); err != nil {
		t.Fatal(err)
	}
	s.mu.known = map[string]string{} // as a process started again
	if d := s.digestOf(ctx, obj, name); d != "" {
		t.Fatalf("a forgotten file is reused, digest %s", d)
	}
	if chunks() == 0 {
		t.Fatal("forget purged the chunks, which an instance may not")
	}
	objs, err := obj.List(ctx, jetstream.ListObjectsShowDeleted())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.purgeForgotten(ctx, obj.name, objs); err != nil {
		t.Fatal(err)
	}
	if n := chunks(); n != 0 {
		t.Fatalf("%d chunks of the forgotten file are left after a collection", n)
	}
	// Uploaded again, it is a new object, whole.
	if _, err := obj.PutBytes(ctx, name, []byte("y")); err != nil {
		t.Fatal(err)
	}
	if b, err := obj.GetBytes(ctx, name); err != nil || string(b) != "y" {
		t.Fatalf("the file uploaded again reads %q (%v)", b, err)
	}
}
