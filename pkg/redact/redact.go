// Package redact keeps what a contract declares sensitive (its security
// section) out of what leaves the pipeline beside its results: dead
// letters and side outputs, log lines, trace attributes and metric labels.
//
// A payload's sensitive fields are hashed or omitted in the copy a dead
// letter carries; a payload whose fields cannot be found — it is not a JSON
// object, the reason it was filed — is withheld whole, since nothing says
// where in it a sensitive value would be. Texts that may quote a value (a
// reason, an error) are scrubbed of the sensitive values and the key the
// record carries. The source coordinate always stays: someone allowed to
// read the source finds the original there.
package redact

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"
	"strconv"
	"strings"

	"github.com/weirflow/weir/contracts"
)

// Policy is a contract's redactions. The zero Policy, and a nil one,
// redact nothing.
type Policy struct {
	fields map[string]string // dotted path → hash or omit
	keys   string            // hash, omit, or "" for clear
}

// For is the policy of c's security section; nil when it redacts nothing.
func For(c *contracts.Contract) *Policy {
	sec := c.Security
	p := &Policy{fields: map[string]string{}}
	for _, f := range sec.Sensitive {
		p.fields[f.Field] = f.Redact
	}
	if sec.Keys == contracts.RedactHash || sec.Keys == contracts.RedactOmit {
		p.keys = sec.Keys
		// The payload carries the key too, where it is read from.
		if k := c.Identity.Key; k.From == contracts.FromJSON {
			if _, ok := p.fields[k.Field]; !ok {
				p.fields[k.Field] = sec.Keys
			}
		}
	}
	if len(p.fields) == 0 && p.keys == "" {
		return nil
	}
	return p
}

// Withheld is what a dead letter carries in place of a payload whose
// sensitive fields could not be found.
const Withheld = "payload withheld: it is not a JSON object, so the fields the contract declares sensitive (security.sensitive) cannot be found in it; the source coordinate names the original"

// Hash is how a hashed value appears: a digest of its bytes, which tells
// equal values apart without showing them.
func Hash(v []byte) string {
	sum := sha256.Sum256(v)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// Payload returns the copy of a record's payload that may leave the
// pipeline, and the sensitive values found in it with the key, for Text
// to scrub. It returns the payload itself when nothing is redacted.
func (p *Policy) Payload(payload, key []byte) ([]byte, []string) {
	if p == nil {
		return payload, nil
	}
	var secrets []string
	if p.keys != "" && len(key) > 0 {
		secrets = append(secrets, string(key))
	}
	if len(p.fields) == 0 {
		return payload, secrets
	}
	var doc map[string]any
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	if err := d.Decode(&doc); err != nil || doc == nil {
		return []byte(Withheld), secrets
	}
	paths := make([]string, 0, len(p.fields))
	for path := range p.fields {
		paths = append(paths, path)
	}
	sort.Strings(paths)
	for _, path := range paths {
		if v, ok := take(doc, strings.Split(path, "."), p.fields[path]); ok {
			secrets = append(secrets, v...)
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return []byte(Withheld), secrets
	}
	return out, secrets
}

// take redacts the value at path in doc as action says, and returns the
// strings it held — a value's text, and each of a list's or an object's
// texts within — for Text to scrub.
func take(doc map[string]any, path []string, action string) ([]string, bool) {
	v, ok := doc[path[0]]
	if !ok {
		return nil, false
	}
	if len(path) > 1 {
		inner, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		return take(inner, path[1:], action)
	}
	held := texts(v)
	if action == contracts.RedactOmit {
		delete(doc, path[0])
	} else {
		b, _ := json.Marshal(v)
		if s, ok := v.(string); ok {
			b = []byte(s)
		}
		doc[path[0]] = Hash(b)
	}
	return held, true
}

// texts are the strings a JSON value shows: its own for a string or a
// number, every one within for a list or an object.
func texts(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case json.Number:
		return []string{v.String()}
	case []any:
		var out []string
		for _, e := range v {
			out = append(out, texts(e)...)
		}
		return out
	case map[string]any:
		var out []string
		for _, e := range v {
			out = append(out, texts(e)...)
		}
		return out
	}
	return nil
}

// Name returns a name a record goes by outside the pipeline — its ID, its
// tenant — hashed when it is one of secrets (its field is declared
// sensitive, or it is the key), and as it is otherwise.
func (p *Policy) Name(v string, secrets []string) string {
	if p == nil || v == "" {
		return v
	}
	for _, sec := range secrets {
		if v == sec {
			return Hash([]byte(v))
		}
	}
	return v
}

// Text returns s with every one of secrets in it replaced by
// "[redacted]", longest first, so that a value holding another goes
// whole. A value shorter than four bytes is replaced only where quoted
// ("7"): bare, it would blank ordinary words and numbers out.
func (p *Policy) Text(s string, secrets []string) string {
	if p == nil || len(secrets) == 0 {
		return s
	}
	sorted := append([]string(nil), secrets...)
	sort.Slice(sorted, func(i, j int) bool { return len(sorted[i]) > len(sorted[j]) })
	for _, v := range sorted {
		switch {
		case v == "":
		case len(v) < 4:
			s = strings.ReplaceAll(s, strconv.Quote(v), `"[redacted]"`)
		default:
			s = strings.ReplaceAll(s, v, "[redacted]")
		}
	}
	return s
}
