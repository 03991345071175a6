package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoStore: the healthcheck is copied into every image, the
// broker's included; it reads registrations and contracts, and links
// neither Pebble nor the sealing library the checkpoint store brings.
func TestLinksNoStore(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/cockroachdb/pebble") || strings.HasPrefix(p, "github.com/minio/sio") {
			t.Errorf("the healthcheck links %s", p)
		}
	}
}
