package contracts

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// ErrInvalid matches every *Invalid with errors.Is.
var ErrInvalid = errors.New("contracts: invalid contract")

// Problem is one thing wrong with a contract: where, which field, why it is
// wrong and how to fix it.
type Problem struct {
	File  string
	Line  int    // 0 when the contract was not read from a file
	Field string // dotted path, e.g. state.families[0].ttl
	Why   string
	Fix   string
}

// String formats the problem as
// "contracts/x.yaml:42: state.families[0].ttl: <why>; fix: <fix>".
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.File == "" {
		b.WriteString("contract")
	}
	if p.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(p.Line))
	}
	b.WriteString(": ")
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Why)
	if p.Fix != "" {
		b.WriteString("; fix: ")
		b.WriteString(p.Fix)
	}
	return b.String()
}

// Invalid is the error for a contract with problems. errors.Is(err,
// ErrInvalid) holds for it.
type Invalid struct {
	Problems []Problem
}

// Error lists the problems, one per line.
func (e *Invalid) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Is reports whether target is ErrInvalid.
func (e *Invalid) Is(target error) bool { return target == ErrInvalid }

// Load reads the contract file at path, parses and lints it. A contract with
// any problem is refused with an *Invalid listing them all.
func Load(path string) (*Contract, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("contracts: %w", err)
	}
	c, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	if ps := c.Lint(); len(ps) > 0 {
		return nil, &Invalid{Problems: ps}
	}
	return c, nil
}

// LintFiles loads each file and writes one line per problem to w, in the
// Problem.String format. It returns the number of problems; err reports
// files that could not be read at all.
func LintFiles(w io.Writer, paths ...string) (problems int, err error) {
	var errs []error
	for _, path := range paths {
		_, lerr := Load(path)
		var inv *Invalid
		switch {
		case lerr == nil:
		case errors.As(lerr, &inv):
			for _, p := range inv.Problems {
				if _, werr := fmt.Fprintln(w, p.String()); werr != nil {
					return problems, fmt.Errorf("contracts: write problems: %w", werr)
				}
				problems++
			}
		default:
			errs = append(errs, lerr)
		}
	}
	return problems, errors.Join(errs...)
}

// Parse decodes a contract from data; file names it in problems. YAML
// syntax errors, values of the wrong type and unknown or repeated fields are
// refused with an *Invalid naming file, line and field. Parse then gives
// every field the file leaves out its default (Defaults). Parse does not
// lint: a missing field without a default, or a contradiction, is Lint's
// to report.
func Parse(file string, data []byte) (*Contract, error) {
	d := &decoder{file: file, index: map[string]position{}}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		d.add(1, "", "the file is empty", "write the contract: see contracts/README.md")
	case err != nil:
		d.syntax(err)
	default:
		var extra yaml.Node
		if err := dec.Decode(&extra); err == nil {
			d.add(extra.Line, "", "the file holds more than one YAML document",
				"keep one contract per file and remove the second document (after ---)")
		} else if !errors.Is(err, io.EOF) {
			d.syntax(err)
		}
	}
	c := &Contract{File: file}
	if len(d.problems) == 0 {
		root := &doc
		if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
			root = root.Content[0]
		}
		d.value(root, reflect.ValueOf(c).Elem(), "")
	}
	if len(d.problems) > 0 {
		sortProblems(d.problems)
		return nil, &Invalid{Problems: d.problems}
	}
	if c.Time.OnFuture == OnFutureReject {
		c.Time.OnFuture = OnFutureDeadLetter
	}
	c.index = d.index
	d.applyDefaults(c)
	return c, nil
}

func sortProblems(ps []Problem) {
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Line < ps[j].Line })
}

// decoder walks a yaml.Node tree into a Contract, recording where every
// field is and refusing what does not fit.
type decoder struct {
	file     string
	index    map[string]position
	problems []Problem
	// defaulting is set while a default is decoded: the fields it sets
	// are recorded as defaulted, with no line.
	defaulting bool
}

func (d *decoder) add(line int, field, why, fix string) {
	d.problems = append(d.problems, Problem{File: d.file, Line: line, Field: field, Why: why, Fix: fix})
}

// syntax reports a yaml.v3 syntax error. yaml.v3 carries the line only in
// the message ("yaml: line 3: did not find expected key").
func (d *decoder) syntax(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, tail, ok := strings.Cut(rest, ": "); ok {
			if n, aerr := strconv.Atoi(num); aerr == nil {
				line, msg = n, tail
			}
		}
	}
	d.add(line, "", "YAML syntax error: "+msg, "correct the YAML at this line (indentation, quoting, a missing colon)")
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "nothing"
}

func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if dp, ok := v.Addr().Interface().(*Duration); ok {
		if err := dp.UnmarshalYAML(n); err != nil {
			why := strings.TrimPrefix(err.Error(), ErrDuration.Error()+": ")
			if n.Kind == yaml.ScalarNode {
				why = fmt.Sprintf("%q is not a duration (%s)", n.Value, why)
			}
			d.add(n.Line, path, why, "write a non-negative duration with a unit, like 500ms, 10s, 5m, 24h or 7d")
		}
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.mapping(n, v, path)
	case reflect.Slice:
		d.sequence(n, v, path)
	case reflect.String, reflect.Int, reflect.Bool:
		d.scalar(n, v, path)
	default:
		panic(fmt.Sprintf("contracts: cannot decode %s at %s", v.Type(), path))
	}
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	fields := map[string]int{}
	var names []string
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		fields[name] = i
		names = append(names, name)
	}
	where := path
	if where == "" {
		where = "the contract"
	}
	if n.Kind != yaml.MappingNode {
		d.add(n.Line, path, fmt.Sprintf("want a mapping with fields %s, got %s", strings.Join(names, ", "), kindName(n)),
			"write "+where+" as `name: value` lines indented under it")
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		name := k.Value
		p := join(path, name)
		if first, dup := seen[name]; dup {
			d.add(k.Line, p, fmt.Sprintf("field %q repeats the one at line %d", name, first),
				"keep one of the two and delete the other")
			continue
		}
		seen[name] = k.Line
		idx, known := fields[name]
		if m, ok := moved[p]; !known && ok {
			d.add(k.Line, p, fmt.Sprintf("unknown field %q: %s", name, m.why), m.fix)
			continue
		}
		if !known {
			fix := "remove it; " + where + " has fields " + strings.Join(names, ", ")
			if s := closest(name, names); s != "" {
				fix = fmt.Sprintf("did you mean %q? %s", s, fix)
			}
			d.add(k.Line, p, fmt.Sprintf("unknown field %q", name), fix)
			continue
		}
		d.index[p] = position{line: k.Line, null: isNull(val), defaulted: d.defaulting}
		if !isNull(val) {
			d.value(val, v.Field(idx), p)
		}
	}
}

// moved lists fields of earlier contracts that now live elsewhere; they are
// refused like any unknown field, but the fix says where they went.
var moved = map[string]struct{ why, fix string }{
	"state.keying": {
		why: "keying is no longer pipeline-wide; each operator states the identity field that keys its own state",
		fix: "keying moved to operators[].keying: remove state.keying, set `keying: id` or `keying: key` on every operator " +
			"(id on an operator that deduplicates), and list the families each operator keeps in operators[].state",
	},
}

func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.add(n.Line, path, "want a list, got "+kindName(n), "write each item on its own line starting with `- `")
		return
	}
	v.Set(reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content)))
	for i, item := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		d.index[p] = position{line: item.Line, defaulted: d.defaulting}
		d.value(item, v.Index(i), p)
	}
}

func (d *decoder) scalar(n *yaml.Node, v reflect.Value, path string) {
	want := map[reflect.Kind]string{reflect.String: "a string", reflect.Int: "an integer", reflect.Bool: "true or false"}[v.Kind()]
	if n.Kind != yaml.ScalarNode {
		d.add(n.Line, path, fmt.Sprintf("want %s, got %s", want, kindName(n)), "write a single value after the colon")
		return
	}
	if v.Kind() == reflect.String {
		v.SetString(n.Value)
		return
	}
	if err := n.Decode(v.Addr().Interface()); err != nil {
		d.add(n.Line, path, fmt.Sprintf("want %s, got %q", want, n.Value), "write "+want)
	}
}

// closest returns the name nearest to s by edit distance, if it is near
// enough to be a typo.
func closest(s string, names []string) string {
	best, bestD := "", len(s)/3+2
	for _, n := range names {
		if dist := editDistance(s, n); dist < bestD {
			best, bestD = n, dist
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
