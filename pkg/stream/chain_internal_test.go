package stream

import (
	"strings"
	"testing"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/state"
)

// TestCheckInputName: positions in the input the operator reads pass,
// whatever partitions they name; a position in another input — an edge
// its chain replaced — refuses the start, naming both.
func TestCheckInputName(t *testing.T) {
	p := plan{contract: &contracts.Contract{File: "c.yaml"}, inputName: "ingress"}
	if err := p.checkInputName(map[string]state.Position{"ingress/0": {Seq: 4}, "ingress/3": {}}, "q7-max"); err != nil {
		t.Fatalf("positions in the ingress: %v", err)
	}
	err := p.checkInputName(map[string]state.Position{"ingress/0": {Seq: 4}, "bids/2": {Seq: 9}}, "q7-max")
	if err == nil || !strings.Contains(err.Error(), `position in input "bids" (bids/2)`) || !strings.Contains(err.Error(), `read "ingress"`) {
		t.Fatalf("a position in bids: %v, want a refusal naming both inputs", err)
	}
}
