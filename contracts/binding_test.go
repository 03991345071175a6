package contracts

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/weirflow/weir"

// declarations are the fields no runtime code reads because every value
// Lint accepts is what the runtime does anyway: a format version, a
// one-value choice, a decision cross-checked against the fields the
// runtime does read, or a value this weir implements only in part
// (Implemented). Each comes with an edit of testdata/lint-base.yaml that
// Lint must refuse at that field: the declaration is enforced at lint and,
// because stream.New lints, at start.
var declarations = []struct {
	field, why string
	edits      []string
}{
	{"version", "the file format; Load reads only this version", []string{"version", "2"}},
	{"ingress.offsets", "one value, stream-sequence: how internal/edge resumes", []string{"ingress.offsets", "earliest"}},
	{"time.trust", "must agree with time.domain (T6, T7), which the runtime reads", []string{"time.trust", "broker"}},
	{"emission.mode", "must agree with emission.accumulation (E2, E4), which pkg/window applies, and with sink.accepts", []string{"emission.accumulation", "retracting", "emission.mode", "upsert", "sink.accepts", "retract"}},
	{"sink.accepts", "must be able to apply emission.mode (E1, E3, E5)", []string{"sink.accepts", "upsert"}},
	{"state.families.role", "one role, dedup, whose family must be TTL-bounded over the replay horizon", []string{"state.families[0].role", "cache"}},
	{"identity.schema.older.written_until", "when producers stopped writing a schema: Lint checks it is RFC 3339 and holds the schema's `dropped`, which the decoder reads, to it plus ingress.retention (I3, lint_test.go: \"schema decoder dropped before its replay horizon\", TestLintSchemaHorizon)",
		[]string{"identity.schema", `{version: {from: header, header: S}, current: "2", older: [{version: "1", id: {from: json, field: i}, key: {from: json, field: k}, event_time: {from: json, field: t, format: unix-ms}, written_until: "soon", dropped: true}]}`}},
}

// TestDeclarationsAreRefusedWhenTheyPromiseMore checks that Lint refuses
// each declaration's edit at the declared field.
func TestDeclarationsAreRefusedWhenTheyPromiseMore(t *testing.T) {
	base := readBase(t)
	for _, d := range declarations {
		c, err := Parse("edited.yaml", edit(t, base, d.edits...))
		if err != nil {
			t.Fatalf("%s: %v", d.field, err)
		}
		var at []string
		for _, p := range c.Lint() {
			at = append(at, p.Field)
		}
		if !slices.ContainsFunc(at, func(f string) bool { return fieldPath(f) == d.field }) {
			t.Errorf("%s (%s): edits %v: Lint reported %v, want a problem at %s", d.field, d.why, d.edits, at, d.field)
		}
	}
}

// fieldPath drops list indexes: state.families[0].role → state.families.role.
func fieldPath(f string) string {
	var b strings.Builder
	skip := false
	for _, r := range f {
		switch {
		case r == '[':
			skip = true
		case r == ']':
			skip = false
		case !skip:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestEveryFieldHasAReader walks the contract's schema — every field of
// Contract and of the types it holds — and fails for a field that no
// non-test code outside contracts/ reads and that is not a declaration Lint
// enforces (declarations): a field the linter accepts and the runtime then
// ignores is a promise nobody keeps. A field is read where a weir package
// selects it (c.Sink.Effect), type-checked, not matched by name; a section
// is read when one of its fields is.
func TestEveryFieldHasAReader(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the module")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}\t{{.Dir}}\t{{join .GoFiles \" \"}}\t{{.Module}}", "./...")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	exports := map[string]string{}
	type pkg struct {
		path, dir string
		files     []string
	}
	var own []pkg
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) < 5 {
			continue
		}
		exports[f[0]] = f[1]
		if strings.HasPrefix(f[0], module) && f[0] != module+"/contracts" {
			own = append(own, pkg{path: f[0], dir: f[2], files: strings.Fields(f[3])})
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})
	cpkg, err := imp.Import(module + "/contracts")
	if err != nil {
		t.Fatal(err)
	}
	// Every field of the schema, by its object, with its dotted YAML path.
	fields := map[*types.Var]string{}
	var walk func(prefix string, typ types.Type)
	walk = func(prefix string, typ types.Type) {
		if s, ok := typ.(*types.Slice); ok {
			typ = s.Elem()
		}
		named, ok := typ.(*types.Named)
		if !ok || named.Obj().Pkg() != cpkg {
			return
		}
		st, ok := named.Underlying().(*types.Struct)
		if !ok {
			return
		}
		for i := range st.NumFields() {
			f := st.Field(i)
			tag := reflectTag(st.Tag(i))
			if !f.Exported() || tag == "-" || tag == "" {
				continue
			}
			path := prefix + tag
			if _, seen := fields[f]; seen {
				continue
			}
			fields[f] = path
			walk(path+".", f.Type())
		}
	}
	walk("", cpkg.Scope().Lookup("Contract").Type())
	if len(fields) < 40 {
		t.Fatalf("found %d fields in the schema; the walk is broken", len(fields))
	}

	read := map[*types.Var]bool{}
	conf := types.Config{Importer: imp, Error: func(error) {}}
	for _, p := range own {
		var files []*ast.File
		for _, name := range p.files {
			f, err := parser.ParseFile(fset, filepath.Join(p.dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}}
		if _, err := conf.Check(p.path, fset, files, info); err != nil {
			t.Fatalf("type-check %s: %v", p.path, err)
		}
		for _, s := range info.Selections {
			if v, ok := s.Obj().(*types.Var); ok {
				read[v] = true
			}
		}
	}
	covered := map[string]bool{}
	for _, d := range declarations {
		covered[d.field] = true
	}
	for f, path := range fields {
		if read[f] {
			covered[path] = true
		}
	}
	var unread []string
	for _, path := range fields {
		if covered[path] {
			continue
		}
		section := false
		for p := range covered {
			section = section || strings.HasPrefix(p, path+".")
		}
		if !section {
			unread = append(unread, path)
		}
	}
	sort.Strings(unread)
	for _, path := range unread {
		t.Errorf("contract field %s has no reader outside contracts/: honour it in the runtime or refuse it at lint", path)
	}
}

// reflectTag returns the name in a field's yaml tag, without options.
func reflectTag(tag string) string {
	const key = `yaml:"`
	i := strings.Index(tag, key)
	if i < 0 {
		return ""
	}
	v := tag[i+len(key):]
	v = v[:strings.IndexByte(v, '"')]
	name, _, _ := strings.Cut(v, ",")
	return name
}
