package checkpoint_test

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/pkg/natstest"
)

// TestEveryOperatorHasAFileBucketOfItsOwn: file buckets are named for
// the pipeline and the operator, as the Object Store takes a name; no two
// operators of one pipeline or of two share one, however their names are
// chosen, none is named as the pipelines' key-value buckets, and the
// longest names are cut to what the server takes.
func TestEveryOperatorHasAFileBucketOfItsOwn(t *testing.T) {
	if got, want := checkpoint.FilesBucket("nexmark", "dedup"), "WEIR_NEXMARK_CHECKPOINTS-DEDUP"; got != want {
		t.Fatalf("FilesBucket(nexmark, dedup) = %s, want %s", got, want)
	}
	long := strings.Repeat("o", 300)
	pairs := [][2]string{
		{"nexmark", "dedup"}, {"nexmark", "publish"},
		// The pipeline's part ends at the first '-', which BucketName
		// never holds.
		{"x", "a-checkpoints-b"}, {"x-checkpoints-a", "b"}, {"x", "checkpoints"}, {"x-checkpoints", ""},
		// Names a contract refuses are escaped, not folded together.
		{"p", "a-b"}, {"p", "a_b"}, {"p", "A-B"}, {"p", "a_2Db"}, {"p", "é"},
		{"p", long}, {"p", long + "x"}, {"p", long[:231]}, {"p", long[:232]}, {"p", long[:233]},
	}
	valid := regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)
	seen := map[string][2]string{}
	for _, p := range pairs {
		name := checkpoint.FilesBucket(p[0], p[1])
		if !valid.MatchString(name) || len("OBJ_"+name) > 255 {
			t.Errorf("%v: bucket %q is not a name the Object Store and the server take", p, name)
		}
		if other, ok := seen[name]; ok {
			t.Errorf("%v and %v share the file bucket %s", p, other, name)
		}
		seen[name] = p
		for _, pipeline := range []string{p[0], "x-checkpoints-a-checkpoints-b"} {
			if name == checkpoint.BucketName(pipeline) {
				t.Errorf("%v: file bucket %s is named as pipeline %s's key-value bucket", p, name, pipeline)
			}
		}
	}
	// The server takes the longest.
	js := natstest.Run(t).JetStream(t)
	if _, err := checkpoint.Open(context.Background(), js, "p", 1, long); err != nil {
		t.Fatalf("the file bucket of an operator named with 300 bytes: %v", err)
	}
}

// TestARollupOfOneOperatorsFilesLeavesAnothers: operators a and b of one
// pipeline upload snapshots; a message with Nats-Rollup: all on a's file
// bucket — what any writer of it can send — removes a's files, and b's
// snapshot still restores.
func TestARollupOfOneOperatorsFilesLeavesAnothers(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Run(t)
	nc := srv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := checkpoint.Open(ctx, js, "p", 1, "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "000001.sst"), []byte("a table"), 0o644); err != nil {
		t.Fatal(err)
	}
	ms := map[string]checkpoint.Manifest{}
	for _, op := range []string{"a", "b"} {
		if ms[op], err = s.Upload(ctx, dir, checkpoint.Manifest{Operator: op, Instance: "0", Checkpoint: 1}); err != nil {
			t.Fatal(err)
		}
	}
	rollup := nats.NewMsg("$O." + checkpoint.FilesBucket("p", "a") + ".M." + base64.URLEncoding.EncodeToString([]byte("x")))
	rollup.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
	if _, err := js.PublishMsg(ctx, rollup); err != nil {
		t.Fatal(err)
	}
	if err := s.Download(ctx, ms["a"], filepath.Join(t.TempDir(), "a")); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("a's snapshot after a rollup of its bucket: %v, want it corrupt (the rollup attacked nothing)", err)
	}
	if err := s.Download(ctx, ms["b"], filepath.Join(t.TempDir(), "b")); err != nil {
		t.Fatalf("b's snapshot after a rollup of a's bucket: %v", err)
	}
}
