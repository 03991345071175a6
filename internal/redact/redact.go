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
//
// A hash is keyed: HMAC-SHA256 under the deployment's redaction key
// (`weir auth` writes it; the services take -redaction-key), cut to 128
// bits, so that a dictionary of card numbers or e-mail addresses, hashed
// without the key, finds none of them. A contract that hashes anything
// does not start without the key (ErrNoKey).
//
// A sensitive field's path is matched as the operators' decoder
// (encoding/json) matches field names, without regard to case — what an
// operator reads as card is redacted whether the payload spells it card or
// Card — and it descends into arrays: card.number is redacted in every
// element of an array at card, and so is an array of arrays.
package redact

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/weirflow/weir/contracts"
)

// ErrNoKey: the contract hashes a sensitive field or the keys, and no
// redaction key was given.
var ErrNoKey = errors.New("redact: the contract hashes sensitive values and no redaction key was given (-redaction-key, WEIR_REDACTION_KEY; weir auth writes redaction.key)")

// Policy is a contract's redactions. The zero Policy, and a nil one,
// redact nothing.
type Policy struct {
	fields map[string]string // dotted path → hash or omit
	keys   string            // hash, omit, or "" for clear
	secret []byte            // the redaction key hashes are keyed with
}

// For is the policy of c's security section under the redaction key
// secret; nil when it redacts nothing. A policy that hashes a value and
// has no key, or one too short to be a key, is refused: a hash without
// one falls to a dictionary, and a hash the deployment keys differently
// would not match its others.
func For(c *contracts.Contract, secret []byte) (*Policy, error) {
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
		return nil, nil
	}
	hashes := p.keys == contracts.RedactHash
	for _, action := range p.fields {
		hashes = hashes || action == contracts.RedactHash
	}
	switch {
	case hashes && len(secret) == 0:
		return nil, fmt.Errorf("%w: contract %s declares security.sensitive or security.keys with redact: hash", ErrNoKey, c.File)
	case len(secret) > 0 && len(secret) < MinKeyBytes:
		return nil, fmt.Errorf("redact: the redaction key has %d bytes, fewer than %d", len(secret), MinKeyBytes)
	}
	p.secret = secret
	return p, nil
}

// Withheld is what a dead letter carries in place of a payload whose
// sensitive fields could not be found.
const Withheld = "payload withheld: it is not a JSON object, so the fields the contract declares sensitive (security.sensitive) cannot be found in it; the source coordinate names the original"

// HashPrefix starts every hashed value.
const HashPrefix = "hmac-sha256:"

// Hash is how a hashed value appears: its HMAC-SHA256 under the
// redaction key, 128 bits of it, which tells equal values apart without
// showing them, and names no value to whoever lacks the key. Without a
// key (a policy that only omits) a value is not hashed but replaced.
func (p *Policy) Hash(v []byte) string {
	if p == nil || len(p.secret) == 0 {
		return "[redacted]"
	}
	m := hmac.New(sha256.New, p.secret)
	m.Write(v)
	return HashPrefix + hex.EncodeToString(m.Sum(nil)[:16])
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
		secrets = append(secrets, p.take(doc, strings.Split(path, "."), p.fields[path])...)
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return []byte(Withheld), secrets
	}
	return out, secrets
}

// take redacts the values at path in v as action says, and returns the
// strings they held — a value's text, and each of a list's or an
// object's texts within — for Text to scrub. A field of the path matches
// every name encoding/json would decode into it (strings.EqualFold, as
// its case-insensitive match does), and the path goes on into each
// element of an array it meets.
func (p *Policy) take(v any, path []string, action string) []string {
	var held []string
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			held = append(held, p.take(e, path, action)...)
		}
	case map[string]any:
		for name, inner := range v {
			if !strings.EqualFold(name, path[0]) {
				continue
			}
			if len(path) > 1 {
				held = append(held, p.take(inner, path[1:], action)...)
				continue
			}
			held = append(held, texts(inner)...)
			if action == contracts.RedactOmit {
				delete(v, name)
				continue
			}
			b, _ := json.Marshal(inner)
			if s, ok := inner.(string); ok {
				b = []byte(s)
			}
			v[name] = p.Hash(b)
		}
	}
	return held
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
			return p.Hash([]byte(v))
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

// MinKeyBytes is the shortest redaction key taken; WriteKey makes 32 bytes.
const MinKeyBytes = 16

// LoadKey reads a redaction key file: the key in standard base64 on one
// line, as WriteKey writes it.
func LoadKey(file string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("redact: key: %w", err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("redact: key in %s is not base64: %w", file, err)
	}
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("redact: key in %s has %d bytes, fewer than %d", file, len(key), MinKeyBytes)
	}
	return key, nil
}

// WriteKey writes a new random key to file, readable by its owner only,
// and reports whether it did: a file that exists is kept as it is, since
// a new key would hash every value anew and equal values no longer match
// the ones hashed before.
func WriteKey(file string) (bool, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return false, fmt.Errorf("redact: key: %w", err)
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, os.ErrExist) {
		_, err := LoadKey(file)
		return false, err
	}
	if err != nil {
		return false, fmt.Errorf("redact: key: %w", err)
	}
	_, err = f.WriteString(base64.StdEncoding.EncodeToString(key) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// A key cut short is no key: the next run writes one whole.
		return false, errors.Join(fmt.Errorf("redact: key: %w", err), os.Remove(file))
	}
	return true, nil
}
