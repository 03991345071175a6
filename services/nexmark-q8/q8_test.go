package q8

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/join"
)

// TestJoinReadsTheContractsWindow: the join's window is the contract's
// (emission.window); one it cannot honour is refused; and Size, kept for
// the reference model, is the shipped contract's.
func TestJoinReadsTheContractsWindow(t *testing.T) {
	src, err := os.ReadFile("../../contracts/nexmark-q8.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const shape = "window: {kind: tumbling, size: 10s}"
	if !strings.Contains(string(src), shape) {
		t.Fatalf("the shipped contract has no %q", shape)
	}
	shipped, err := contracts.Parse("q8.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	if got := shipped.Emission.Window.Size.D(); got != Size {
		t.Errorf("Size is %s, the shipped contract's window %s", Size, got)
	}
	parse := func(window string) *contracts.Contract {
		c, err := contracts.Parse("q8.yaml", []byte(strings.Replace(string(src), shape, window, 1)))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	op, err := NewJoin(parse("window: {kind: tumbling, size: 1m}"))
	if err != nil {
		t.Fatal(err)
	}
	if got := op.(*join.Windowed).Size(); got != time.Minute {
		t.Errorf("join window %s, want the contract's 1m", got)
	}
	for _, w := range []string{"window: {kind: session, gap: 10s}", "window: {kind: sliding, size: 10s, slide: 2s}"} {
		if _, err := NewJoin(parse(w)); err == nil || !strings.Contains(err.Error(), "tumbling") {
			t.Errorf("%s: err = %v, want a refusal naming the tumbling window it needs", w, err)
		}
	}
}
