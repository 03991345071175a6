package ingest_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/ingest"
)

// These tests attack the gateway as a producer would — a real HTTP client
// against the command (ingest.Run) serving an embedded JetStream — with
// the tokens weir auth writes (access.WriteTokens). They configure it by
// its environment only.

// lockedBuffer is the gateway's log, written while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tenantContract writes the shipped nexmark-dedup contract with its
// events' tenant in their field tenant, and returns its file.
func tenantContract(t *testing.T) string {
	t.Helper()
	return tenantContractFrom(t, "{from: json, field: tenant}")
}

// tenantContractFrom writes the shipped nexmark-dedup contract with its
// events' tenant where field says, and returns its file.
func tenantContractFrom(t *testing.T, field string) string {
	t.Helper()
	raw, err := os.ReadFile("../../contracts/nexmark-dedup.yaml")
	if err != nil {
		t.Fatal(err)
	}
	line := "  event_time: {from: json, field: ts, format: unix-ms}\n"
	if !bytes.Contains(raw, []byte(line)) {
		t.Fatalf("the shipped contract's identity has no line %q", line)
	}
	raw = bytes.Replace(raw, []byte(line), []byte(line+"  tenant:     "+field+"\n"), 1)
	file := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := contracts.Load(file); err != nil {
		t.Fatal(err)
	}
	return file
}

// writeTokens writes producers' tokens as weir auth does and returns the
// tokens file and each producer's token.
func writeTokens(t *testing.T, producers ...access.Producer) (string, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	file, err := access.WriteTokens(access.Files{Dir: dir}, "nexmark", producers)
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{}
	for _, p := range producers {
		b, err := os.ReadFile(access.TokenFile(dir, "nexmark", p.Name))
		if err != nil {
			t.Fatal(err)
		}
		tokens[p.Name] = strings.TrimSpace(string(b))
	}
	return file, tokens
}

// gateway is the ingest command serving, as a producer reaches it.
type gateway struct {
	t      *testing.T
	url    string
	js     jetstream.JetStream
	stream string
	log    *lockedBuffer
}

// startGateway runs the ingest command with env (NATS_URL, the listen
// address and -create-ingress are given) until the test ends.
func startGateway(t *testing.T, env map[string]string) *gateway {
	t.Helper()
	srv := natstest.Run(t)
	full := map[string]string{"NATS_URL": srv.ClientURL(), "WEIR_INGEST_ADDR": "127.0.0.1:0", "WEIR_CREATE_INGRESS": "true"}
	for k, v := range env {
		full[k] = v
	}
	c, err := contracts.Load(full["WEIR_CONTRACT"])
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{t: t, js: srv.JetStream(t), stream: c.Ingress.Stream, log: &lockedBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- ingest.Run(ctx, nil, func(k string) string { return full[k] }, g.log, func(a string) { addr <- a })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	select {
	case a := <-addr:
		g.url = "http://" + a
	case err := <-done:
		done <- nil
		t.Fatalf("the gateway did not start: %v\n%s", err, g.log)
	}
	return g
}

// post sends body as a producer with token (none: ""), and returns the
// answer.
func (g *gateway) post(token, body string) (*http.Response, ingest.Response) {
	g.t.Helper()
	req, err := http.NewRequest("POST", g.url+"/v1/events", strings.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		g.t.Fatal(err)
	}
	var r ingest.Response
	if err := json.Unmarshal(raw, &r); err != nil {
		g.t.Fatalf("response %d %q: %v", res.StatusCode, raw, err)
	}
	return res, r
}

func (g *gateway) stored() []jetstream.Msg {
	return streamtest.Messages(g.t, g.js, g.stream)
}

func tenantEvent(tenant, id string) string {
	return fmt.Sprintf(`{"tenant":%q,"id":%q,"key":"k-1","ts":%d,"type":"bid"}`+"\n", tenant, id, time.Now().Add(-time.Hour).UnixMilli())
}

// TestGatewayKeepsTenantsApart is the attack of issue 29: one tenant
// posting an event with another tenant's event ID made the other's vanish
// as a duplicate, with {"accepted":2}. Both are stored now, and each is
// still stored once however often it is retried.
func TestGatewayKeepsTenantsApart(t *testing.T) {
	tokens, token := writeTokens(t, access.Producer{Name: "shop"})
	g := startGateway(t, map[string]string{"WEIR_CONTRACT": tenantContract(t), "WEIR_GATEWAY_TOKENS": tokens})
	body := tenantEvent("acme", "e-1") + tenantEvent("globex", "e-1")
	for range 2 {
		if res, r := g.post(token["shop"], body); res.StatusCode != http.StatusOK || r.Accepted != 2 {
			t.Fatalf("%d %+v", res.StatusCode, r)
		}
	}
	tenants := map[string]int{}
	for _, m := range g.stored() {
		var e struct{ Tenant, ID string }
		if err := json.Unmarshal(m.Data(), &e); err != nil {
			t.Fatal(err)
		}
		tenants[e.Tenant]++
	}
	if tenants["acme"] != 1 || tenants["globex"] != 1 || len(tenants) != 2 {
		t.Fatalf("stored per tenant %v, want acme's e-1 and globex's e-1 once each", tenants)
	}
}

// TestGatewayRefusesWithoutToken: a request with no token, or one the
// gateway's file does not hold, is answered 401 with a challenge and
// stores nothing; the token presented is never logged.
func TestGatewayRefusesWithoutToken(t *testing.T) {
	tokens, token := writeTokens(t, access.Producer{Name: "shop"})
	g := startGateway(t, map[string]string{"WEIR_CONTRACT": "../../contracts/nexmark-dedup.yaml", "WEIR_GATEWAY_TOKENS": tokens})
	res, err := http.Get(g.url + "/v1/stats")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("stats without a token: %s, want 401", res.Status)
	}
	wrong := strings.Repeat("x", len(token["shop"]))
	off := token["shop"][:len(token["shop"])-1] + "A"
	if off == token["shop"] {
		off = off[:len(off)-1] + "B"
	}
	for _, tc := range []struct {
		name, token, challenge string
	}{
		{"no token", "", `Bearer realm="weir ingest nexmark"`},
		{"a wrong token", wrong, `Bearer realm="weir ingest nexmark", error="invalid_token"`},
		{"a token one character off", off, `Bearer realm="weir ingest nexmark", error="invalid_token"`},
	} {
		res, r := g.post(tc.token, events(0, 3))
		if res.StatusCode != http.StatusUnauthorized || r.Accepted != 0 || r.Error == "" {
			t.Errorf("%s: %d %+v, want 401", tc.name, res.StatusCode, r)
		}
		if got := res.Header.Get("WWW-Authenticate"); got != tc.challenge {
			t.Errorf("%s: WWW-Authenticate %q, want %q", tc.name, got, tc.challenge)
		}
	}
	if n := len(g.stored()); n != 0 {
		t.Fatalf("%d events stored without a producer's token", n)
	}
	if strings.Contains(g.log.String(), wrong) {
		t.Errorf("the log holds the token presented:\n%s", g.log)
	}
	if res, r := g.post(token["shop"], events(0, 3)); res.StatusCode != http.StatusOK || r.Accepted != 3 {
		t.Fatalf("with the producer's token: %d %+v", res.StatusCode, r)
	}
}

// TestGatewayHoldsProducersToTheirTenants: a producer whose token names
// tenant acme posts an event of globex: the line is rejected, naming the
// field tenant, and only acme's event is stored.
func TestGatewayHoldsProducersToTheirTenants(t *testing.T) {
	tokens, token := writeTokens(t, access.Producer{Name: "acme-shop", Tenants: []string{"acme"}})
	g := startGateway(t, map[string]string{"WEIR_CONTRACT": tenantContract(t), "WEIR_GATEWAY_TOKENS": tokens})
	res, r := g.post(token["acme-shop"], tenantEvent("acme", "a-1")+tenantEvent("globex", "g-1"))
	if res.StatusCode != http.StatusUnprocessableEntity || r.Accepted != 1 || len(r.Rejected) != 1 {
		t.Fatalf("%d %+v, want 422 with line 2 rejected", res.StatusCode, r)
	}
	if rej := r.Rejected[0]; rej.Line != 2 || rej.Field != "tenant" || !strings.Contains(rej.Error, "acme-shop may not write tenant") {
		t.Errorf("rejection %+v", rej)
	}
	msgs := g.stored()
	if len(msgs) != 1 || !bytes.Contains(msgs[0].Data(), []byte(`"acme"`)) {
		t.Fatalf("stored %d events, want acme's only", len(msgs))
	}
}

// TestGatewayHoldsProducersToTheirTenantsInHeaders: a contract reading
// the tenant from a header takes it from the request's, for every line;
// a producer limited to acme naming globex there stores nothing.
func TestGatewayHoldsProducersToTheirTenantsInHeaders(t *testing.T) {
	tokens, token := writeTokens(t, access.Producer{Name: "acme-shop", Tenants: []string{"acme"}})
	g := startGateway(t, map[string]string{"WEIR_CONTRACT": tenantContractFrom(t, "{from: header, header: Weir-Tenant}"), "WEIR_GATEWAY_TOKENS": tokens})
	post := func(tenant string) (int, ingest.Response) {
		req, err := http.NewRequest("POST", g.url+"/v1/events", strings.NewReader(events(0, 2)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token["acme-shop"])
		req.Header.Set("Weir-Tenant", tenant)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var r ingest.Response
		if err := json.NewDecoder(res.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, r
	}
	if status, r := post("globex"); status != http.StatusUnprocessableEntity || r.Accepted != 0 || len(r.Rejected) != 2 || r.Rejected[0].Field != "tenant" {
		t.Fatalf("globex: %d %+v", status, r)
	}
	if status, r := post("acme"); status != http.StatusOK || r.Accepted != 2 {
		t.Fatalf("acme: %d %+v", status, r)
	}
	for _, m := range g.stored() {
		if m.Headers().Get("Weir-Tenant") != "acme" {
			t.Fatalf("stored with tenant %q", m.Headers().Get("Weir-Tenant"))
		}
	}
	if n := len(g.stored()); n != 2 {
		t.Fatalf("%d stored, want acme's 2", n)
	}
}

// TestGatewayCutsOffASlowBody: a client that sends its headers and then
// its body a byte at a time holds a connection no longer than the read
// timeout.
func TestGatewayCutsOffASlowBody(t *testing.T) {
	tokens, token := writeTokens(t, access.Producer{Name: "shop"})
	g := startGateway(t, map[string]string{"WEIR_CONTRACT": "../../contracts/nexmark-dedup.yaml", "WEIR_GATEWAY_TOKENS": tokens,
		"WEIR_INGEST_READ_TIMEOUT": "1s", "WEIR_INGEST_WRITE_TIMEOUT": "3s"})
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST /v1/events HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer %s\r\nContent-Length: 100000\r\n\r\n", token["shop"])
	closed := make(chan error, 1)
	go func() {
		_, err := bufio.NewReader(conn).ReadByte() // an answer, or the end
		closed <- err
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-tick.C:
			if _, err := conn.Write([]byte("{")); err != nil && !errors.Is(err, net.ErrClosed) {
				t.Logf("write after %s: %v", time.Since(start), err)
			}
		case <-closed:
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("the slow body held the connection %s", d)
			}
			return
		case <-deadline:
			t.Fatalf("a body trickling a byte every 100ms still holds the connection after %s", time.Since(start))
		}
	}
}

// TestGatewayRefusesToServeAnyone: without a tokens file or client
// certificates the command refuses to start, unless -open says to serve
// anyone, which it warns of.
func TestGatewayRefusesToServeAnyone(t *testing.T) {
	srv := natstest.Run(t)
	env := map[string]string{"NATS_URL": srv.ClientURL(), "WEIR_CONTRACT": "../../contracts/nexmark-dedup.yaml", "WEIR_INGEST_ADDR": "127.0.0.1:0", "WEIR_CREATE_INGRESS": "true"}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := ingest.Run(ctx, nil, func(k string) string { return env[k] }, io.Discard, func(string) {
		t.Error("the gateway serves without authentication")
		cancel()
	})
	if !errors.Is(err, ingest.ErrNoAuthentication) {
		t.Fatalf("err = %v, want ErrNoAuthentication", err)
	}
	env["WEIR_GATEWAY_OPEN"] = "true"
	g := startGateway(t, env)
	if !strings.Contains(g.log.String(), "serving without authentication") {
		t.Errorf("-open without a warning:\n%s", g.log)
	}
	if res, r := g.post("", events(0, 2)); res.StatusCode != http.StatusOK || r.Accepted != 2 {
		t.Fatalf("open: %d %+v", res.StatusCode, r)
	}
}

// TestGatewayTakesClientCertificates: with a client CA the gateway serves
// HTTPS only to clients whose certificate the CA signed — alone, or with
// a producer's token when it has a tokens file as well.
func TestGatewayTakesClientCertificates(t *testing.T) {
	certs, err := natsconn.WriteCertificates(filepath.Join(t.TempDir(), "tls"), []string{"127.0.0.1"}, "shop", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	pair, err := tls.LoadX509KeyPair(certs.Client, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	client := func(withCert bool) *http.Client {
		c := &tls.Config{RootCAs: pool}
		if withCert {
			c.Certificates = []tls.Certificate{pair}
		}
		tr := &http.Transport{TLSClientConfig: c}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	post := func(g *gateway, c *http.Client, token string) (int, error) {
		req, err := http.NewRequest("POST", strings.Replace(g.url, "http://", "https://", 1)+"/v1/events", strings.NewReader(events(0, 3)))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		defer res.Body.Close()
		_, err = io.Copy(io.Discard, res.Body)
		return res.StatusCode, err
	}
	env := map[string]string{"WEIR_CONTRACT": "../../contracts/nexmark-dedup.yaml",
		"WEIR_INGEST_TLS_CERT": certs.Server, "WEIR_INGEST_TLS_KEY": certs.ServerKey, "WEIR_INGEST_TLS_CLIENT_CA": certs.CA}

	g := startGateway(t, env)
	if status, err := post(g, client(false), ""); err == nil {
		t.Errorf("a client without a certificate was answered %d", status)
	}
	if status, err := post(g, client(true), ""); err != nil || status != http.StatusOK {
		t.Errorf("a client with a certificate: %d %v", status, err)
	}

	tokens, token := writeTokens(t, access.Producer{Name: "shop"})
	env["WEIR_GATEWAY_TOKENS"] = tokens
	g = startGateway(t, env)
	if status, err := post(g, client(false), token["shop"]); err == nil {
		t.Errorf("a token without a certificate was answered %d", status)
	}
	if status, err := post(g, client(true), ""); err != nil || status != http.StatusUnauthorized {
		t.Errorf("a certificate without a token: %d %v, want 401", status, err)
	}
	if status, err := post(g, client(true), token["shop"]); err != nil || status != http.StatusOK {
		t.Errorf("a certificate and a token: %d %v", status, err)
	}
}
