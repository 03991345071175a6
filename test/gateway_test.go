package test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/dedup"
	"github.com/weirflow/weir/services/ingest"
)

// TestAGatewayTenantSuppressesNoOtherTenant is issue 29's gateway attack
// through the whole pipeline: a producer posts tenant globex's event e-1
// beside tenant acme's e-1. The gateway used the bare ID as the message
// ID, so JetStream dropped globex's as acme's duplicate and answered
// {"accepted":2}. With tenant-scoped keys the dedup pipeline now puts
// each tenant's e-1 out once, and a retry of the request adds nothing.
func TestAGatewayTenantSuppressesNoOtherTenant(t *testing.T) {
	srv := natstest.Run(t)
	js := srv.JetStream(t)

	// The dedup contract, its events carrying their tenant and its keys
	// scoped by it.
	raw, err := os.ReadFile(contractPath(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	identity, state := "  event_time: {from: json, field: ts, format: unix-ms}\n", "\nstate:\n"
	if !bytes.Contains(raw, []byte(identity)) || !bytes.Contains(raw, []byte(state)) {
		t.Fatalf("the contract has no lines %q and %q", identity, state)
	}
	raw = bytes.Replace(raw, []byte(identity), []byte(identity+"  tenant: {from: json, field: tenant}\n"), 1)
	raw = bytes.Replace(raw, []byte(state), []byte(state+"  tenant_scoped: true\n"), 1)
	file := filepath.Join(dir, "tenants.yaml")
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := contracts.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := access.WriteTokens(access.Files{Dir: dir}, c.Pipeline, []access.Producer{{Name: "shop"}})
	if err != nil {
		t.Fatal(err)
	}
	token, err := os.ReadFile(access.TokenFile(dir, c.Pipeline, "shop"))
	if err != nil {
		t.Fatal(err)
	}

	env := map[string]string{"NATS_URL": srv.ClientURL(), "WEIR_CONTRACT": file, "WEIR_GATEWAY_TOKENS": tokens,
		"WEIR_INGEST_ADDR": "127.0.0.1:0", "WEIR_CREATE_INGRESS": "true"}
	ctx, cancel := context.WithCancel(context.Background())
	addr, done := make(chan string, 1), make(chan error, 1)
	go func() {
		done <- ingest.Run(ctx, nil, func(k string) string { return env[k] }, io.Discard, func(a string) { addr <- a })
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway: %v", err)
		}
	}()
	var url string
	select {
	case a := <-addr:
		url = "http://" + a + "/v1/events"
	case err := <-done:
		done <- nil
		t.Fatalf("the gateway did not start: %v", err)
	}
	streamtest.Run(t, srv.ClientURL(), c, filepath.Join(dir, "data"), dedup.Factories())

	ts := time.Now().Add(-time.Minute).UnixMilli()
	var body strings.Builder
	for _, tenant := range []string{"acme", "globex"} {
		fmt.Fprintf(&body, `{"tenant":%q,"id":"e-1","key":"k-1","ts":%d,"type":"bid"}`+"\n", tenant, ts)
	}
	for range 2 {
		req, err := http.NewRequest("POST", url, strings.NewReader(body.String()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		answer, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK || !strings.Contains(string(answer), `"accepted":2`) {
			t.Fatalf("POST: %s %s %v", res.Status, answer, err)
		}
	}
	stored := len(streamtest.Messages(t, js, c.Ingress.Stream))
	if stored != 2 {
		t.Errorf("the ingress holds %d events of the two tenants' two", stored)
	}
	// Whatever the ingress holds comes out of dedup, then the sink holds
	// each tenant's e-1 once: a json edge's message ID is the tenant, 0x1e
	// (%1E) and the ID.
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if _, total := sinkEvents(t, js, c); total < stored {
			return fmt.Errorf("the sink holds %d of %d events", total, stored)
		}
		return nil
	})
	if err := sinkExactlyOnce(t, js, c, map[string]bool{"acme%1Ee-1": true, "globex%1Ee-1": true}); err != nil {
		t.Fatal(err)
	}
}
