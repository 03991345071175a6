package harness

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"

	"github.com/weirflow/weir/internal/catalog"
	"github.com/weirflow/weir/internal/cli"
)

// testHarness is the harness the tests run: the shipped queries and the
// one catalog_test.go adds.
func testHarness() *Harness {
	return &Harness{Catalog: append(catalog.Shipped(), peopleQuery())}
}

// TestMain lets this test binary stand in for weir as the processes `weir
// bench nexmark` and `weir chaos` start (`weir bench child …`): they start
// their own executable, which runs the child over the same catalog.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "bench" && os.Args[2] == "child" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := testHarness().Command("bench")(ctx, os.Args[2:], os.Getenv, os.Stdout, os.Stderr)
		stop()
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// weir runs a harness command, `weir demo|bench|chaos args…` without the
// "weir", and returns what it printed on stdout and stderr.
func weir(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := testHarness().Command(args[0])
	if cmd == nil {
		t.Fatalf("no harness command %q", args[0])
	}
	var out, errOut strings.Builder
	err := cmd(t.Context(), args[1:], func(string) string { return "" }, &out, &errOut)
	if errors.Is(err, cli.ErrHelp) {
		err = nil
	}
	return out.String() + errOut.String(), err
}
