package access_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/weirflow/weir/access"
)

func TestParseProducers(t *testing.T) {
	got, err := access.ParseProducers("shop, acme-shop:acme,multi:acme|globex|acme")
	if err != nil {
		t.Fatal(err)
	}
	want := []access.Producer{{Name: "shop"}, {Name: "acme-shop", Tenants: []string{"acme"}}, {Name: "multi", Tenants: []string{"acme", "globex"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "a,a", "../x", "a:", "a:acme||b", "a b"} {
		if _, err := access.ParseProducers(bad); !errors.Is(err, access.ErrProducers) {
			t.Errorf("%q: err = %v", bad, err)
		}
	}
}

// TestTokens: each producer's token is its owner's only and kept when
// written again; the gateway's file holds hashes, never a token, and
// admits each token as its producer only.
func TestTokens(t *testing.T) {
	dir := t.TempDir()
	producers := []access.Producer{{Name: "shop"}, {Name: "acme-shop", Tenants: []string{"acme"}}}
	file, err := access.WriteTokens(access.Files{Dir: dir}, "nexmark", producers)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{}
	for _, p := range producers {
		tf := access.TokenFile(dir, "nexmark", p.Name)
		st, err := os.Stat(tf)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", tf, st.Mode().Perm())
		}
		b, err := os.ReadFile(tf)
		if err != nil {
			t.Fatal(err)
		}
		tok := strings.TrimSpace(string(b))
		if len(tok) != 43 { // 256 bits, base64url
			t.Errorf("token of %s is %d characters", p.Name, len(tok))
		}
		if strings.Contains(string(raw), tok) {
			t.Errorf("the gateway's file holds %s's token", p.Name)
		}
		tokens[p.Name] = tok
	}
	if _, err := access.WriteTokens(access.Files{Dir: dir}, "nexmark", producers); err != nil {
		t.Fatal(err)
	}
	again, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(raw) {
		t.Errorf("writing again changed the tokens:\n%s\n%s", raw, again)
	}
	if _, err := access.ReadTokens(file, "other"); !errors.Is(err, access.ErrTokens) {
		t.Errorf("another pipeline's gateway read the file: %v", err)
	}
	ts, err := access.ReadTokens(file, "nexmark")
	if err != nil {
		t.Fatal(err)
	}
	if !ts.Tenanted() {
		t.Error("acme-shop is limited to acme, yet Tenanted is false")
	}
	for name, tok := range tokens {
		p, ok := ts.Producer(tok)
		if !ok || p.Name != name {
			t.Errorf("%s's token admits %+v, %v", name, p, ok)
		}
	}
	for _, bad := range []string{"", tokens["shop"] + "x", tokens["shop"][1:], strings.ToUpper(tokens["shop"])} {
		if p, ok := ts.Producer(bad); ok {
			t.Errorf("%q admitted as %s", bad, p.Name)
		}
	}
	if p, _ := ts.Producer(tokens["acme-shop"]); !p.May("acme") || p.May("globex") {
		t.Errorf("acme-shop may write %v", p.Tenants)
	}
	if p, _ := ts.Producer(tokens["shop"]); !p.May("globex") {
		t.Error("shop, with no tenants named, may not write globex")
	}
	if err := os.WriteFile(filepath.Join(dir, "empty.tokens"), []byte(`{"pipeline":"nexmark","producers":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := access.ReadTokens(filepath.Join(dir, "empty.tokens"), "nexmark"); !errors.Is(err, access.ErrTokens) {
		t.Errorf("a file of no producers: %v", err)
	}
}
