package main

import (
	bytespkg "bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirflow/weir/contracts"
)

// TestContractShow: show prints a contract as written, by file or shipped
// name; -effective prints the whole contract, which parses to the same
// contract, with the defaults the file leaves out marked; a contract with
// problems is refused with them.
func TestContractShow(t *testing.T) {
	show := func(args ...string) (string, string, error) {
		var stdout, stderr bytespkg.Buffer
		err := run(context.Background(), append([]string{"contract", "show"}, args...), func(string) string { return "" }, &stdout, &stderr)
		return stdout.String(), stderr.String(), err
	}
	src, err := os.ReadFile("../../contracts/nexmark-q7.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{"nexmark-q7", "../../contracts/nexmark-q7.yaml"} {
		out, _, err := show(arg)
		if err != nil || out != string(src) {
			t.Errorf("show %s: err %v, printed the file: %v", arg, err, out == string(src))
		}
	}
	out, _, err := show("-effective", "nexmark-q7")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"  fetch_batch: 256\n", "overload: # default\n", "  window:\n    kind: tumbling\n    size: 10s\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the effective contract has no %q:\n%s", want, out)
		}
	}
	effective, err := contracts.Parse("effective.yaml", []byte(out))
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := contracts.Shipped("nexmark-q7")
	if err != nil {
		t.Fatal(err)
	}
	if effective.Fingerprint() != shipped.Fingerprint() {
		t.Error("the effective contract is another contract than the file")
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(string(src), "size: 10s", "size: 10s, gap: 1s", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := show("-effective", bad); err == nil || !strings.Contains(stderr, "emission.window.gap") {
		t.Errorf("a bad contract: err %v, stderr %q, want its problem", err, stderr)
	}
}
