package redact_test

import (
	"strings"
	"testing"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/redact"
)

func policy(keys string, fields ...contracts.Sensitive) *redact.Policy {
	c := &contracts.Contract{
		Identity: contracts.Identity{Key: contracts.Field{From: contracts.FromJSON, Field: "key"}},
		Security: contracts.Security{Keys: keys, Sensitive: fields},
	}
	return redact.For(c)
}

// TestPayloadRedaction: nested and listed sensitive values are hashed or
// removed, the key field with the keys; a payload that is not a JSON
// object is withheld; texts lose every value found, a short one only
// where quoted; a contract redacting nothing changes nothing.
func TestPayloadRedaction(t *testing.T) {
	p := policy(contracts.RedactOmit,
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
	for _, kept := range []string{`"id":"e1"`, `"cvc":"123"`, "sha256:", "12345678901234567890"} {
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
	if redact.For(&contracts.Contract{}) != nil {
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
	p := policy(contracts.RedactHash, contracts.Sensitive{Field: "tenant", Redact: contracts.RedactOmit})
	_, secrets := p.Payload([]byte(`{"id":"e1","key":"k7","tenant":"acme"}`), []byte("k7"))
	if got := p.Name("acme", secrets); got != redact.Hash([]byte("acme")) {
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
