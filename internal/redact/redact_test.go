package redact_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/redact"
)

var secret = []byte("a redaction key of 32 bytes, ok!")

func policy(t *testing.T, keys string, fields ...contracts.Sensitive) *redact.Policy {
	t.Helper()
	p, err := redact.For(sensitive(keys, fields...), secret)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func sensitive(keys string, fields ...contracts.Sensitive) *contracts.Contract {
	return &contracts.Contract{
		File:     "sensitive.yaml",
		Identity: contracts.Identity{Key: contracts.Field{From: contracts.FromJSON, Field: "key"}},
		Security: contracts.Security{Keys: keys, Sensitive: fields},
	}
}

// TestPayloadRedaction: nested and listed sensitive values are hashed or
// removed, the key field with the keys; a payload that is not a JSON
// object is withheld; texts lose every value found, a short one only
// where quoted; a contract redacting nothing changes nothing.
func TestPayloadRedaction(t *testing.T) {
	p := policy(t, contracts.RedactOmit,
		contracts.Sensitive{Field: "card.number", Redact: contracts.RedactOmit},
		contracts.Sensitive{Field: "emails", Redact: contracts.RedactHash})
	in := []byte(`{"id":"e1","key":"k7","card":{"number":"4111-1111","cvc":"123"},"emails":["a@example.com","b@example.com"],"n":12345678901234567890}`)
	out, secrets := p.Payload(in, []byte("k7"))
	s := string(out)
	for _, gone := range []string{"4111-1111", "a@example.com", "b@example.com", `"key"`} {
		if strings.Contains(s, gone) {
			t.Errorf("the payload still holds %s: %s", gone, s)
		}
	}
	for _, kept := range []string{`"id":"e1"`, `"cvc":"123"`, redact.HashPrefix, "12345678901234567890"} {
		if !strings.Contains(s, kept) {
			t.Errorf("the payload lost %s: %s", kept, s)
		}
	}
	text := p.Text(`key "k7": card 4111-1111 for a@example.com; k7x stays`, secrets)
	if strings.Contains(text, "4111-1111") || strings.Contains(text, "a@example.com") || strings.Contains(text, `"k7"`) || !strings.Contains(text, "k7x stays") {
		t.Errorf("scrubbed text: %s", text)
	}
	if out, _ := p.Payload([]byte(`{"id":"e1","card":{"number":"4111-1111"`), nil); string(out) != redact.Withheld {
		t.Errorf("a payload cut short: %s", out)
	}
	if out, _ := p.Payload([]byte(`["4111-1111"]`), nil); string(out) != redact.Withheld {
		t.Errorf("a payload that is not an object: %s", out)
	}
	if p, err := redact.For(&contracts.Contract{}, nil); p != nil || err != nil {
		t.Error("a contract without a security section redacts")
	}
	var none *redact.Policy
	if out, secrets := none.Payload(in, []byte("k7")); string(out) != string(in) || secrets != nil || none.Text("k7", []string{"k7"}) != "k7" {
		t.Error("the nil policy changed something")
	}
}

// TestNamesOfSecretsAreHashed: an ID or tenant that is one of a record's
// secrets goes out hashed, stably; any other as it is.
func TestNamesOfSecretsAreHashed(t *testing.T) {
	p := policy(t, contracts.RedactHash, contracts.Sensitive{Field: "tenant", Redact: contracts.RedactOmit})
	_, secrets := p.Payload([]byte(`{"id":"e1","key":"k7","tenant":"acme"}`), []byte("k7"))
	if got := p.Name("acme", secrets); got != p.Hash([]byte("acme")) || !strings.HasPrefix(got, redact.HashPrefix) {
		t.Errorf("a sensitive tenant went out as %q", got)
	}
	if got := p.Name("e1", secrets); got != "e1" {
		t.Errorf("an ID not declared sensitive went out as %q", got)
	}
	var none *redact.Policy
	if none.Name("acme", []string{"acme"}) != "acme" {
		t.Error("the nil policy hashed a name")
	}
}

// TestHashesAreKeyed: a hashed value is an HMAC under the redaction key,
// 128 bits of it — the same value hashes alike under one key and
// differently under another, and not as its bare SHA-256, which a
// dictionary of card numbers would find. A contract that hashes without
// a key is refused; one that only omits needs none, and then names a
// secret as "[redacted]".
func TestHashesAreKeyed(t *testing.T) {
	fields := contracts.Sensitive{Field: "email", Redact: contracts.RedactHash}
	a := policy(t, "", fields)
	b, err := redact.For(sensitive("", fields), []byte("another redaction key, 32 bytes!"))
	if err != nil {
		t.Fatal(err)
	}
	in := []byte(`{"email":"a@example.com"}`)
	outA, _ := a.Payload(in, nil)
	outA2, _ := a.Payload(in, nil)
	outB, _ := b.Payload(in, nil)
	bare := sha256.Sum256([]byte("a@example.com"))
	if string(outA) != string(outA2) || string(outA) == string(outB) || strings.Contains(string(outA), hex.EncodeToString(bare[:8])) {
		t.Errorf("hashes under two keys: %s, %s, %s", outA, outA2, outB)
	}
	if h := a.Hash([]byte("a@example.com")); len(strings.TrimPrefix(h, redact.HashPrefix)) < 32 {
		t.Errorf("a hash of fewer than 128 bits: %s", h)
	}
	for _, c := range []*contracts.Contract{sensitive("", fields), sensitive(contracts.RedactHash)} {
		if p, err := redact.For(c, nil); !errors.Is(err, redact.ErrNoKey) || p != nil {
			t.Errorf("a contract hashing %+v without a key: %v", c.Security, err)
		}
	}
	if _, err := redact.For(sensitive("", fields), []byte("short")); err == nil {
		t.Error("a key of 5 bytes was taken")
	}
	omit, err := redact.For(sensitive(contracts.RedactOmit, contracts.Sensitive{Field: "card", Redact: contracts.RedactOmit}), nil)
	if err != nil {
		t.Fatalf("a contract that only omits needs no key: %v", err)
	}
	if got := omit.Name("k7", []string{"k7"}); got != "[redacted]" {
		t.Errorf("a secret name without a key went out as %q", got)
	}
}

// TestPathsReachWhatOperatorsDecode: a path matches field names as
// encoding/json decodes them, whatever their case, and descends into
// arrays — of objects at any step, and of arrays — so that nothing an
// operator decodes as the field leaves.
func TestPathsReachWhatOperatorsDecode(t *testing.T) {
	p := policy(t, "",
		contracts.Sensitive{Field: "card.number", Redact: contracts.RedactOmit},
		contracts.Sensitive{Field: "items.card", Redact: contracts.RedactHash},
		contracts.Sensitive{Field: "email", Redact: contracts.RedactHash})
	in := `{"Card":[{"number":"4111-0001","brand":"visa"},{"NUMBER":"4111-0002"},[{"Number":"4111-0003"}]],` +
		`"items":[{"card":"4111-0004","sku":"s1"},{"CARD":{"n":"4111-0005"}},[{"Card":"4111-0006"}]],` +
		`"EMAIL":"a@example.com","eMail":"b@example.com"}`
	out, secrets := p.Payload([]byte(in), nil)
	for _, gone := range []string{"4111-0001", "4111-0002", "4111-0003", "4111-0004", "4111-0005", "4111-0006", "a@example.com", "b@example.com"} {
		if strings.Contains(string(out), gone) {
			t.Errorf("the payload still holds %s: %s", gone, out)
		}
		if !slices.Contains(secrets, gone) {
			t.Errorf("%s is not among the secrets Text scrubs: %v", gone, secrets)
		}
	}
	for _, kept := range []string{`"brand":"visa"`, `"sku":"s1"`} {
		if !strings.Contains(string(out), kept) {
			t.Errorf("the payload lost %s: %s", kept, out)
		}
	}
	// What an operator decodes is what was redacted.
	var op struct {
		Card  []json.RawMessage
		Email string
	}
	if err := json.Unmarshal(out, &op); err != nil || !strings.HasPrefix(op.Email, redact.HashPrefix) {
		t.Errorf("an operator decodes email as %q (%v) from %s", op.Email, err, out)
	}
}

// TestKeyFile: WriteKey writes a key readable by its owner alone and
// keeps a file that exists; LoadKey refuses what is not base64 or too
// short to be a key.
func TestKeyFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "redaction.key")
	if made, err := redact.WriteKey(file); !made || err != nil {
		t.Fatalf("WriteKey: %v, %v", made, err)
	}
	k, err := redact.LoadKey(file)
	if err != nil || len(k) != 32 {
		t.Fatalf("LoadKey: %d bytes, %v", len(k), err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the key file: %v, %v", fi, err)
	}
	if made, err := redact.WriteKey(file); made || err != nil {
		t.Errorf("WriteKey over a key: %v, %v", made, err)
	}
	if again, _ := redact.LoadKey(file); !bytes.Equal(again, k) {
		t.Error("WriteKey replaced a key")
	}
	for _, text := range []string{"not base64!", "c2hvcnQ="} {
		bad := filepath.Join(t.TempDir(), "bad.key")
		if err := os.WriteFile(bad, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := redact.LoadKey(bad); err == nil {
			t.Errorf("LoadKey took %q", text)
		}
	}
}
