package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/weirflow/weir/contracts"
)

// TestComposeFile checks compose.yaml without Docker: every weir image has
// a Dockerfile target that build-images.sh builds, every host port can be
// moved by a WEIR_*_PORT variable (the compose test moves them all), every
// contract a service reads is shipped, and every pipeline whose operators
// run has exactly one coordinator, whose status port TestCompose checks.
func TestComposeFile(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
			Healthcheck struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	if len(file.Services) == 0 {
		t.Fatal("compose.yaml: no services")
	}

	dockerfile, err := os.ReadFile(filepath.Join(root, "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var stages []string
	for _, m := range regexp.MustCompile(`(?m)^FROM \S+ AS (\S+)`).FindAllStringSubmatch(string(dockerfile), -1) {
		stages = append(stages, m[1])
	}
	// build-images.sh builds every stage but the bases the others build on.
	var targets []string
	for _, s := range stages {
		if !strings.HasPrefix(s, "weir-") {
			targets = append(targets, s)
		}
	}

	weirImage := regexp.MustCompile(`^\$\{WEIR_IMAGE_PREFIX:-weir\}/([a-z0-9-]+):\$\{WEIR_IMAGE_TAG:-dev\}$`)
	ownImage := regexp.MustCompile(`^\$\{WEIR_[A-Z]+_IMAGE:-weir/([a-z0-9-]+):dev\}$`)
	// Published on the host's loopback only: nothing the stack serves
	// over HTTP authenticates its callers.
	port := regexp.MustCompile(`^127\.0\.0\.1:\$\{(WEIR_[A-Z0-9_]+_PORT):-([0-9]+)\}:[0-9]+$`)
	defaults := map[string]string{}
	pages := statusPages(t)
	coordinators := map[string]string{} // contract → service
	operatorContracts := map[string]string{}
	for name, s := range file.Services {
		var target string
		if m := weirImage.FindStringSubmatch(s.Image); m != nil {
			target = m[1]
		} else if m := ownImage.FindStringSubmatch(s.Image); m != nil {
			target = m[1]
		} else {
			t.Errorf("service %s: image %q is not ${WEIR_IMAGE_PREFIX:-weir}/<target>:${WEIR_IMAGE_TAG:-dev} or ${WEIR_<X>_IMAGE:-weir/<target>:dev}", name, s.Image)
		}
		if target != "" && !slices.Contains(targets, target) {
			t.Errorf("service %s: build-images.sh builds no image %s", name, target)
		}
		for _, p := range s.Ports {
			m := port.FindStringSubmatch(p)
			if m == nil {
				t.Errorf("service %s: port %q is not 127.0.0.1:${WEIR_<NAME>_PORT:-<default>}:<port>", name, p)
				continue
			}
			if other, dup := defaults[m[2]]; dup {
				t.Errorf("service %s: host port %s is also %s's default", name, m[2], other)
			}
			defaults[m[2]] = m[1]
		}
		contract := s.Environment["WEIR_CONTRACT"]
		if contract != "" {
			rel, ok := strings.CutPrefix(contract, "/contracts/")
			if _, err := os.Stat(filepath.Join(root, "contracts", rel)); !ok || err != nil {
				t.Errorf("service %s: WEIR_CONTRACT=%s is not a shipped contract (contracts/*.yaml)", name, contract)
			}
		}
		if len(s.Healthcheck.Test) == 0 && target != "jaeger" && target != "nats" && !strings.HasPrefix(name, "provision-") {
			t.Errorf("service %s: no health check", name)
		}
		switch {
		case target == "coordinator" && !strings.HasPrefix(name, "provision-"):
			if other, dup := coordinators[contract]; dup {
				t.Errorf("services %s and %s both coordinate %s", name, other, contract)
			}
			coordinators[contract] = name
			if s.Environment["WEIR_STATUS_ADDR"] != ":8080" || s.Environment["WEIR_INSTANCE"] == "" {
				t.Errorf("service %s: want WEIR_STATUS_ADDR=:8080 and a WEIR_INSTANCE", name)
			}
			if len(s.Ports) != 1 {
				t.Errorf("service %s: want its status port published", name)
				continue
			}
			v := port.FindStringSubmatch(s.Ports[0])
			c, err := contracts.Load(filepath.Join(root, "contracts", strings.TrimPrefix(contract, "/contracts/")))
			if v == nil || err != nil {
				continue
			}
			if pages[v[1]] != c.Pipeline {
				t.Errorf("service %s: the stack's status page %s is %q, want the pipeline %q", name, v[1], pages[v[1]], c.Pipeline)
			}
		case slices.Contains(s.Healthcheck.Test, "operators"):
			operatorContracts[contract] = name
		}
	}
	if defaults["8080"] != "WEIR_NEXMARK_STATUS_PORT" {
		t.Errorf("the status page of the dedup pipeline is not on ${WEIR_NEXMARK_STATUS_PORT:-8080}")
	}
	for contract, service := range operatorContracts {
		if coordinators[contract] == "" {
			t.Errorf("service %s runs operators of %s, which no coordinator coordinates", service, contract)
		}
	}
	if len(pages) != len(coordinators) {
		t.Errorf("TestCompose checks %d status pages, compose.yaml has %d coordinators", len(pages), len(coordinators))
	}
}
