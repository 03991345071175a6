package q7

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/window"
)

// TestMaxReadsTheContractsWindow: the window operator takes its shape from
// the contract it runs (emission.window), not from the code: a contract
// with 30-second windows gives an operator holding state for 30s plus the
// allowed lateness, and Shape is the shipped contract's.
func TestMaxReadsTheContractsWindow(t *testing.T) {
	src, err := os.ReadFile("../../contracts/nexmark-q7.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const shape = "window: {kind: tumbling, size: 10s}"
	if !strings.Contains(string(src), shape) {
		t.Fatalf("the shipped contract has no %q", shape)
	}
	for _, tc := range []struct {
		window  string
		horizon time.Duration
	}{
		{shape, 15 * time.Second},
		{"window: {kind: tumbling, size: 30s}", 35 * time.Second},
		{"window: {kind: sliding, size: 1m, slide: 10s}", 65 * time.Second},
	} {
		c, err := contracts.Parse("q7.yaml", []byte(strings.Replace(string(src), shape, tc.window, 1)))
		if err != nil {
			t.Fatal(err)
		}
		if ps := c.Lint(); len(ps) > 0 {
			t.Fatal(ps)
		}
		op, err := NewMax(c)
		if err != nil {
			t.Fatal(err)
		}
		if got := op.(operator.Horizoned).StateHorizon(); got != tc.horizon {
			t.Errorf("%s: the operator holds window state for %s, want %s", tc.window, got, tc.horizon)
		}
	}
	if want := (window.Spec{Kind: window.Tumbling, Size: 10 * time.Second}); Shape() != want {
		t.Errorf("Shape() = %+v, want the shipped contract's %+v", Shape(), want)
	}
}
