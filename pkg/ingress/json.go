package ingress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// fields is one ingress payload read for its envelope: the raw JSON value
// of every path the contract reads from it. It is read in one pass over the
// object, without decoding the fields nobody asked for.
type fields []field

// field is one path's raw value.
type field struct {
	path string
	raw  json.RawMessage
}

// get returns the raw value at path. A payload's fields are the few its
// contract reads: a list is cheaper to fill and search than a map.
func (fs fields) get(path string) (json.RawMessage, bool) {
	for _, f := range fs {
		if f.path == path {
			return f.raw, true
		}
	}
	return nil, false
}

// pathTree is the set of dotted paths a decoder reads, as a tree of keys.
type pathTree struct {
	paths    int    // at the root: how many paths it holds
	key      string // the last key of the path to here
	path     string // the full dotted path, where one ends
	children map[string]*pathTree
}

func newPathTree(paths ...string) *pathTree {
	root := &pathTree{children: map[string]*pathTree{}}
	for _, p := range paths {
		if p == "" {
			continue
		}
		n := root
		root.paths++
		for _, part := range strings.Split(p, ".") {
			c := n.children[part]
			if c == nil {
				c = &pathTree{key: part, children: map[string]*pathTree{}}
				n.children[part] = c
			}
			n = c
		}
		n.path = p
	}
	return root
}

// DuplicateError is a payload holding one key twice on the way to a field
// the contract reads. JSON parsers disagree about which of the two wins, so
// weir refuses to pick one: a producer and a consumer could see different
// identities in the same bytes.
type DuplicateError struct {
	Path string // dotted path of the repeated key
}

func (e *DuplicateError) Error() string { return fmt.Sprintf("key %q appears twice", e.Path) }

// readFields parses data as one JSON object, with nothing after it, and
// returns the raw values at the tree's paths. A *DuplicateError names a key
// on one of those paths that the object repeats.
//
// It reads with jsontext, encoding/json/v2's syntax layer, which skips the
// values nobody asked for without decoding them: the payload is otherwise
// parsed once more by the operator, and this was a quarter of a pass-through
// operator's CPU with encoding/json's tokenizer. Duplicate names and invalid
// UTF-8 are let through here: the decoder refuses them with reasons of its
// own (DuplicateError on the envelope's paths, checkText for the text).
func readFields(data []byte, t *pathTree) (fields, error) {
	p := decoders.Get().(*pooledDecoder)
	defer func() {
		p.buf = bytes.Buffer{}
		p.dec.Reset(&p.buf, decodeOpts...)
		decoders.Put(p)
	}()
	p.buf = *bytes.NewBuffer(data)
	p.dec.Reset(&p.buf, decodeOpts...) // a Buffer is parsed in place, not copied
	dec := p.dec
	out := make(fields, 0, t.paths)
	if err := readObject(dec, t, "", &out); err != nil {
		return nil, err
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON object")
	}
	return out, nil
}

// decodeOpts are readFields' options: what it lets through, the decoder
// checks itself.
var decodeOpts = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

// pooledDecoder is a decoder with the buffer it reads, reused call after
// call (decoders).
type pooledDecoder struct {
	dec *jsontext.Decoder
	buf bytes.Buffer
}

var decoders = sync.Pool{New: func() any {
	p := &pooledDecoder{}
	p.dec = jsontext.NewDecoder(&p.buf, decodeOpts...)
	return p
}}

// readObject reads one object from dec, keeping the values on t's paths.
// It allocates only what it keeps: names are looked up as the bytes the
// decoder holds (unquoted only when they hold an escape), and a name
// seen twice is told among the tree's few children, not in a set of all.
func readObject(dec *jsontext.Decoder, t *pathTree, prefix string, out *fields) error {
	tok, err := dec.ReadToken()
	if err != nil {
		return err
	}
	if tok.Kind() != '{' {
		return fmt.Errorf("starts with %v", tok)
	}
	var seenBuf [8]*pathTree
	seen := seenBuf[:0]
	for dec.PeekKind() != '}' {
		name, err := dec.ReadValue()
		if err != nil {
			return err
		}
		c := t.child(name)
		if c == nil {
			if err := dec.SkipValue(); err != nil {
				return err
			}
			continue
		}
		v, err := dec.ReadValue()
		if err != nil {
			return err
		}
		raw := json.RawMessage(bytes.Clone(v)) // v lasts until the next read
		if slices.Contains(seen, c) {
			return &DuplicateError{Path: prefix + c.key}
		}
		seen = append(seen, c)
		if c.path != "" {
			*out = append(*out, field{c.path, raw})
		}
		if len(c.children) > 0 && len(raw) > 0 && raw[0] == '{' {
			sub := jsontext.NewDecoder(bytes.NewBuffer(raw), decodeOpts...)
			if err := readObject(sub, c, prefix+c.key+".", out); err != nil {
				return err
			}
		}
	}
	_, err = dec.ReadToken() // the closing brace
	return err
}

// child returns the child of t that the quoted object name names, if any.
// A name is compared as the decoder reads it with decodeOpts: invalid
// UTF-8 and unpaired surrogate escapes become U+FFFD, and the name is not
// refused for them here — checkText refuses the payload later, once the
// identity (and tenant) that its dead letter carries has been read.
func (t *pathTree) child(name jsontext.Value) *pathTree {
	if len(name) >= 2 && bytes.IndexByte(name, '\\') < 0 && utf8.Valid(name) {
		// No escape: the name is the bytes between its quotes, and the
		// map lookup of their conversion allocates nothing.
		return t.children[string(name[1:len(name)-1])]
	}
	b, _ := jsontext.AppendUnquote(nil, name) // replaces what is invalid, as the decoder does
	return t.children[string(b)]
}

// checkText reports why b is not JSON text that every parser reads the same
// way: JSON must be UTF-8 (RFC 8259 §8.1), and a \u escape of half a UTF-16
// surrogate pair without its other half has no character to stand for
// (§8.2). Go's parser turns both into U+FFFD, so two distinct IDs would
// decode to one; weir refuses them instead. b is syntactically valid JSON,
// so every backslash in it begins an escape.
func checkText(b []byte) error {
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '\\' && i+1 < len(b) && b[i+1] == 'u':
			r, ok := hex4(b[i+2:])
			if !ok {
				return fmt.Errorf("bad \\u escape at byte %d", i)
			}
			switch {
			case !utf16.IsSurrogate(r):
			case r < 0xdc00: // a high half must be followed by a low half
				if i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
					if lo, ok := hex4(b[i+8:]); ok && lo >= 0xdc00 && lo <= 0xdfff {
						i += 12
						continue
					}
				}
				return fmt.Errorf("unpaired UTF-16 surrogate escape %s at byte %d", b[i:i+6], i)
			default:
				return fmt.Errorf("unpaired UTF-16 surrogate escape %s at byte %d", b[i:i+6], i)
			}
			i += 6
		case c == '\\':
			i += 2
		case c < utf8.RuneSelf:
			i++
		default:
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				return fmt.Errorf("invalid UTF-8 at byte %d", i)
			}
			i += n
		}
	}
	return nil
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 16)
	return rune(n), err == nil
}

// jsonKind names the kind of a raw JSON value.
func jsonKind(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}
