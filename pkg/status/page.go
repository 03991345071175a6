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
// the Status it shows. Gathering is serialized and its result reused for
// half a second, so that many open pages cost one gathering a second. A
// gathering that fails — the broker too slow to answer within gatherTimeout,
// as under overload, when the page matters most — serves the last status
// gathered, with a problem saying how old it is and why; only a page that
// never gathered one answers 503.
type Handler struct {
	nc *nats.Conn
	js jetstream.JetStream
	c  *contracts.Contract

	mu struct {
		sync.Mutex
		last []byte
		at   time.Time
		good *Status // the last status gathered
	}
}

const (
	reuse         = 500 * time.Millisecond
	gatherTimeout = 8 * time.Second
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
	defer h.mu.Unlock()
	if h.mu.last != nil && time.Since(h.mu.at) < reuse {
		return h.mu.last, nil
	}
	ctx, cancel := context.WithTimeout(ctx, gatherTimeout)
	defer cancel()
	s, err := Gather(ctx, h.nc, h.js, h.c)
	switch {
	case err != nil && h.mu.good == nil:
		return nil, err
	case err != nil:
		stale := *h.mu.good
		stale.Problems = append(slices.Clone(stale.Problems), fmt.Sprintf("this status was gathered at %s, %s ago: gathering it again failed: %v",
			stale.Gathered.Format(time.RFC3339), time.Since(stale.Gathered).Round(time.Second), err))
		b, err := json.Marshal(stale)
		if err == nil {
			// Reused like a fresh one: requests queued behind a failed
			// gathering do not each wait out a gathering of their own.
			h.mu.last, h.mu.at = b, time.Now()
		}
		return b, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	h.mu.last, h.mu.at, h.mu.good = b, time.Now(), &s
	return b, nil
}
