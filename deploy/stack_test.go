package deploy_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weirflow/weir/deploy"
)

var update = flag.Bool("update", false, "rewrite the generated deployment files (as go run ./deploy/cmd/generate does)")

// TestGeneratedFilesAreCurrent: the committed compose.yaml, Dockerfile and
// Kubernetes manifests are what the generator makes of the contracts and
// templates. After changing either:
//
//	go run ./deploy/cmd/generate
func TestGeneratedFilesAreCurrent(t *testing.T) {
	root := repoRoot(t)
	s, files := generate(t, root)
	for name, want := range files {
		path := filepath.Join(root, name)
		if *update {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not what the contracts and deploy/templates make of it (%v); run: go run ./deploy/cmd/generate", name, err)
		}
	}
	var names []string
	for _, p := range s.Pipelines {
		names = append(names, p.Name)
	}
	if want := []string{"nexmark", "nexmark-q0", "nexmark-q5", "nexmark-q7", "nexmark-q8", "nexmark-q11", "nexmark-winning-bids"}; !slices.Equal(names, want) {
		t.Errorf("deployed pipelines %v, want %v: a shipped contract whose services all have code is deployed", names, want)
	}
	// The pipeline with an outbox gets its dispatcher, and nothing else does.
	if len(s.Dispatchers) != 1 || s.Dispatchers[0].Pipeline != "nexmark-winning-bids" {
		t.Errorf("dispatchers %+v, want one, of nexmark-winning-bids (the only contract with sink.effect outbox)", s.Dispatchers)
	}
}

// TestANewQueryIsItsCodeAndItsContract: a pipeline whose service has code
// gets its compose service, StatefulSet, coordinator, image target and
// place in the contracts ConfigMap from the generator alone.
func TestANewQueryIsItsCodeAndItsContract(t *testing.T) {
	root := t.TempDir()
	src := repoRoot(t)
	if err := os.MkdirAll(filepath.Join(root, "contracts"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nexmark-dedup.yaml", "nexmark-q7.yaml"} {
		b, err := os.ReadFile(filepath.Join(src, "contracts", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "contracts", name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if name == "nexmark-q7.yaml" {
			q9 := strings.NewReplacer("pipeline: nexmark-q7", "pipeline: nexmark-q9", "service: nexmark-q7", "service: nexmark-q9").Replace(string(b))
			if err := os.WriteFile(filepath.Join(root, "contracts", "nexmark-q9.yaml"), []byte(q9), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, svc := range []string{"dedup", "nexmark-q7", "nexmark-q9"} {
		if err := os.MkdirAll(filepath.Join(root, "services", svc, "cmd", svc), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, files := generate(t, root)
	for file, want := range map[string][]string{
		"compose.yaml":                 {"\n  nexmark-q9:\n", "WEIR_CONTRACT: /contracts/nexmark-q9.yaml", "\n  coordinator-nexmark-q9:\n", "nexmark-q9-data:"},
		"deploy/Dockerfile":            {"FROM weir-base AS nexmark-q9\n", `ENTRYPOINT ["/usr/local/bin/nexmark-q9"]`},
		"deploy/k8s/nexmark-q9.yaml":   {"kind: StatefulSet", "name: nexmark-q9", "value: /contracts/nexmark-q9.yaml"},
		"deploy/k8s/coordinators.yaml": {"name: coordinator-nexmark-q9"},
		"deploy/k8s/contracts.yaml":    {"  nexmark-q9.yaml: |"},
	} {
		for _, w := range want {
			if !strings.Contains(string(files[file]), w) {
				t.Errorf("%s lacks %q", file, w)
			}
		}
	}
}

// generate loads the stack under root and the files the generator makes of
// it.
func generate(t *testing.T, root string) (deploy.Stack, map[string][]byte) {
	t.Helper()
	s, err := deploy.Load(root)
	if err != nil {
		t.Fatal(err)
	}
	files, err := s.Files()
	if err != nil {
		t.Fatal(err)
	}
	return s, files
}
