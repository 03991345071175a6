package window

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// Panes and window bounds are read with jsontext, encoding/json/v2's syntax
// layer, member by member: no reflection, and a decoder reused from a pool.

// lenient lets through what encoding/json lets through: bytes that are not
// UTF-8 inside strings (replaced by U+FFFD where read) and names given twice
// inside values weir carries without reading them, such as a pane's value.
// readObject refuses a name given twice among the members it reads: which
// of the two would count is a guess. Strings are kept as written.
var lenient = []jsontext.Options{jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(true), jsontext.PreserveRawStrings(true)}

var decoders = sync.Pool{New: func() any { return jsontext.NewDecoder(nothing) }}

// nothing is what a pooled decoder holds between uses: it is never read.
var nothing = bytes.NewReader(nil)

// decode runs read over one JSON value in b, with nothing after it.
func decode(b []byte, read func(*jsontext.Decoder) error) error {
	dec := decoders.Get().(*jsontext.Decoder)
	defer func() {
		dec.Reset(nothing)
		decoders.Put(dec)
	}()
	dec.Reset(bytes.NewBuffer(b), lenient...) // a Buffer is parsed in place, not copied
	if err := read(dec); err != nil {
		return err
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// readObject reads an object whose member names are among names, calling
// member with each one's index and the decoder before its value: member
// must read that value. A name not among names, or given twice, is an
// error.
func readObject(dec *jsontext.Decoder, what string, names []string, member func(i int) error) error {
	tok, err := dec.ReadToken()
	if err != nil {
		return err
	}
	if tok.Kind() != '{' {
		return fmt.Errorf("%s: want an object, got %v", what, tok.Kind())
	}
	var seen uint64
	for dec.PeekKind() != '}' {
		name, err := readBytes(dec)
		if err != nil {
			return err
		}
		i := slices.Index(names, string(name))
		switch {
		case i < 0:
			return fmt.Errorf("unknown field %q in %s", name, what)
		case seen&(1<<i) != 0:
			return fmt.Errorf("field %q given twice in %s", name, what)
		}
		seen |= 1 << i
		if err := member(i); err != nil {
			return fmt.Errorf("%s.%s: %w", what, names[i], err)
		}
	}
	_, err = dec.ReadToken() // the closing brace
	return err
}

// readBytes reads a string, unquoted, bytes that are not UTF-8 replaced by
// U+FFFD as encoding/json does. Without escapes it is the decoder's own
// bytes, which last until its next read.
func readBytes(dec *jsontext.Decoder) ([]byte, error) {
	v, err := dec.ReadValue()
	if err != nil {
		return nil, err
	}
	if v.Kind() != '"' {
		return nil, fmt.Errorf("want a string, got %v", v.Kind())
	}
	if bytes.IndexByte(v, '\\') < 0 {
		s := v[1 : len(v)-1]
		if !utf8.Valid(s) {
			s = bytes.ToValidUTF8(s, []byte("\uFFFD"))
		}
		return s, nil
	}
	// The decoder checked the escapes: an error here is bytes that are not
	// UTF-8, which AppendUnquote has replaced.
	s, _ := jsontext.AppendUnquote(nil, v)
	return s, nil
}

func readString(dec *jsontext.Decoder) (string, error) {
	b, err := readBytes(dec)
	return string(b), err
}

func readUint(dec *jsontext.Decoder) (uint64, error) {
	v, err := dec.ReadValue()
	if err != nil {
		return 0, err
	}
	if v.Kind() != '0' {
		return 0, fmt.Errorf("want a number, got %v", v.Kind())
	}
	n, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s is not an unsigned integer", v)
	}
	return n, nil
}

func readBool(dec *jsontext.Decoder) (bool, error) {
	tok, err := dec.ReadToken()
	if err != nil {
		return false, err
	}
	switch tok.Kind() {
	case 't':
		return true, nil
	case 'f':
		return false, nil
	}
	return false, fmt.Errorf("want a boolean, got %v", tok.Kind())
}

// readText reads a string into t's UnmarshalText.
func readText(dec *jsontext.Decoder, t encoding.TextUnmarshaler) error {
	b, err := readBytes(dec)
	if err != nil {
		return err
	}
	return t.UnmarshalText(b)
}
