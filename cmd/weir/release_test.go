package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestReleaseLinksNoHarness: the weir that ships, built with -tags release
// (deploy/build-images.sh), links neither the development harness (weir
// demo, bench, chaos) nor the test-only packages it runs — the embedded
// NATS server, the benchmarks, the generator, the coordinator and the
// provider simulator — while a development build, `go run ./cmd/weir`,
// has them all.
func TestReleaseLinksNoHarness(t *testing.T) {
	harnessOnly := []string{
		"github.com/weirflow/weir/internal/harness",
		"github.com/weirflow/weir/pkg/natstest",
		"github.com/weirflow/weir/internal/bench",
		"github.com/nats-io/nats-server/v2/server",
		"github.com/weirflow/weir/services/nexmark-gen",
		"github.com/weirflow/weir/services/coordinator",
		"github.com/weirflow/weir/services/provider",
	}
	deps := func(tags ...string) []string {
		t.Helper()
		out, err := exec.Command("go", append(append([]string{"list", "-deps"}, tags...), ".")...).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", strings.Join(tags, " "), err)
		}
		return strings.Fields(string(out))
	}
	release, dev := deps("-tags", "release"), deps()
	for _, p := range harnessOnly {
		if slices.Contains(release, p) {
			t.Errorf("the release build links %s", p)
		}
		if !slices.Contains(dev, p) {
			t.Errorf("the development build lacks %s: the test would not see it linked", p)
		}
	}
	// What the CLI's own commands run stays: replay, shadow and migrate
	// build the shipped pipelines' operators from the catalog.
	if !slices.Contains(release, "github.com/weirflow/weir/internal/catalog") {
		t.Error("the release build lacks the catalog weir replay runs")
	}
}
