package window

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

// Panes and window bounds are read with jsontext, encoding/json/v2's syntax
// layer, member by member: no reflection, and a decoder reused from a pool.

// lenient lets through what encoding/json lets through: bytes that are not
// UTF-8 inside strings (replaced by U+FFFD) and, in values weir carries but
// does not read, names given twice.
var lenient = []jsontext.Options{jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(true)}

// strict refuses a name given twice: which of the two would count is a
// guess.
var strict = []jsontext.Options{jsontext.AllowInvalidUTF8(true)}

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
	dec.Reset(bytes.NewBuffer(b), strict...) // a Buffer is parsed in place, not copied
	if err := read(dec); err != nil {
		return err
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// readObject reads an object, calling member for each name with the
// decoder before the name's value: member must read that value. The name
// lasts until the decoder's next read.
func readObject(dec *jsontext.Decoder, member func(name []byte) error) error {
	tok, err := dec.ReadToken()
	if err != nil {
		return err
	}
	if tok.Kind() != '{' {
		return fmt.Errorf("want an object, got %v", tok.Kind())
	}
	for dec.PeekKind() != '}' {
		name, err := readBytes(dec)
		if err != nil {
			return err
		}
		if err := member(name); err != nil {
			return err
		}
	}
	_, err = dec.ReadToken() // the closing brace
	return err
}

// readBytes reads a string, unquoted. Without escapes it is the decoder's
// own bytes, which last until its next read.
func readBytes(dec *jsontext.Decoder) ([]byte, error) {
	v, err := dec.ReadValue()
	if err != nil {
		return nil, err
	}
	if v.Kind() != '"' {
		return nil, fmt.Errorf("want a string, got %v", v.Kind())
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return v[1 : len(v)-1], nil
	}
	return jsontext.AppendUnquote(nil, v)
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
