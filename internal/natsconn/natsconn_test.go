package natsconn_test

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/weirflow/weir/internal/envflag"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/pkg/natstest"
)

// TestAuthRefusesContradictions: two identities, a password without a
// user, half a client certificate and a file that is not there are each
// refused, naming the flag and its variable.
func TestAuthRefusesContradictions(t *testing.T) {
	dir := t.TempDir()
	certs, err := natsconn.WriteCertificates(dir, []string{"localhost"}, "c", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		auth natsconn.Auth
		want string
	}{
		{natsconn.Auth{Creds: certs.CA, User: "u"}, "give one identity"},
		{natsconn.Auth{Password: "p"}, "needs a user"},
		{natsconn.Auth{Cert: certs.Client}, "needs both -tls-cert (NATS_CERT) and -tls-key (NATS_KEY)"},
		{natsconn.Auth{CA: filepath.Join(dir, "missing.pem")}, "-tls-ca (NATS_CA)"},
	} {
		err := c.auth.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.auth, err, c.want)
		}
		if _, err := c.auth.Options(); err == nil {
			t.Errorf("%+v: Options accepted what Validate refuses", c.auth)
		}
	}
	if err := (natsconn.Auth{User: "u", Password: "p", CA: certs.CA, Cert: certs.Client, Key: certs.ClientKey}).Validate(); err != nil {
		t.Errorf("a user over mutual TLS: %v", err)
	}
}

// TestAuthFlagsReadTheNATSVariables: the flags default to the variables
// the nats CLI uses, and a flag wins over its variable.
func TestAuthFlagsReadTheNATSVariables(t *testing.T) {
	env := map[string]string{"NATS_USER": "env-user", "NATS_PASSWORD": "pw", "NATS_CA": "ca.pem"}
	var a natsconn.Auth
	fs := envflag.New("x", func(k string) string { return env[k] }, io.Discard)
	a.Flags(fs)
	if err := fs.Parse([]string{"-user", "flag-user"}); err != nil {
		t.Fatal(err)
	}
	if a.User != "flag-user" || a.Password != "pw" || a.CA != "ca.pem" {
		t.Errorf("got %+v", a)
	}
	if env, ok := natsconn.Env("tls-key"); !ok || env != "NATS_KEY" {
		t.Errorf("Env(tls-key) = %q, %t", env, ok)
	}
}

// TestIdentityNamesWhatWasPresented: an nkey, a user or a client
// certificate is named as the connection presents it.
func TestIdentityNamesWhatWasPresented(t *testing.T) {
	dir := t.TempDir()
	certs, err := natsconn.WriteCertificates(dir, []string{"localhost"}, "weir-admin", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := (natsconn.Auth{CA: certs.CA, Cert: certs.Client, Key: certs.ClientKey}).Options()
	if err != nil {
		t.Fatal(err)
	}
	o := nats.GetDefaultOptions()
	for _, f := range opts {
		if err := f(&o); err != nil {
			t.Fatal(err)
		}
	}
	nc := &nats.Conn{Opts: o}
	if got := natsconn.Identity(nc); got != "certificate weir-admin" {
		t.Errorf("a client certificate: %q", got)
	}
	nc.Opts.User = "ops"
	if got := natsconn.Identity(nc); got != "user ops" {
		t.Errorf("a user: %q", got)
	}
	if got := natsconn.Identity(nil); got != "" {
		t.Errorf("no connection: %q", got)
	}
}

// TestServersRouteOverMutualTLS: two servers whose cluster block names the
// certificates weir auth writes route to each other — over mutual TLS,
// which NATS always asks of routes, each server the other's client.
func TestServersRouteOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	certs, err := natsconn.WriteCertificates(filepath.Join(dir, "tls"), []string{"localhost", "127.0.0.1"}, "c", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ports := make([]int, 2)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	var servers []*natstest.Server
	for i := range ports {
		conf := filepath.Join(dir, fmt.Sprintf("n%d.conf", i))
		text := fmt.Sprintf(`cluster {
  name: tls-routes
  listen: 127.0.0.1:%d
  routes: [nats-route://127.0.0.1:%d]
  tls { cert_file: %q, key_file: %q, ca_file: %q }
}
`, ports[i], ports[1-i], certs.Server, certs.ServerKey, certs.CA)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := natstest.Start(natstest.Options{Dir: filepath.Join(dir, fmt.Sprintf("n%d", i)), ServerName: fmt.Sprintf("n%d", i), ConfigFile: conf})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Shutdown)
		servers = append(servers, s)
	}
	deadline := time.Now().Add(20 * time.Second)
	for servers[0].NumRoutes() == 0 || servers[1].NumRoutes() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no route over TLS after 20 s: %d and %d routes", servers[0].NumRoutes(), servers[1].NumRoutes())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
