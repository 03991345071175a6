package status

import (
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
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
// half a second, so that many open pages cost one gathering a second.
type Handler struct {
	nc *nats.Conn
	js jetstream.JetStream
	c  *contracts.Contract

	mu struct {
		sync.Mutex
		last []byte
		at   time.Time
	}
}

const reuse = 500 * time.Millisecond

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
		_, _ = w.Write(page)
	case "/status.json":
		b, err := h.status(r.Context())
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			b, _ = json.Marshal(map[string]string{"error": err.Error()})
		}
		_, _ = w.Write(b)
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
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := Gather(ctx, h.nc, h.js, h.c)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	h.mu.last, h.mu.at = b, time.Now()
	return b, nil
}
