// Command generate writes the deployment files of the stack from the
// contracts and deploy/templates: compose.yaml, deploy/Dockerfile and the
// Kubernetes manifests of the services, their coordinators and the
// contracts ConfigMap (package deploy says which). Run it from anywhere in
// the repository after adding a service or changing a contract:
//
//	go run ./deploy/cmd/generate
package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/weirflow/weir/deploy"
)

func main() {
	root, err := moduleRoot()
	if err == nil {
		err = run(root)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(1)
	}
}

func run(root string) error {
	s, err := deploy.Load(root)
	if err != nil {
		return err
	}
	files, err := s.Files()
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := os.WriteFile(filepath.Join(root, name), files[name], 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", name)
	}
	return nil
}

// moduleRoot is the directory of the go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory: run it inside the weir repository")
		}
		dir = parent
	}
}
