// Package provider is a payment-provider simulator of weir's own: a small
// HTTP service that performs "effects" the way a real provider with
// idempotency keys does, so the dispatcher can be tested — and watched in
// the demo — against a real HTTP peer.
//
// POST /<kind> with an Idempotency-Key header performs the effect once per
// key: the first request records it and answers 201 with its record; a
// request with a key already performed answers 200 with the same record
// and Idempotent-Replayed: true. A request without a key is refused (400).
// It can be told to misbehave: POST /control with {"fail": N} answers the
// next N effect requests 500 without performing them, {"delay": "2s"}
// waits before answering (a timeout for a client that waits less), and
// {"fail_after": N} performs the next N effects and then answers 500 as if
// the answer were lost, and {"refuse": N} answers the next N 422. GET
// /effects lists every effect performed, in
// order.
package provider

import (
	"encoding/json"
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
}

// Provider is the simulator. The zero value is not usable: use New.
type Provider struct {
	mu        sync.Mutex
	effects   []Effect
	byKey     map[string]int // key → index in effects
	fail      int
	failAfter int
	refuse    int
	delay     time.Duration
	requests  int
}

// New returns a provider that performs every effect asked.
func New() *Provider { return &Provider{byKey: map[string]int{}} }

// Effects returns the effects performed so far, in order.
func (p *Provider) Effects() []Effect {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Effect(nil), p.effects...)
}

// Requests counts the effect requests answered, replays and failures
// included.
func (p *Provider) Requests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests
}

// ServeHTTP implements http.Handler.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/effects":
		writeJSON(w, http.StatusOK, p.Effects())
	case r.Method == http.MethodPost && r.URL.Path == "/control":
		var c Control
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		d, err := time.ParseDuration(orZero(c.Delay))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		p.fail, p.failAfter, p.refuse, p.delay = c.Fail, c.FailAfter, c.Refuse, d
		p.mu.Unlock()
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
	case key == "":
		http.Error(w, "an Idempotency-Key header is required", http.StatusBadRequest)
		return
	case kind == "" || strings.Contains(kind, "/"):
		http.Error(w, "POST /<kind>", http.StatusNotFound)
		return
	case !json.Valid(body):
		http.Error(w, "the body is not JSON", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.requests++
	delay := p.delay
	if p.fail > 0 {
		p.fail--
		p.mu.Unlock()
		sleep(r, delay)
		http.Error(w, "provider unavailable (told to fail)", http.StatusInternalServerError)
		return
	}
	if p.refuse > 0 {
		p.refuse--
		p.mu.Unlock()
		http.Error(w, "effect refused (told to)", http.StatusUnprocessableEntity)
		return
	}
	status, replayed := http.StatusCreated, false
	i, ok := p.byKey[key]
	if ok {
		status, replayed = http.StatusOK, true
	} else {
		i = len(p.effects)
		p.byKey[key] = i
		p.effects = append(p.effects, Effect{Seq: i + 1, Key: key, Kind: kind, Payload: body, At: time.Now().UTC()})
	}
	e := p.effects[i]
	lost := false
	if p.failAfter > 0 && !replayed {
		p.failAfter--
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
	_ = json.NewEncoder(w).Encode(v)
}
