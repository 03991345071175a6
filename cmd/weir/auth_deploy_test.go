package main

import (
	bytespkg "bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/weirflow/weir/access"
)

// TestAuthWritesASecretPerProcess: weir auth -k8s-secrets writes, 0600,
// a Kubernetes Secret per user holding its own seed, the CA and its own
// client certificate and key — the checkpoint keys only for the operators
// and the administrator — and the servers' weir-nats with the users, the
// server's certificate and the store key; no Secret holds another user's
// seed.
func TestAuthWritesASecretPerProcess(t *testing.T) {
	out := filepath.Join(t.TempDir(), "auth")
	file := filepath.Join(out, "k8s-secrets.yaml")
	var stdout, stderr bytespkg.Buffer
	if err := run(context.Background(), []string{"auth", "-contract", "nexmark-dedup", "-out", out, "-tls-hosts", "nats",
		"-checkpoint-key", "k1", "-k8s-secrets", file}, func(string) string { return "" }, &stdout, &stderr); err != nil {
		t.Fatalf("weir auth: %v\n%s", err, stderr.String())
	}
	info, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("%s is %v, want 0600", file, info.Mode().Perm())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string][]string{}
	dec := yaml.NewDecoder(bytespkg.NewReader(b))
	for {
		var doc struct {
			Kind     string                `yaml:"kind"`
			Metadata struct{ Name string } `yaml:"metadata"`
			Data     map[string]string     `yaml:"data"`
		}
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if doc.Kind != "Secret" {
			t.Fatalf("a %s in %s", doc.Kind, file)
		}
		for k, v := range doc.Data {
			if _, err := base64.StdEncoding.DecodeString(v); err != nil {
				t.Errorf("%s: %s is not base64: %v", doc.Metadata.Name, k, err)
			}
			secrets[doc.Metadata.Name] = append(secrets[doc.Metadata.Name], k)
		}
		slices.Sort(secrets[doc.Metadata.Name])
	}
	want := map[string][]string{
		"weir-nats": {"auth.conf", "ca.pem", "server-key.pem", "server.pem", "store.key"},
	}
	for _, role := range []string{"dedup", access.RoleAdmin, access.RoleCoordinator, access.RoleProducer} {
		user := access.UserName("nexmark", role)
		keys := []string{user + ".nk", "ca.pem", "client-key.pem", "client.pem"}
		if role == "dedup" || role == access.RoleAdmin {
			keys = append(keys, "checkpoint.keys")
		}
		slices.Sort(keys)
		want["weir-"+user] = keys
	}
	want["weir-weir-monitor"] = []string{"ca.pem", "client-key.pem", "client.pem", "weir-monitor.nk"}
	want["weir-ingress-nexmark-admin"] = []string{"ca.pem", "client-key.pem", "client.pem", "ingress-nexmark-admin.nk"}
	for name, keys := range want {
		if !slices.Equal(secrets[name], keys) {
			t.Errorf("Secret %s holds %v, want %v", name, secrets[name], keys)
		}
	}
	for name, keys := range secrets {
		if _, ok := want[name]; !ok {
			t.Errorf("an unexpected Secret %s (%v)", name, keys)
		}
		for _, k := range keys {
			if strings.HasSuffix(k, ".nk") && name != "weir-"+strings.TrimSuffix(k, ".nk") {
				t.Errorf("Secret %s holds another user's seed %s", name, k)
			}
		}
	}
}
