package test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/weirflow/weir/"

// TestForbiddenImports holds the shape of the house: pkg/ never imports
// services, the outbox, the dispatcher or the CLI; services never import
// each other; nothing outside tests imports the test package.
func TestForbiddenImports(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..")
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !strings.HasPrefix(p, module) {
				continue
			}
			target := strings.TrimPrefix(p, module)
			if why := forbidden(rel, target); why != "" {
				t.Errorf("%s imports %s: %s", rel, p, why)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 20 {
		t.Fatalf("checked only %d files; is the walk rooted at the module?", checked)
	}
}

func forbidden(from, target string) string {
	top := func(p string) string { return strings.SplitN(p, "/", 2)[0] }
	service := func(p string) string {
		parts := strings.SplitN(p, "/", 3)
		if len(parts) < 2 || parts[0] != "services" {
			return ""
		}
		return parts[1]
	}
	switch {
	case top(from) == "pkg" && (top(target) == "services" || top(target) == "outbox" || top(target) == "dispatcher" || top(target) == "cmd"):
		return "pkg/ is the platform; it never depends on what runs on it"
	case service(from) != "" && service(target) != "" && service(from) != service(target):
		return "services never import each other; they share contracts/ and the wire"
	case target == "test" || strings.HasPrefix(target, "test/"):
		return "nothing imports the end-to-end tests"
	case top(from) == "contracts" && top(target) != "contracts":
		return "contracts/ is shared by everyone and depends on nothing of weir's"
	}
	return ""
}

// TestOperatorsDoNotReadTheClock keeps wall-clock reads and sleeps out of
// operator code: the runtime injects the clock.
func TestOperatorsDoNotReadTheClock(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "services")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		// Wiring (main packages and Run functions) may hand time.Now to the
		// runtime; operator files may not call it.
		if strings.Contains(filepath.ToSlash(path), "/cmd/") || filepath.Base(path) == "run.go" {
			return nil
		}
		// The coordinator is control plane, not an operator: leases and
		// checkpoint timings are wall-clock business.
		if strings.Contains(filepath.ToSlash(path), "/services/coordinator/") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, banned := range []string{"time.Now()", "time.Sleep("} {
			if strings.Contains(string(b), banned) {
				t.Errorf("%s calls %s: operators use the injected clock", path, banned)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
