package stream

import (
	"context"
	"strings"
	"testing"

	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/pkg/state"
)

// TestALossMarkerThatCannotBeReadRefusesTheStart: the marker of losses a
// reader saw while reading is what keeps an instance from starting past a
// loss nobody declared; one whose form cannot be read refuses the start,
// never passes for no loss.
func TestALossMarkerThatCannotBeReadRefusesTheStart(t *testing.T) {
	st, err := state.Open(t.TempDir(), state.Options{KeyGroups: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rn := &run{ret: retention{store: st}}
	if err := rn.ret.lostBefore(context.Background()); err != nil {
		t.Fatalf("no marker: %v", err)
	}
	b := st.NewBatch()
	if err := b.PutMeta(metaLost, []byte("{not the losses")); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	err = rn.ret.lostBefore(context.Background())
	if err == nil || !strings.Contains(err.Error(), "refusing to start") {
		t.Fatalf("a marker that cannot be read: %v, want the start refused", err)
	}
}

// TestALossWhoseStreamCannotBeReadStillNeedsItsDeclaration: a loss counted
// while reading is kept as the range a declaration must cover. When where
// the stream ends could not be read, the range used to be empty (first =
// known + 1), which any declaration on the stream covers: an instance
// could start past a loss nobody declared.
func TestALossWhoseStreamCannotBeReadStillNeedsItsDeclaration(t *testing.T) {
	lost := edge.Trimmed{Committed: 100, Clear: 90, Removed: 7, Ahead: true}
	if got, want := lossEnd(lost, 0), uint64(108); got != want {
		t.Fatalf("with the stream's end unread the loss ends before %d, want %d: the 7 removed records after 100 must be covered", got, want)
	}
	if got, want := lossEnd(lost, 500), uint64(501); got != want {
		t.Fatalf("with the stream ending at 500 the loss ends before %d, want %d", got, want)
	}
}
