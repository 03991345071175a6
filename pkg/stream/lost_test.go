package stream

import (
	"context"
	"strings"
	"testing"

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
	rn := &run{store: st}
	if err := rn.lostBefore(context.Background()); err != nil {
		t.Fatalf("no marker: %v", err)
	}
	b := st.NewBatch()
	if err := b.PutMeta(metaLost, []byte("{not the losses")); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	err = rn.lostBefore(context.Background())
	if err == nil || !strings.Contains(err.Error(), "refusing to start") {
		t.Fatalf("a marker that cannot be read: %v, want the start refused", err)
	}
}
