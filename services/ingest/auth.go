package ingest

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/keygroup"
)

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
