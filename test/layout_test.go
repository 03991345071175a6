package test

import (
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/weirflow/weir/"

// TestForbiddenImports holds the shape of the house: pkg/ and internal/
// never import services, the outbox, the dispatcher or the CLI; shipped
// code never imports the CLI's helpers or the harness; services never import
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
	case platform(from) && (top(target) == "services" || top(target) == "outbox" || top(target) == "dispatcher" || top(target) == "cmd"):
		return "pkg/ (the API) and internal/ (the platform behind it) never depend on what runs on them"
	case tooling(target) && !tooling(from) && top(from) != "cmd" && top(from) != "test" && !strings.HasSuffix(from, "_test.go"):
		return "the CLI's helpers and the development harness are the weir command's: what ships as the platform or a service never depends on them"
	case service(from) != "" && service(target) != "" && service(from) != service(target):
		return "services never import each other; they share contracts/ and the wire"
	case target == "test" || strings.HasPrefix(target, "test/"):
		return "nothing imports the end-to-end tests"
	case top(from) == "contracts" && top(target) != "contracts" && target != "internal/capacity":
		return "contracts/ is shared by everyone and depends on nothing of weir's (but internal/capacity, the arithmetic its linter shares with weir capacity)"
	case strings.HasPrefix(from, "internal/capacity/") && target != "internal/capacity":
		return "internal/capacity is arithmetic contracts/ imports: it depends on nothing of weir's"
	case target == "pkg/stream" && !strings.HasSuffix(from, "_test.go") && controlPlane(from):
		return "the control plane (coordinator, status, checkpoints) speaks the protocol in internal/checkpoint and internal/status, never through the runtime"
	case target == "pkg/stream" && operatorLibrary(from):
		return "operators are written against pkg/operator and tested with operatortest; the runtime hosts them, they never see it"
	}
	return ""
}

// tooling lists the packages under internal/ that serve the weir command
// and its development harness rather than the platform.
func tooling(p string) bool {
	for _, dir := range []string{"internal/harness", "internal/catalog", "internal/bench", "internal/cli", "internal/results"} {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			return true
		}
	}
	return false
}

// platform reports whether a file or package is the platform: the API in
// pkg/ or what it is built of in internal/ (the tooling aside).
func platform(p string) bool {
	top := strings.SplitN(p, "/", 2)[0]
	return top == "pkg" || (top == "internal" && !tooling(p))
}

// controlPlane reports whether a file belongs to the control plane, which
// must not depend on the operator runtime.
func controlPlane(file string) bool {
	for _, dir := range []string{"services/coordinator/", "internal/status/", "internal/checkpoint/", "internal/restore/"} {
		if strings.HasPrefix(file, dir) {
			return true
		}
	}
	return false
}

// operatorLibrary reports whether a file belongs to the operator API or an
// operator library, which must not depend on the runtime.
func operatorLibrary(file string) bool {
	for _, dir := range []string{"pkg/operator/", "pkg/window/", "pkg/join/"} {
		if strings.HasPrefix(file, dir) {
			return true
		}
	}
	return false
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
		// The provider simulator stands for an external system: it stamps
		// the effects it performs with its own clock, as a provider would.
		if strings.Contains(filepath.ToSlash(path), "/services/provider/") {
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

// TestNoBuildOutputsTracked refuses build outputs in git: a tracked file
// over 2 MB, or any tracked executable that is not a script, is almost
// always a binary someone committed by accident. .githooks/pre-commit runs
// the same check before a commit (git config core.hooksPath .githooks).
func TestNoBuildOutputsTracked(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..")
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): nothing to check", err)
	}
	files := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	if len(files) < 20 {
		t.Fatalf("git ls-files listed %d files; the check would prove nothing", len(files))
	}
	for _, f := range files {
		fi, err := os.Stat(filepath.Join(root, f))
		if err != nil {
			continue // deleted in the work tree
		}
		if fi.Size() > 2<<20 {
			t.Errorf("%s is tracked and %d MB: build outputs belong in .gitignore, not git", f, fi.Size()>>20)
		}
		if fi.Mode()&0o111 != 0 {
			head := make([]byte, 4)
			if fh, err := os.Open(filepath.Join(root, f)); err == nil {
				_, _ = io.ReadFull(fh, head)
				fh.Close()
			}
			if string(head[:2]) != "#!" {
				t.Errorf("%s is tracked and executable but not a script: a build output?", f)
			}
		}
	}
}
