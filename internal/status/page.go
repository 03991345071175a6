package status

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
)

// page is the status page: plain HTML, inline CSS and a little JavaScript
// that polls /status.json and redraws.
//
//go:embed status.html
var page []byte

// Handler serves a pipeline's status: GET / is the page, GET /status.json
// the Status it shows. One gathering runs at a time, on its own: a request
// that gives up does not end it, so a slow first gathering still completes
// and serves the next request. Its result is reused for half a second, so
// that many open pages cost one gathering a second. A gathering that fails
// — the broker too slow to answer within gatherTimeout, as under overload,
// when the page matters most — or that takes longer than patience serves
// the last status gathered, with a problem saying how old it is and why;
// only a page that never gathered one answers 503.
type Handler struct {
	nc *nats.Conn
	js jetstream.JetStream
	c  *contracts.Contract

	mu struct {
		sync.Mutex
		last []byte
		at   time.Time
		good *Status // the last status gathered
		// gathering is closed when the gathering in progress ends; nil
		// when none runs. failed is the last gathering's error.
		gathering chan struct{}
		failed    error
	}
}

const (
	reuse         = 500 * time.Millisecond
	gatherTimeout = 8 * time.Second
	// patience is how long a request waits for a new gathering when an
	// older status can answer it.
	patience = 2 * time.Second
)

// NewHandler returns the handler of pipeline c's status page.
func NewHandler(nc *nats.Conn, js jetstream.JetStream, c *contracts.Contract) *Handler {
	return &Handler{nc: nc, js: js, c: c}
}

// ServeHTTP serves the page and its JSON.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	switch r.URL.Path {
	case "/":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(page) // a client gone mid-page has nothing to be told
	case "/status.json":
		b, err := h.status(r.Context())
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			b, _ = json.Marshal(map[string]string{"error": err.Error()}) // a map of strings always encodes
		}
		_, _ = w.Write(b) // a client gone mid-body has nothing to be told
	default:
		http.NotFound(w, r)
	}
}

func (h *Handler) status(ctx context.Context) ([]byte, error) {
	h.mu.Lock()
	if h.mu.last != nil && time.Since(h.mu.at) < reuse {
		defer h.mu.Unlock()
		return h.mu.last, nil
	}
	done := h.mu.gathering
	if done == nil {
		done = make(chan struct{})
		h.mu.gathering = done
		go h.gather(done)
	}
	var impatient <-chan time.Time
	if h.mu.good != nil {
		t := time.NewTimer(patience)
		defer t.Stop()
		impatient = t.C
	}
	h.mu.Unlock()
	select {
	case <-done:
	case <-impatient:
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.stale(fmt.Errorf("gathering it again is taking longer than %s", patience))
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.last == nil {
		return nil, h.mu.failed
	}
	return h.mu.last, nil
}

// gather gathers the status once, whoever still waits for it, and keeps
// it — or, when it fails, the last one marked stale — for the next
// requests.
func (h *Handler) gather(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), gatherTimeout)
	defer cancel()
	s, err := Gather(ctx, h.nc, h.js, h.c)
	var b []byte
	if err == nil {
		b, err = json.Marshal(s)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	defer close(done)
	h.mu.gathering, h.mu.failed = nil, err
	switch {
	case err == nil:
		h.mu.last, h.mu.at, h.mu.good = b, time.Now(), &s
	case h.mu.good != nil:
		// Reused like a fresh one: requests queued behind a failed
		// gathering do not each wait out a gathering of their own.
		if b, err := h.stale(fmt.Errorf("gathering it again failed: %w", err)); err == nil {
			h.mu.last, h.mu.at = b, time.Now()
		}
	}
}

// stale is the last status gathered with a problem saying how old it is
// and why no newer one is shown. h.mu is held and h.mu.good set.
func (h *Handler) stale(why error) ([]byte, error) {
	st := *h.mu.good
	st.Problems = append(slices.Clone(st.Problems), fmt.Sprintf("this status was gathered at %s, %s ago: %v",
		st.Gathered.Format(time.RFC3339), time.Since(st.Gathered).Round(time.Second), why))
	return json.Marshal(st)
}
