package natsconn_test

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/weirflow/weir/pkg/envflag"
	"github.com/weirflow/weir/pkg/natsconn"
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
