// Package provider is a payment-provider simulator of weir's own: a small
// HTTP service that performs "effects" the way a real provider with
// idempotency keys does, so the dispatcher can be tested — and watched in
// the demo — against a real HTTP peer.
//
// POST /<kind> with an Idempotency-Key header performs the effect once per
// key: the first request records it and answers 201 with its record; a
// request with a key already performed answers 200 with the same record
// and Idempotent-Replayed: true. A request without a key is refused (400).
// GET /effects lists every effect performed, in order; GET /healthz answers
// 204 while it serves.
//
// It can be told to misbehave: POST /control with {"fail": N} answers the
// next N effect requests 500 without performing them, {"delay": "2s"}
// waits before answering (a timeout for a client that waits less),
// {"fail_after": N} performs the next N effects and then answers 500 as if
// the answer were lost, and {"refuse": N} answers the next N 422.
// {"ignore_keys": true} makes it a provider that cannot take idempotency
// keys: it performs every request as a new effect, recording the key it
// was sent only as a reference (as payment metadata would), so a repeated
// call shows up in /effects as a duplicate. Each POST /control replaces
// the whole behaviour; {} restores a well-behaved provider.
//
// New keeps the record in memory only. Open keeps it in a journal file as
// well: each effect is appended as a JSON line and synced to disk before
// it is answered, and a provider opened on the journal again — after a
// kill -9 — knows every effect it performed, and replays their keys.
package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Effect is one effect the provider performed.
type Effect struct {
	Seq     int             `json:"seq"`
	Key     string          `json:"key"`
	Kind    string          `json:"kind"`
	Payload json.RawMessage `json:"payload"`
	At      time.Time       `json:"at"`
}

// Control is how a test or an operator makes the provider misbehave.
type Control struct {
	// Fail answers the next Fail effect requests 500, performing nothing.
	Fail int `json:"fail"`
	// FailAfter performs the next FailAfter effects and answers each 500.
	FailAfter int `json:"fail_after"`
	// Refuse answers the next Refuse effect requests 422, performing
	// nothing: a provider that will never accept them.
	Refuse int `json:"refuse"`
	// Delay waits this long before answering each request.
	Delay string `json:"delay"`
	// IgnoreKeys performs every request as a new effect, as a provider
	// without idempotency keys would; the key sent is recorded with the
	// effect as a reference only.
	IgnoreKeys bool `json:"ignore_keys"`
}

// Provider is the simulator. The zero value is not usable: use New or Open.
type Provider struct {
	mu struct {
		sync.Mutex
		effects    []Effect
		byKey      map[string]int // key → index of its first effect
		fail       int
		failAfter  int
		refuse     int
		delay      time.Duration
		ignoreKeys bool
		requests   int
		journal    *journal // nil: the record is in memory only
	}
}

// New returns a provider that performs every effect asked, and keeps its
// record in memory.
func New() *Provider {
	p := &Provider{}
	p.mu.byKey = map[string]int{}
	return p
}

// Open returns a provider that keeps its record in the journal file at
// path too, creating it if it is missing; the effects already in it are
// loaded, so their keys are replayed and GET /effects lists them. A last
// line torn by a kill in the middle of its write is ignored and cut off.
// Close closes the journal.
func Open(path string) (*Provider, error) {
	j, effects, err := openJournal(path)
	if err != nil {
		return nil, err
	}
	p := New()
	for _, e := range effects {
		p.recordLocked(e)
	}
	p.mu.journal = j
	return p, nil
}

// Close closes the journal of a provider made by Open; effect requests
// after it fail. It does nothing for a provider made by New.
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.journal == nil {
		return nil
	}
	return p.mu.journal.close()
}

// Set replaces the provider's behaviour with c, as POST /control does.
func (p *Provider) Set(c Control) error {
	d, err := time.ParseDuration(orZero(c.Delay))
	if err != nil {
		return fmt.Errorf("provider: control delay: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.fail, p.mu.failAfter, p.mu.refuse, p.mu.delay, p.mu.ignoreKeys = c.Fail, c.FailAfter, c.Refuse, d, c.IgnoreKeys
	return nil
}

// Effects returns the effects performed so far, in order.
func (p *Provider) Effects() []Effect {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Effect(nil), p.mu.effects...)
}

// Requests counts the effect requests answered, replays and failures
// included.
func (p *Provider) Requests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.requests
}

// ServeHTTP implements http.Handler.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/healthz":
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodGet && r.URL.Path == "/effects":
		writeJSON(w, http.StatusOK, p.Effects())
	case r.Method == http.MethodPost && r.URL.Path == "/control":
		var c Control
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := p.Set(c); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPost:
		p.perform(w, r)
	default:
		http.Error(w, "POST /<kind>, POST /control or GET /effects", http.StatusMethodNotAllowed)
	}
}

func orZero(s string) string {
	if s == "" {
		return "0s"
	}
	return s
}

func (p *Provider) perform(w http.ResponseWriter, r *http.Request) {
	kind := strings.Trim(r.URL.Path, "/")
	key := r.Header.Get("Idempotency-Key")
	body, err := io.ReadAll(r.Body)
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case kind == "" || strings.Contains(kind, "/"):
		http.Error(w, "POST /<kind>", http.StatusNotFound)
		return
	case !json.Valid(body):
		http.Error(w, "the body is not JSON", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	if key == "" && !p.mu.ignoreKeys {
		p.mu.Unlock()
		http.Error(w, "an Idempotency-Key header is required", http.StatusBadRequest)
		return
	}
	p.mu.requests++
	delay := p.mu.delay
	if p.mu.fail > 0 {
		p.mu.fail--
		p.mu.Unlock()
		sleep(r, delay)
		http.Error(w, "provider unavailable (told to fail)", http.StatusInternalServerError)
		return
	}
	if p.mu.refuse > 0 {
		p.mu.refuse--
		p.mu.Unlock()
		http.Error(w, "effect refused (told to)", http.StatusUnprocessableEntity)
		return
	}
	status, replayed := http.StatusCreated, false
	var e Effect
	if i, ok := p.mu.byKey[key]; ok && !p.mu.ignoreKeys {
		status, replayed, e = http.StatusOK, true, p.mu.effects[i]
	} else {
		e = Effect{Seq: len(p.mu.effects) + 1, Key: key, Kind: kind, Payload: body, At: time.Now().UTC()}
		if j := p.mu.journal; j != nil {
			if err := j.append(e); err != nil {
				p.mu.Unlock()
				http.Error(w, "effect not performed: "+err.Error(), http.StatusInternalServerError)
				return
			}
		}
		p.recordLocked(e)
	}
	lost := false
	if p.mu.failAfter > 0 && !replayed {
		p.mu.failAfter--
		lost = true
	}
	p.mu.Unlock()
	sleep(r, delay)
	if lost {
		http.Error(w, "effect performed, answer lost (told to)", http.StatusInternalServerError)
		return
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, status, e)
}

// recordLocked adds a performed effect to the record in memory; its key
// names its first effect.
func (p *Provider) recordLocked(e Effect) {
	if _, ok := p.mu.byKey[e.Key]; !ok && e.Key != "" {
		p.mu.byKey[e.Key] = len(p.mu.effects)
	}
	p.mu.effects = append(p.mu.effects, e)
}

// sleep waits d or until the client goes away.
func sleep(r *http.Request, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the status is sent: a client gone mid-body has nothing to be told
}

// Tell makes the provider serving at url behave as c says: a POST of c to
// its /control, as a test or an operator would send it.
func Tell(url string, c Control) error {
	body, err := json.Marshal(c)
	if err != nil {
		return err
	}
	resp, err := http.Post(strings.TrimRight(url, "/")+"/control", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return fmt.Errorf("provider: POST %s/control: %s %s", url, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}
