package provider_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/weirflow/weir/services/provider"
)

// TestProviderHonoursIdempotencyKeys: an effect is performed once per key,
// a repeat is answered with the same effect and marked replayed, and a
// request without a key is refused.
func TestProviderHonoursIdempotencyKeys(t *testing.T) {
	p := provider.New()
	hs := httptest.NewServer(p)
	defer hs.Close()
	post := func(key, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+"/charges", strings.NewReader(body))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := post("k1", `{"amount":1}`); r.StatusCode != http.StatusCreated {
		t.Fatalf("first: %s", r.Status)
	}
	if r := post("k1", `{"amount":1}`); r.StatusCode != http.StatusOK || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("repeat: %s, replayed %q", r.Status, r.Header.Get("Idempotent-Replayed"))
	}
	if r := post("", `{"amount":1}`); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("no key: %s", r.Status)
	}
	if es := p.Effects(); len(es) != 1 || es[0].Key != "k1" || es[0].Kind != "charges" {
		t.Fatalf("effects: %+v", es)
	}
}
