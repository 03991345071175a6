// Package ingest is weir's ingest gateway: an HTTP service that stores
// events into a pipeline's ingress stream for producers that cannot link
// Go (package pkg/producer is the way for those that can).
//
// A producer POSTs newline-delimited JSON to /v1/events, one event per
// line. The gateway decodes each line as the pipeline will (the contract's
// identity and time sections, pkg/ingress), routes it to the partition
// that owns its key's key group, and stores the request's events in atomic
// batches — one fsync per batch on a SyncAlways stream, each event still
// its own message that any NATS consumer reads. Over an ingress of several
// streams (ingress.streams) each stream gets batches of its own, so a
// request is all or nothing per stream only; a retry is stored once, within
// the duplicate window, if its events keep their keys. It answers once
// every accepted event is stored:
//
//	200 {"accepted": 3}
//	422 {"accepted": 2, "rejected": [{"line": 2, "field": "event_time", "error": "..."}]}
//
// A rejected line is named by its line number, the envelope field and the
// reason; the other lines of the request are stored. Retrying a request,
// whole or corrected, is harmless: an event's Nats-Msg-Id is its ID — of
// its tenant, when the contract declares tenants (edge.TenantID), so that
// one tenant's event never suppresses another's of the same ID — and
// within the ingress stream's duplicate window JetStream stores it once.
// A failure to store (503) reports how many lines were stored before it;
// retrying the whole request stores the rest.
//
// Identity fields the contract reads from headers are taken from the HTTP
// request's headers of the same name, for every line of the request (a
// producer name, say); the event ID and key must come from each line.
//
// A contract declaring overload.policy admission makes the gateway refuse
// whole requests while the pipeline is more than overload.max_lag records
// behind (package admission), at once and storing nothing:
//
//	429 {"accepted": 0, "error": "admission refused: pipeline ... is N records behind, ..."}
//
// with Retry-After; the producer keeps its events and tries again later.
//
// Producers authenticate: each request carries a producer's
// bearer token, which weir auth -producers made, and the gateway checks it
// against the hashes in its tokens file (access.Tokens):
//
//	Authorization: Bearer <token>
//
// A request without one, or with a token the file does not hold, is
// answered 401 with WWW-Authenticate and stores nothing. A producer whose
// token names tenants writes only theirs: a line of another tenant is
// rejected like any bad line, by its number, field "tenant" and why,
// while the producer's own lines are stored. A gateway behind TLS with
// client certificates (Run's -https-client-ca) may take the verified
// certificate instead; one with neither serves anyone only when told to
// (Config.Open), and says so each time it starts.
//
// The command (Run) listens on loopback unless given an address (a
// container's :8088), bounds the time a client may take over a request's
// headers, over its whole body (a body trickled in to hold a connection
// is cut off) and before the answer, and how long an idle connection is
// kept, and serves HTTPS with -https-cert and -https-key.
package ingest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/admission"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/keygroup"
	"github.com/weirflow/weir/pkg/ingress"
	"github.com/weirflow/weir/pkg/producer"
	"github.com/weirflow/weir/pkg/telemetry"
)

// DefaultMaxBody bounds a request body.
const DefaultMaxBody = 64 << 20

// chunk is how many lines are decoded before they are stored: a request's
// memory is bounded by it, not by the body.
const chunk = producer.MaxBatch

// Config configures a Gateway.
type Config struct {
	Contract *contracts.Contract
	// MaxBody bounds a request's body in bytes; 0 is DefaultMaxBody.
	MaxBody int64
	// Timeout bounds the wait for one batch to be stored; 0 is 10s.
	Timeout time.Duration
	// Now reads the clock an event's time is judged against; Run passes
	// time.Now.
	Now    func() time.Time
	Logger *slog.Logger
	// Tokens are the producers a request's bearer token must name one
	// of (access.ReadTokens).
	Tokens *access.Tokens
	// LagAPI is the JetStream API prefix under which the gateway reads
	// the pipeline's consumers for admission: empty, its own account's;
	// $JS.<pipeline>.API where the pipeline has an account of its own and
	// exports them to the ingress account (access.Accounts).
	LagAPI string
	// Certificates admits a request whose TLS client certificate the
	// server verified, as the producer its common name names, writing
	// every tenant; with Tokens a request needs a token as well.
	Certificates bool
	// Open serves requests without authentication: anyone who reaches
	// the gateway writes every tenant. Without Tokens or Certificates, New
	// refuses to start unless it is set.
	Open bool
}

// Gateway is the HTTP handler of the ingest gateway.
type Gateway struct {
	js     jetstream.JetStream
	in     contracts.Ingress
	layout keygroup.Layout
	// streamOf is the index, in in.StreamNames(), of the stream of each
	// partition's subject.
	streamOf map[string]int
	decoder  *ingress.Decoder
	headers  []string // identity headers copied from the request
	maxBody  int64
	timeout  time.Duration
	now      func() time.Time
	log      *slog.Logger
	mux      *http.ServeMux
	auth     authenticator
	// tenanted: the contract declares identity.tenant.
	tenanted bool
	// gate refuses producers while the pipeline is too far behind; nil
	// unless the contract declares policy admission.
	gate *admission.Gate

	requests, accepted, rejected, refused, unauthorized atomic.Int64
}

// New returns a gateway storing into the ingress of cfg.Contract. It
// refuses a contract whose event ID or key comes from a header: a request
// carries one set of headers for all its lines.
func New(js jetstream.JetStream, cfg Config) (*Gateway, error) {
	c := cfg.Contract
	if c == nil {
		return nil, errors.New("ingest: a contract is required")
	}
	identities := map[string]contracts.Field{"identity.id": c.Identity.ID, "identity.key": c.Identity.Key}
	for i, o := range c.Identity.Schema.Older {
		identities[fmt.Sprintf("identity.schema.older[%d].id", i)] = o.ID
		identities[fmt.Sprintf("identity.schema.older[%d].key", i)] = o.Key
	}
	for name, f := range identities {
		if f.From == ingress.FromHeader {
			return nil, fmt.Errorf("ingest: refusing to start: %s comes from header %s; the gateway reads each event's ID and key from its JSON line", name, f.Header)
		}
	}
	dc := ingress.ConfigOf(c)
	// The pipeline applies its future-skew policy at its own clock; the
	// gateway stores such events for it to judge.
	dc.OnFuture = ingress.FutureClamp
	d, err := ingress.NewDecoder(dc)
	if err != nil {
		return nil, fmt.Errorf("ingest: refusing to start: contract %s identity: %w", c.File, err)
	}
	auth, err := newAuthenticator(c, cfg)
	if err != nil {
		return nil, err
	}
	lag := js
	if cfg.LagAPI != "" {
		if lag, err = jetstream.NewWithAPIPrefix(js.Conn(), cfg.LagAPI); err != nil {
			return nil, fmt.Errorf("ingest: refusing to start: lag API %s: %w", cfg.LagAPI, err)
		}
	}
	g := &Gateway{
		js: js, in: c.Ingress, decoder: d, gate: admission.New(lag, c), auth: auth, tenanted: c.Identity.Tenant.Declared(),
		layout:  keygroup.Layout{Groups: c.State.KeyGroups, Partitions: c.Ingress.Partitions},
		maxBody: cfg.MaxBody, timeout: cfg.Timeout, now: cfg.Now, log: cfg.Logger,
	}
	if g.now == nil {
		return nil, errors.New("ingest: a clock (Config.Now) is required")
	}
	g.streamOf = make(map[string]int, c.Ingress.Partitions)
	for p := range c.Ingress.Partitions {
		g.streamOf[c.Ingress.Subject(p)] = p % c.Ingress.StreamCount()
	}
	if err := g.layout.Validate(); err != nil {
		return nil, fmt.Errorf("ingest: refusing to start: %w", err)
	}
	headed := []contracts.Field{c.Identity.Producer, c.Identity.EventTime, c.Identity.Schema.Version, c.Identity.Tenant}
	for _, o := range c.Identity.Schema.Older {
		headed = append(headed, o.Producer, o.EventTime)
	}
	for _, f := range headed {
		if f.From == ingress.FromHeader && !slices.Contains(g.headers, f.Header) {
			g.headers = append(g.headers, f.Header)
		}
	}
	if g.maxBody <= 0 {
		g.maxBody = DefaultMaxBody
	}
	if g.timeout <= 0 {
		g.timeout = 10 * time.Second
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Open {
		g.log.Warn("serving without authentication (-open): anyone who reaches the gateway writes every tenant's events", "pipeline", c.Pipeline)
	}
	g.mux = http.NewServeMux()
	g.mux.HandleFunc("POST /v1/events", g.events)
	g.mux.HandleFunc("GET /v1/stats", g.stats)
	g.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	return g, nil
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.mux.ServeHTTP(w, r) }

// Stats count what the gateway has done since it started.
type Stats struct {
	Requests int64 `json:"requests"`
	Accepted int64 `json:"accepted"`
	Rejected int64 `json:"rejected"`
	// Refused counts requests refused by admission (overload.policy).
	Refused int64 `json:"refused"`
	// Unauthorized counts requests refused for want of a producer's
	// credentials.
	Unauthorized int64 `json:"unauthorized"`
}

// Stats returns the gateway's counts.
func (g *Gateway) Stats() Stats {
	return Stats{Requests: g.requests.Load(), Accepted: g.accepted.Load(), Rejected: g.rejected.Load(), Refused: g.refused.Load(),
		Unauthorized: g.unauthorized.Load()}
}

// RunAdmission measures the pipeline's lag for admission until ctx ends;
// it returns at once when the contract's policy is not admission.
func (g *Gateway) RunAdmission(ctx context.Context) error { return g.gate.Run(ctx) }

func (g *Gateway) stats(w http.ResponseWriter, r *http.Request) {
	if _, err := g.authenticate(w, r); err != nil {
		return
	}
	writeJSON(w, http.StatusOK, g.Stats())
}

// Rejection names a line the gateway refused and why.
type Rejection struct {
	Line  int    `json:"line"`
	Field string `json:"field"`
	Error string `json:"error"`
}

// Response is the gateway's answer to a POST.
type Response struct {
	// Accepted lines are stored (or were already, by their ID).
	Accepted int         `json:"accepted"`
	Rejected []Rejection `json:"rejected,omitempty"`
	// Error, when set, stopped the request; lines after the Accepted ones
	// may not be stored.
	Error string `json:"error,omitempty"`
}

func (g *Gateway) events(w http.ResponseWriter, r *http.Request) {
	g.requests.Add(1)
	p, err := g.authenticate(w, r)
	if err != nil {
		return
	}
	var resp Response
	if err := g.gate.Admit(); err != nil {
		g.refused.Add(1)
		var ref *admission.Refused
		if errors.As(err, &ref) {
			w.Header().Set("Retry-After", fmt.Sprint(int(max(ref.RetryAfter.Seconds(), 1))))
		}
		resp.Error = err.Error()
		writeJSON(w, http.StatusTooManyRequests, resp)
		return
	}
	status := g.store(w, r, p, &resp)
	g.accepted.Add(int64(resp.Accepted))
	g.rejected.Add(int64(len(resp.Rejected)))
	if status == http.StatusOK && len(resp.Rejected) > 0 {
		status = http.StatusUnprocessableEntity
	}
	if resp.Error != "" {
		g.log.Warn("ingest request failed", "accepted", resp.Accepted, "err", resp.Error)
	}
	writeJSON(w, status, resp)
}

// store decodes and stores the request's lines, chunk by chunk, and
// returns the status to answer with.
func (g *Gateway) store(w http.ResponseWriter, r *http.Request, p access.Producer, resp *Response) int {
	hdr := nats.Header{}
	for _, h := range g.headers {
		if v := r.Header.Get(h); v != "" {
			hdr.Set(h, v)
		}
	}
	trace := telemetry.ValidTraceparent(r.Header.Get("traceparent"))
	lines := bufio.NewReaderSize(http.MaxBytesReader(w, r.Body, g.maxBody), 64<<10)
	batch := make([]*nats.Msg, 0, chunk)
	seen := make(map[string]bool, chunk)
	repeats := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), g.timeout)
		defer cancel()
		if _, err := producer.PublishSplit(ctx, g.js, batch, g.in.StreamCount(), g.route, 0, 0); err != nil {
			return err
		}
		resp.Accepted += len(batch) + repeats
		batch, repeats = batch[:0], 0
		clear(seen)
		return nil
	}
	now := g.now()
	for n := 1; ; n++ {
		line, tooLong, err := readLine(lines, g.in.MaxMessageBytes)
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			resp.Error = fmt.Sprintf("body exceeds %d bytes at line %d; nothing after it was read", g.maxBody, n)
			if ferr := flush(); ferr != nil {
				resp.Error += "; " + ferr.Error()
				return http.StatusServiceUnavailable
			}
			return http.StatusRequestEntityTooLarge
		case err != nil && err != io.EOF:
			resp.Error = fmt.Sprintf("reading line %d: %v", n, err)
			return http.StatusBadRequest
		}
		if tooLong {
			resp.Rejected = append(resp.Rejected, Rejection{Line: n, Field: "payload",
				Error: fmt.Sprintf("longer than the ingress's max_message_bytes %d", g.in.MaxMessageBytes)})
		} else if len(bytes.TrimSpace(line)) > 0 {
			if rej, m := g.message(line, hdr, trace, now, p); m == nil {
				rej.Line = n
				resp.Rejected = append(resp.Rejected, rej)
			} else if id := m.Header.Get(jetstream.MsgIDHeader); !seen[id] {
				// A repeat within the batch would make the server refuse
				// the whole batch; JetStream would drop it anyway.
				seen[id] = true
				batch = append(batch, m)
			} else {
				repeats++
			}
		}
		if len(batch) == chunk || err == io.EOF {
			if ferr := flush(); ferr != nil {
				resp.Error = fmt.Sprintf("storing lines up to %d: %v", n, ferr)
				return http.StatusServiceUnavailable
			}
		}
		if err == io.EOF {
			return http.StatusOK
		}
	}
}

// message decodes one line of producer p into the message that stores it,
// or says why it cannot.
func (g *Gateway) message(line []byte, hdr nats.Header, trace string, now time.Time, p access.Producer) (Rejection, *nats.Msg) {
	h := make(nats.Header, len(hdr)+4)
	for k, v := range hdr {
		h[k] = v
	}
	data := bytes.Clone(line)
	rec, err := g.decoder.Decode(ingress.Message{Subject: g.in.SubjectPrefix, Header: h, Data: data, Stored: now}, now)
	if err != nil {
		var fe *ingress.FieldError
		if errors.As(err, &fe) {
			return Rejection{Field: fe.Field, Error: fe.Reason}, nil
		}
		return Rejection{Field: "payload", Error: err.Error()}, nil
	}
	if rej, ok := checkTenant(p, rec.Tenant, g.tenanted); !ok {
		return rej, nil
	}
	h.Set(jetstream.MsgIDHeader, edge.EscapeHeader(edge.TenantID(rec.Tenant, rec.ID)))
	part := g.layout.Partition(rec.Key)
	h.Set(jetstream.ExpectedStreamHeader, g.in.StreamOf(part))
	if trace != "" {
		h["traceparent"] = []string{trace}
	}
	return Rejection{}, &nats.Msg{Subject: g.in.Subject(part), Header: h, Data: data}
}

// route is the stream, in g.in.StreamNames(), a message is stored in.
func (g *Gateway) route(m *nats.Msg) int { return g.streamOf[m.Subject] }

// readLine reads one line without its end (LF or CRLF), at most max bytes
// of it: a longer line is consumed whole and reported too long. At the end
// of the input it returns the last line, if any, with io.EOF.
func readLine(r *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	var buf []byte
	for {
		frag, err := r.ReadSlice('\n')
		if err == nil {
			frag = frag[:len(frag)-1]
		}
		if !tooLong {
			if len(buf)+len(frag) > max+1 { // +1: a CR before the LF
				tooLong, buf = true, nil
			} else {
				buf = append(buf, frag...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		buf = bytes.TrimSuffix(buf, []byte("\r"))
		if len(buf) > max {
			tooLong, buf = true, nil
		}
		return buf, tooLong, err
	}
}

// authenticate returns the producer r comes from, or answers it 401 and
// returns why.
func (g *Gateway) authenticate(w http.ResponseWriter, r *http.Request) (access.Producer, error) {
	p, err := g.auth.producer(r)
	if err != nil {
		g.unauthorized.Add(1)
		g.log.Warn("unauthenticated request refused", "remote", r.RemoteAddr, "path", r.URL.Path, "why", err)
		g.auth.refuse(w, err)
	}
	return p, err
}

// Why a request is not authenticated. The answer names which, never the
// token presented.
var (
	ErrNoToken       = errors.New("ingest: no bearer token: send Authorization: Bearer <token>, the token weir auth -producers wrote for the producer")
	ErrBadToken      = errors.New("ingest: the bearer token is no producer's of this gateway")
	ErrNoCertificate = errors.New("ingest: no verified client certificate")
)

// ErrNoAuthentication is New's refusal to serve a gateway no producer can
// authenticate to, unless told to serve anyone.
var ErrNoAuthentication = errors.New("ingest: refusing to start: no producer can authenticate: give the producers' tokens file (-tokens, WEIR_GATEWAY_TOKENS; weir auth -producers writes it) or a CA for client certificates (-https-client-ca, WEIR_INGEST_TLS_CLIENT_CA), or serve anyone who reaches the gateway with -open (WEIR_GATEWAY_OPEN=true)")

// authenticator says which producer sent a request.
type authenticator struct {
	tokens *access.Tokens
	certs  bool
	open   bool
	// challenge is the WWW-Authenticate header of a 401.
	challenge string
}

// newAuthenticator checks cfg's ways of authenticating against contract c.
func newAuthenticator(c *contracts.Contract, cfg Config) (authenticator, error) {
	a := authenticator{tokens: cfg.Tokens, certs: cfg.Certificates, open: cfg.Open,
		challenge: fmt.Sprintf("Bearer realm=%q", "weir ingest "+c.Pipeline)}
	switch {
	case a.open && (a.tokens != nil || a.certs):
		return a, errors.New("ingest: refusing to start: open (-open) serves anyone, yet a tokens file or client certificates are given: choose")
	case !a.open && a.tokens == nil && !a.certs:
		return a, ErrNoAuthentication
	case a.tokens == nil:
		return a, nil
	case a.tokens.Pipeline != c.Pipeline:
		return a, fmt.Errorf("ingest: refusing to start: the tokens file is pipeline %s's gateway's, the contract %s pipeline %s's", a.tokens.Pipeline, c.File, c.Pipeline)
	}
	if a.tokens.Tenanted() && !c.Identity.Tenant.Declared() {
		return a, fmt.Errorf("ingest: refusing to start: the tokens file limits producers to tenants, and contract %s declares no identity.tenant to tell an event's tenant by", c.File)
	}
	return a, nil
}

// producer returns the producer r authenticates as: with Open anyone,
// writing every tenant.
func (a authenticator) producer(r *http.Request) (access.Producer, error) {
	if a.open {
		return access.Producer{}, nil
	}
	var p access.Producer
	if a.certs {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
			return p, ErrNoCertificate
		}
		p.Name = r.TLS.VerifiedChains[0][0].Subject.CommonName
	}
	if a.tokens == nil {
		return p, nil
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return p, ErrNoToken
	}
	p, ok = a.tokens.Producer(strings.TrimSpace(token))
	if !ok {
		return p, ErrBadToken
	}
	return p, nil
}

// refuse answers a request that did not authenticate.
func (a authenticator) refuse(w http.ResponseWriter, err error) {
	challenge := a.challenge
	if errors.Is(err, ErrBadToken) {
		challenge += `, error="invalid_token"`
	}
	w.Header().Set("WWW-Authenticate", challenge)
	writeJSON(w, http.StatusUnauthorized, Response{Error: err.Error()})
}

// checkTenant says why p may not write an event of tenant, if it may not;
// tenanted says the contract declares tenants.
func checkTenant(p access.Producer, tenant string, tenanted bool) (Rejection, bool) {
	switch {
	case !tenanted:
		return Rejection{}, true
	case !keygroup.ValidTenant([]byte(tenant)):
		return Rejection{Field: "tenant", Error: "holds the byte 0x1e, which separates a tenant from an event's ID in its message ID"}, false
	case !p.May(tenant):
		return Rejection{Field: "tenant", Error: fmt.Sprintf("producer %s may not write tenant %q: its token names %s",
			p.Name, tenant, strings.Join(p.Tenants, ", "))}, false
	}
	return Rejection{}, true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
