package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/micro"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/natstest"
)

func TestMicro(t *testing.T) {
	srv := natstest.Run(t)
	nc := srv.Connect(t)
	for _, c := range []struct{ name, instance string }{
		{"weir-q7-key", "q7-0"},
		{"weir-q7-max", "q7-0"},
		{"weir-dedup", "dedup-1"},
		{"weir-nexmark-gen", ""},
	} {
		md := map[string]string{}
		if c.instance != "" {
			md["instance"] = c.instance
		}
		svc, err := micro.AddService(nc, micro.Config{Name: c.name, Version: "0.0.1", Metadata: md})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = svc.Stop() })
	}
	// The services' subscriptions must reach the server before another
	// connection's request can find them.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) func(string) string {
		return func(k string) string { return m[k] }
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want int
		msg  string
	}{
		{"both operators", []string{"micro", "weir-q7-key", "weir-q7-max"}, map[string]string{"WEIR_INSTANCE": "q7-0"}, healthy, "micro ok"},
		{"no instance filter", []string{"micro", "weir-dedup"}, nil, healthy, "micro ok"},
		{"service without instance metadata", []string{"micro", "weir-nexmark-gen"}, map[string]string{"WEIR_INSTANCE": "gen-0"}, healthy, "micro ok"},
		{"other instance", []string{"-timeout", "300ms", "micro", "weir-dedup"}, map[string]string{"WEIR_INSTANCE": "dedup-0"}, unhealthy, "[dedup-1]"},
		{"one missing", []string{"-timeout", "300ms", "micro", "weir-q7-key", "weir-q11-key"}, nil, unhealthy, "no service weir-q11-key is registered"},
		{"flag beats env", []string{"-instance", "dedup-1", "micro", "weir-dedup"}, map[string]string{"WEIR_INSTANCE": "dedup-0"}, healthy, "micro ok"},
		{"no server", []string{"-nats", "nats://127.0.0.1:1", "-timeout", "300ms", "micro", "weir-dedup"}, nil, unhealthy, "connect"},
		{"no names", []string{"micro"}, nil, usage, "usage"},
		{"bad mode", []string{"tcp", "x"}, nil, usage, "unknown mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := map[string]string{"NATS_URL": srv.ClientURL()}
			for k, v := range tc.env {
				e[k] = v
			}
			var out bytes.Buffer
			got := run(context.Background(), tc.args, env(e), &out, &out)
			if got != tc.want || !strings.Contains(out.String(), tc.msg) {
				t.Fatalf("run(%q) = %d, %q; want %d and %q", tc.args, got, out.String(), tc.want, tc.msg)
			}
		})
	}
}

func TestHTTP(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"status":"ok"}`)) })
	mux.HandleFunc("/down", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"status":"unavailable"}`, http.StatusServiceUnavailable)
	})
	hs := httptest.NewServer(mux)
	defer hs.Close()
	getenv := func(string) string { return "" }
	for path, want := range map[string]int{"/healthz": healthy, "/down": unhealthy, "/missing": unhealthy} {
		var out bytes.Buffer
		if got := run(context.Background(), []string{"http", hs.URL + path}, getenv, &out, &out); got != want {
			t.Errorf("GET %s: exit %d (%q), want %d", path, got, out.String(), want)
		}
	}
	var out bytes.Buffer
	if got := run(context.Background(), []string{"http"}, getenv, &out, &out); got != usage {
		t.Errorf("http without URL: exit %d, want %d", got, usage)
	}
}

func TestOperators(t *testing.T) {
	const contract = "../../contracts/nexmark-q5.yaml"
	c, err := contracts.Load(contract)
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.Run(t)
	nc := srv.Connect(t)
	var svcs []micro.Service
	for _, op := range c.Operators {
		if op.Service != "nexmark-q5" {
			continue
		}
		svc, err := micro.AddService(nc, micro.Config{Name: "weir-" + op.ID, Version: "0.0.1", Metadata: map[string]string{"instance": "q5-0"}})
		if err != nil {
			t.Fatal(err)
		}
		svcs = append(svcs, svc)
	}
	if len(svcs) < 2 {
		t.Fatalf("contract %s assigns %d operators to nexmark-q5; the test wants two or more", contract, len(svcs))
	}
	// The services' subscriptions reach the server before the check asks
	// for them on a connection of its own.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"NATS_URL": srv.ClientURL(), "WEIR_CONTRACT": contract, "WEIR_INSTANCE": "q5-0"}
	check := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := run(context.Background(), append([]string{"-timeout", "500ms"}, args...), func(k string) string { return env[k] }, &out, &out)
		return code, out.String()
	}
	if code, out := check("operators", "nexmark-q5"); code != healthy {
		t.Fatalf("all operators registered: exit %d: %s", code, out)
	}
	if code, out := check("operators", "nexmark-q11"); code != unhealthy || !strings.Contains(out, "assigns no operator to service nexmark-q11") {
		t.Fatalf("service without operators: exit %d: %s", code, out)
	}
	last := svcs[len(svcs)-1]
	lastName := last.Info().Name
	if err := last.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if code, out := check("operators", "nexmark-q5"); code != unhealthy || !strings.Contains(out, lastName) {
		t.Fatalf("%s stopped: exit %d: %s", lastName, code, out)
	}
	// WEIR_OPERATOR names the one operator this container runs.
	env["WEIR_OPERATOR"] = strings.TrimPrefix(svcs[0].Info().Name, "weir-")
	if code, out := check("operators", "nexmark-q5"); code != healthy {
		t.Fatalf("WEIR_OPERATOR=%s: exit %d: %s", env["WEIR_OPERATOR"], code, out)
	}
	delete(env, "WEIR_OPERATOR")
	delete(env, "WEIR_CONTRACT")
	if code, out := check("operators", "nexmark-q5"); code != unhealthy || !strings.Contains(out, "WEIR_CONTRACT") {
		t.Fatalf("no contract: exit %d: %s", code, out)
	}
}
