package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/internal/envflag"
)

// deploySecrets are weir auth's flags for what a deployment needs beside
// the users: a client certificate per process (the server verifies its
// clients), the key of JetStream's encryption at rest, and the
// Kubernetes Secrets holding them, one per process.
type deploySecrets struct {
	clientCerts bool
	storeKey    bool
	k8s         string
}

func deploySecretFlags(fs *envflag.Set) *deploySecrets {
	d := &deploySecrets{}
	fs.Bool(&d.clientCerts, "client-certs", "WEIR_AUTH_CLIENT_CERTS", false, "also sign, with <out>/tls's CA, a client certificate per user (tls/<user>.pem, key tls/<user>-key.pem), for a server that verifies its clients (verify: true)")
	fs.Bool(&d.storeKey, "store-key", "WEIR_AUTH_STORE_KEY", false, "also write <out>/nats-store.env, the server's "+access.StoreKeyVar+": the key JetStream encrypts its store with (kept when there)")
	fs.String(&d.k8s, "k8s-secrets", "WEIR_AUTH_KUBERNETES_SECRETS", "", "also write this file: a Kubernetes Secret per process, weir-<user> (its seed, the CA, its client certificate and, for an operator or the admin, the checkpoint keys), and weir-nats for the servers; implies -client-certs and -store-key")
	return d
}

// write writes the secrets the flags ask for, in dir, for users.
func (d *deploySecrets) write(dir string, users []access.User, validity time.Duration, stdout io.Writer) error {
	if d.k8s != "" {
		d.clientCerts, d.storeKey = true, true
	}
	tls := filepath.Join(dir, "tls")
	if d.clientCerts {
		var names []string
		for _, u := range users {
			names = append(names, u.Name)
		}
		if err := access.WriteClientCertificates(tls, names, validity); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "TLS: a client certificate per user in %s (<user>.pem, <user>-key.pem): NATS_CERT, NATS_KEY.\n", tls)
	}
	var storeKey string
	if d.storeKey {
		file := filepath.Join(dir, "nats-store.env")
		var err error
		if storeKey, err = access.WriteStoreKey(file); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "JetStream's encryption key is in %s: the server's environment (jetstream { cipher, key: $%s }).\n", file, access.StoreKeyVar)
	}
	if d.k8s == "" {
		return nil
	}
	var out []byte
	server, err := access.K8sSecret("weir-nats", map[string]string{"app.kubernetes.io/name": "nats"}, []access.SecretFile{
		{Key: "auth.conf", File: filepath.Join(dir, "auth.conf")},
		{Key: "ca.pem", File: filepath.Join(tls, "ca.pem")},
		{Key: "server.pem", File: filepath.Join(tls, "server.pem")},
		{Key: "server-key.pem", File: filepath.Join(tls, "server-key.pem")},
		{Key: "store.key", Data: []byte(storeKey)},
	})
	if err != nil {
		return err
	}
	out = append(out, server...)
	keys := filepath.Join(dir, "checkpoint.keys")
	_, err = os.Stat(keys)
	haveKeys := err == nil
	for _, u := range users {
		files := []access.SecretFile{
			{Key: u.Name + ".nk", File: u.SeedFile},
			{Key: "ca.pem", File: filepath.Join(tls, "ca.pem")},
			{Key: "client.pem", File: filepath.Join(tls, u.Name+".pem")},
			{Key: "client-key.pem", File: filepath.Join(tls, u.Name+"-key.pem")},
		}
		// The checkpoint keys go to who seals and opens checkpoints: the
		// operators and the admin, who runs replays.
		operator := !slices.Contains([]string{access.RoleCoordinator, access.RoleProducer, access.RoleDispatcher, access.RoleMonitor, access.RoleIngressAdmin}, u.Role)
		if haveKeys && operator {
			files = append(files, access.SecretFile{Key: "checkpoint.keys", File: keys})
		}
		if u.Role == access.RoleProducer {
			// The ingest gateway runs as its pipeline's producer: the
			// hashes of the producers' tokens it admits (-producers).
			tokens := access.TokensFile(dir, strings.TrimSuffix(u.Name, "-"+u.Role))
			if _, err := os.Stat(tokens); err == nil {
				files = append(files, access.SecretFile{Key: "gateway.tokens", File: tokens})
			}
		}
		s, err := access.K8sSecret("weir-"+u.Name, map[string]string{"weir.io/user": u.Name}, files)
		if err != nil {
			return err
		}
		out = append(out, s...)
	}
	if err := os.WriteFile(d.k8s, out, 0o600); err != nil {
		return err
	}
	if err := os.Chmod(d.k8s, 0o600); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Kubernetes: a Secret per process and weir-nats in %s (kubectl apply -n <ns> -f %s).\n", d.k8s, d.k8s)
	return nil
}
