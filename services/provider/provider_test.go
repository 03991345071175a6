package provider_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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

// post sends an effect request to the provider at url; key "" sends none.
func post(t *testing.T, url, key, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/charges", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
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

// listed is what GET /effects answers.
func listed(t *testing.T, url string) []provider.Effect {
	t.Helper()
	resp, err := http.Get(url + "/effects")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var es []provider.Effect
	if err := json.NewDecoder(resp.Body).Decode(&es); err != nil {
		t.Fatal(err)
	}
	return es
}

// TestProviderJournalSurvivesARestart: a provider opened on the journal a
// previous one left — never closed, as after kill -9 — lists the effects
// that one performed and replays their keys with 200, performing nothing
// again; new keys are performed and numbered after them.
func TestProviderJournalSurvivesARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "provider.journal")
	first, err := provider.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	hs := httptest.NewServer(first)
	for _, k := range []string{"k1", "k2"} {
		if r := post(t, hs.URL, k, `{"amount":1}`); r.StatusCode != http.StatusCreated {
			t.Fatalf("%s: %s", k, r.Status)
		}
	}
	hs.Close() // the provider itself is left open, as a killed process leaves it

	again, err := provider.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	hs = httptest.NewServer(again)
	defer hs.Close()
	if es := listed(t, hs.URL); len(es) != 2 || es[0].Key != "k1" || es[1].Key != "k2" || es[1].Seq != 2 {
		t.Fatalf("effects after the restart: %+v", es)
	}
	if r := post(t, hs.URL, "k2", `{"amount":1}`); r.StatusCode != http.StatusOK || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("k2 after the restart: %s, replayed %q", r.Status, r.Header.Get("Idempotent-Replayed"))
	}
	if r := post(t, hs.URL, "k3", `{"amount":1}`); r.StatusCode != http.StatusCreated {
		t.Fatalf("k3: %s", r.Status)
	}
	if es := listed(t, hs.URL); len(es) != 3 || es[2].Key != "k3" || es[2].Seq != 3 {
		t.Fatalf("effects: %+v", es)
	}
}

// TestProviderJournalTornLine: a provider killed in the middle of writing a
// line leaves it without its newline. The next one ignores it — that
// effect was never answered — and cuts it off before appending, so the
// journal stays whole lines; a whole line that is no effect is an error.
func TestProviderJournalTornLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "provider.journal")
	p, err := provider.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p)
	post(t, hs.URL, "k1", `{"amount":1}`)
	hs.Close()
	p.Close()
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	torn := `{"seq":2,"key":"k2","kind":"charges","payl`
	if err := os.WriteFile(path, append(whole, torn...), 0o644); err != nil {
		t.Fatal(err)
	}

	p, err = provider.Open(path)
	if err != nil {
		t.Fatalf("open with a torn last line: %v", err)
	}
	if es := p.Effects(); len(es) != 1 || es[0].Key != "k1" {
		t.Fatalf("effects: %+v", es)
	}
	if b, _ := os.ReadFile(path); string(b) != string(whole) {
		t.Fatalf("the torn line was not cut off:\n%s", b)
	}
	hs = httptest.NewServer(p)
	if r := post(t, hs.URL, "k2", `{"amount":2}`); r.StatusCode != http.StatusCreated {
		t.Fatalf("k2, whose write was torn: %s", r.Status)
	}
	hs.Close()
	p.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for i, l := range lines {
		var e provider.Effect
		if err := json.Unmarshal([]byte(l), &e); err != nil || e.Seq != i+1 {
			t.Fatalf("journal line %d %q: %v", i+1, l, err)
		}
	}
	if len(lines) != 2 {
		t.Fatalf("journal:\n%s", b)
	}
	p, err = provider.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if es := p.Effects(); len(es) != 2 || es[1].Key != "k2" || string(es[1].Payload) != `{"amount":2}` {
		t.Fatalf("effects: %+v", es)
	}
	p.Close()

	// Corruption in a whole line is not a torn write.
	if err := os.WriteFile(path, []byte("{\"seq\":1}\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := provider.Open(path); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("open a corrupt journal: %v, want an error naming line 2", err)
	}
}

// TestProviderIgnoringKeys: told to ignore idempotency keys, the provider
// performs a repeated request again, recording the key it was sent with
// each effect, and needs no key; told to honour them again, it replays the
// key's first effect.
func TestProviderIgnoringKeys(t *testing.T) {
	p := provider.New()
	hs := httptest.NewServer(p)
	defer hs.Close()
	if err := p.Set(provider.Control{IgnoreKeys: true}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k1", "k1", ""} {
		if r := post(t, hs.URL, k, `{"amount":1}`); r.StatusCode != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("key %q: %s, replayed %q", k, r.Status, r.Header.Get("Idempotent-Replayed"))
		}
	}
	es := listed(t, hs.URL)
	if len(es) != 3 || es[0].Key != "k1" || es[1].Key != "k1" || es[1].Seq != 2 || es[2].Key != "" {
		t.Fatalf("effects: %+v", es)
	}
	resp, err := http.Post(hs.URL+"/control", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if r := post(t, hs.URL, "k1", `{"amount":1}`); r.StatusCode != http.StatusOK || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("k1 honoured again: %s", r.Status)
	}
	if len(p.Effects()) != 3 {
		t.Fatalf("effects: %+v", p.Effects())
	}
}
