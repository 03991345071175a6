package access

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/weirflow/weir/internal/strictjson"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A pipeline's ingest gateway admits producers by bearer token. weir auth
// makes each producer a random 256-bit token, which only that producer
// holds (<pipeline>-gateway-<name>.token, readable by its owner only), and
// writes for the gateway the file it checks them against
// (<pipeline>-gateway.tokens): per producer its name, the SHA-256 of its
// token and the tenants it may write — the tokens themselves never. A
// token already written is kept, so running weir auth again changes no
// producer's token; deleting a producer's .token file and running it
// again rotates that one, and leaving a producer out of -producers
// revokes it.

// Producer is a producer of a pipeline's ingest gateway.
type Producer struct {
	Name string `json:"name"`
	// Tenants are the tenants whose events it may write; none: every
	// tenant (and a contract without tenants).
	Tenants []string `json:"tenants,omitempty"`
}

// May reports whether p may write an event of tenant.
func (p Producer) May(tenant string) bool {
	return len(p.Tenants) == 0 || slices.Contains(p.Tenants, tenant)
}

// ErrProducers reports a -producers list that cannot be read.
var ErrProducers = errors.New("access: producers")

// ParseProducers reads a list of producers as weir auth's -producers
// flag gives it: name[:tenant|tenant…],… — a producer without tenants
// may write every tenant.
func ParseProducers(s string) ([]Producer, error) {
	var out []Producer
	for _, item := range strings.Split(s, ",") {
		name, tenants, scoped := strings.Cut(strings.TrimSpace(item), ":")
		if !validName(name) {
			return nil, fmt.Errorf("%w: %q: a producer's name is letters, digits, '-' and '_' (it names a file)", ErrProducers, item)
		}
		p := Producer{Name: name}
		if scoped {
			for _, t := range strings.Split(tenants, "|") {
				if t == "" || strings.TrimSpace(t) != t {
					return nil, fmt.Errorf("%w: %q: an empty tenant, or one with spaces around it", ErrProducers, item)
				}
				if !slices.Contains(p.Tenants, t) {
					p.Tenants = append(p.Tenants, t)
				}
			}
		}
		if slices.ContainsFunc(out, func(o Producer) bool { return o.Name == name }) {
			return nil, fmt.Errorf("%w: producer %s is named twice", ErrProducers, name)
		}
		out = append(out, p)
	}
	return out, nil
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Tokens is what a pipeline's ingest gateway checks bearer tokens against:
// its producers, each with the SHA-256 of its token.
type Tokens struct {
	Pipeline  string          `json:"pipeline"`
	Producers []TokenProducer `json:"producers"`
}

// TokenProducer is a producer with the SHA-256 of its token, in hex.
type TokenProducer struct {
	Producer
	SHA256 string `json:"sha256"`
}

// TokenFile is where WriteTokens puts a producer's token.
func TokenFile(dir, pipeline, producer string) string {
	return filepath.Join(dir, pipeline+"-gateway-"+producer+".token")
}

// TokensFile is where WriteTokens puts the gateway's file of tokens.
func TokensFile(dir, pipeline string) string {
	return filepath.Join(dir, pipeline+"-gateway.tokens")
}

// WriteTokens writes, in f.Dir, each producer's bearer token for the
// ingest gateway of pipeline (TokenFile, mode 0600, kept when there), and
// the gateway's file of their hashes and tenants (TokensFile; readable by
// every user with f.Readable, as the seeds are), and returns its name.
func WriteTokens(f Files, pipeline string, producers []Producer) (string, error) {
	if err := os.MkdirAll(f.Dir, 0o755); err != nil {
		return "", err
	}
	t := Tokens{Pipeline: pipeline}
	for _, p := range producers {
		token, err := token(TokenFile(f.Dir, pipeline, p.Name))
		if err != nil {
			return "", err
		}
		t.Producers = append(t.Producers, TokenProducer{Producer: p, SHA256: hash(token)})
	}
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return "", err
	}
	file := TokensFile(f.Dir, pipeline)
	if err := os.WriteFile(file, append(b, '\n'), f.mode()); err != nil {
		return "", err
	}
	return file, os.Chmod(file, f.mode())
}

// token reads the token in file, or makes one and writes it there; the
// file is its owner's only.
func token(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err == nil {
		t := string(bytes.TrimSpace(b))
		if len(t) < 32 {
			return "", fmt.Errorf("access: %s holds no token: delete it and a new one is made", file)
		}
		return t, os.Chmod(file, 0o600)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	t := base64.RawURLEncoding.EncodeToString(raw)
	return t, os.WriteFile(file, []byte(t+"\n"), 0o600)
}

func hash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// ErrTokens reports a gateway's tokens file that cannot be used.
var ErrTokens = errors.New("access: tokens")

// ReadTokens reads the gateway's tokens file of pipeline, as WriteTokens
// wrote it; a file of another pipeline's gateway is refused.
func ReadTokens(file, pipeline string) (*Tokens, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var t Tokens
	if err := strictjson.Decode(b, &t); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrTokens, file, err)
	}
	if t.Pipeline != pipeline {
		return nil, fmt.Errorf("%w: %s is the gateway's of pipeline %q, not %q", ErrTokens, file, t.Pipeline, pipeline)
	}
	if len(t.Producers) == 0 {
		return nil, fmt.Errorf("%w: %s names no producer: run weir auth with -producers", ErrTokens, file)
	}
	for _, p := range t.Producers {
		if raw, err := hex.DecodeString(p.SHA256); err != nil || len(raw) != sha256.Size {
			return nil, fmt.Errorf("%w: %s: producer %s: sha256 is not a SHA-256 in hex", ErrTokens, file, p.Name)
		}
	}
	return &t, nil
}

// Producer returns the producer whose token token is, comparing its hash
// with every producer's in constant time.
func (t *Tokens) Producer(token string) (Producer, bool) {
	sum := sha256.Sum256([]byte(token))
	found := -1
	for i, p := range t.Producers {
		want, err := hex.DecodeString(p.SHA256)
		if err != nil {
			continue // ReadTokens refuses such a file; a token never matches it
		}
		if subtle.ConstantTimeCompare(sum[:], want) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Producer{}, false
	}
	return t.Producers[found].Producer, true
}

// Tenanted reports whether any producer is limited to some tenants.
func (t *Tokens) Tenanted() bool {
	return slices.ContainsFunc(t.Producers, func(p TokenProducer) bool { return len(p.Tenants) > 0 })
}
