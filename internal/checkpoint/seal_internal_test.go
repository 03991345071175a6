package checkpoint

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/minio/sio"
)

// TestObjectKeysBindThePipeline: a file sealed as an object of pipeline a
// opens as that object of a, and not as the same object of pipeline b nor
// as another object of a, though every store holds the same key.
func TestObjectKeysBindThePipeline(t *testing.T) {
	line, err := NewKeyLine("k1")
	if err != nil {
		t.Fatal(err)
	}
	k, err := ParseKeys(line)
	if err != nil {
		t.Fatal(err)
	}
	r, err := k.seal(bytes.NewReader([]byte("state of a")), "a", "op/0/g1/000001.sst.sealed-k1")
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	open := func(pipeline, object string) ([]byte, error) {
		plain, err := k.open(bytes.NewReader(sealed), pipeline, object, "k1")
		if err != nil {
			return nil, err
		}
		return io.ReadAll(plain)
	}
	if got, err := open("a", "op/0/g1/000001.sst.sealed-k1"); err != nil || string(got) != "state of a" {
		t.Fatalf("in its own place: %q, %v", got, err)
	}
	for _, at := range []struct{ pipeline, object string }{
		{"b", "op/0/g1/000001.sst.sealed-k1"},
		{"a", "op/1/g1/000001.sst.sealed-k1"},
	} {
		_, err := open(at.pipeline, at.object)
		if notAuthentic := (sio.Error{}); !errors.As(err, &notAuthentic) {
			t.Errorf("as %s of pipeline %s: %v, want it not to open", at.object, at.pipeline, err)
		}
	}
}
