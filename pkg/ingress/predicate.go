package ingress

import (
	"encoding/json"
	"strings"
)

// Predicate matches payloads whose value at a dotted JSON path is one of a
// set: a string, or a number or boolean as JSON writes it. It reads the
// path as the decoder reads the envelope (one pass, the other fields left
// undecoded), and a payload that repeats a key on the path, which parsers
// read differently, matches nothing. overload.shed marks optional records
// with one.
type Predicate struct {
	path   string
	tree   *pathTree
	values map[string]bool
	list   []string // the values as declared, for String
}

// NewPredicate returns the predicate "the value at path is one of values".
func NewPredicate(path string, values []string) *Predicate {
	p := &Predicate{path: path, tree: newPathTree(path), values: map[string]bool{}, list: values}
	for _, v := range values {
		p.values[v] = true
	}
	return p
}

// String says what the predicate matches.
func (p *Predicate) String() string {
	return p.path + " in [" + strings.Join(p.list, ", ") + "]"
}

// Match reports whether data is a JSON object whose value at the path is
// one of the predicate's values.
func (p *Predicate) Match(data []byte) bool {
	doc, err := readFields(data, p.tree)
	if err != nil {
		return false
	}
	raw, ok := doc.get(p.path)
	if !ok || len(raw) == 0 {
		return false
	}
	if raw[0] == '"' {
		var s string
		return json.Unmarshal(raw, &s) == nil && p.values[s]
	}
	return p.values[string(raw)]
}
