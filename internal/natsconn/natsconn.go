// Package natsconn is what a weir process presents when it connects to
// NATS: who it is — a credentials file, an nkey seed, or a user and
// password — and the TLS it speaks. Every service, the coordinator, the
// dispatcher, the ingest gateway and the weir commands take the same flags
// and variables (Auth.Flags), named as the nats CLI names them.
package natsconn

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/weirflow/weir/internal/envflag"
)

// Auth is how a process proves who it is to NATS, and the TLS it speaks.
// The zero value connects as the server's default user, in the clear
// unless the URL says tls://.
type Auth struct {
	// Creds is a credentials file — a user JWT and its nkey seed, as
	// decentralized authentication deploys them (NATS_CREDS).
	Creds string
	// NKey is a file holding a user's nkey seed (NATS_NKEY).
	NKey string
	// User and Password are a user of the server's configuration
	// (NATS_USER, NATS_PASSWORD).
	User, Password string
	// CA is the certificate file (PEM) the server's certificate must chain
	// to; setting it turns TLS on (NATS_CA).
	CA string
	// Cert and Key are the client's certificate and its key (PEM), for a
	// server that verifies its clients (mutual TLS; NATS_CERT, NATS_KEY).
	Cert, Key string
	// InboxPrefix starts the subjects replies come back on, in place of
	// _INBOX: a user whose permissions let it subscribe to its own prefix
	// only reads no other process's replies (NATS_INBOX_PREFIX).
	InboxPrefix string
}

// flags are a's flags: the field each sets, its name, its variable and
// its usage.
func (a *Auth) flags() []struct {
	p                *string
	name, env, usage string
} {
	return []struct {
		p                *string
		name, env, usage string
	}{
		{&a.Creds, "creds", "NATS_CREDS", "NATS credentials file: a user JWT and its nkey seed"},
		{&a.NKey, "nkey", "NATS_NKEY", "file holding a NATS user's nkey seed"},
		{&a.User, "user", "NATS_USER", "NATS user name"},
		{&a.Password, "password", "NATS_PASSWORD", "NATS user's password; prefer the variable, which no process listing shows"},
		{&a.CA, "tls-ca", "NATS_CA", "CA certificate (PEM) the server's certificate must chain to; turns TLS on"},
		{&a.Cert, "tls-cert", "NATS_CERT", "client certificate (PEM), for a server that verifies its clients"},
		{&a.Key, "tls-key", "NATS_KEY", "the client certificate's key (PEM)"},
		{&a.InboxPrefix, "inbox-prefix", "NATS_INBOX_PREFIX", "prefix of the subjects replies come back on, instead of _INBOX (weir auth gives each process its own)"},
	}
}

// Flags defines the flags that set a's fields, each defaulting to its
// variable.
func (a *Auth) Flags(fs *envflag.Set) {
	for _, f := range a.flags() {
		fs.String(f.p, f.name, f.env, "", f.usage)
	}
}

// StdFlags defines the same flags on a standard flag set, for a command
// that reads the environment itself (Env names each flag's variable).
func (a *Auth) StdFlags(fs *flag.FlagSet) {
	for _, f := range a.flags() {
		fs.StringVar(f.p, f.name, "", f.usage)
	}
}

// Env is the variable of flag name, if it is one of Auth's.
func Env(name string) (string, bool) {
	for _, f := range new(Auth).flags() {
		if f.name == name {
			return f.env, true
		}
	}
	return "", false
}

// Validate reports every contradiction and every file that cannot be read.
func (a Auth) Validate() error {
	var errs []error
	ids := 0
	for _, set := range []bool{a.Creds != "", a.NKey != "", a.User != ""} {
		if set {
			ids++
		}
	}
	if ids > 1 {
		errs = append(errs, errors.New("natsconn: give one identity: a credentials file (-creds, NATS_CREDS), an nkey seed (-nkey, NATS_NKEY) or a user (-user, NATS_USER)"))
	}
	if a.Password != "" && a.User == "" {
		errs = append(errs, errors.New("natsconn: a password (NATS_PASSWORD) needs a user (-user, NATS_USER)"))
	}
	if (a.Cert == "") != (a.Key == "") {
		errs = append(errs, errors.New("natsconn: a client certificate needs both -tls-cert (NATS_CERT) and -tls-key (NATS_KEY)"))
	}
	for _, f := range []struct{ path, flag, env string }{
		{a.Creds, "creds", "NATS_CREDS"}, {a.NKey, "nkey", "NATS_NKEY"},
		{a.CA, "tls-ca", "NATS_CA"}, {a.Cert, "tls-cert", "NATS_CERT"}, {a.Key, "tls-key", "NATS_KEY"},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			errs = append(errs, fmt.Errorf("natsconn: -%s (%s): %w", f.flag, f.env, err))
		}
	}
	return errors.Join(errs...)
}

// Options are the nats.Connect options that present a.
func (a Auth) Options() ([]nats.Option, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	var opts []nats.Option
	switch {
	case a.Creds != "":
		opts = append(opts, nats.UserCredentials(a.Creds))
	case a.NKey != "":
		o, err := nats.NkeyOptionFromSeed(a.NKey)
		if err != nil {
			return nil, fmt.Errorf("natsconn: -nkey (NATS_NKEY) %s: %w", a.NKey, err)
		}
		opts = append(opts, o)
	case a.User != "":
		opts = append(opts, nats.UserInfo(a.User, a.Password))
	}
	if a.CA != "" {
		opts = append(opts, nats.RootCAs(a.CA))
	}
	if a.Cert != "" {
		opts = append(opts, nats.ClientCert(a.Cert, a.Key))
	}
	if a.InboxPrefix != "" {
		// A random token of this connection's own after the user's
		// prefix: its inboxes — where its JetStream pulls and API
		// replies arrive — share nothing another process could learn
		// and guess from (a nuid's prefix, seen in one of them, and its
		// counting step would do). The user's grant, <prefix>.>, covers it.
		opts = append(opts, nats.CustomInboxPrefix(a.InboxPrefix+"."+randomToken()))
	}
	return opts, nil
}

// Connect connects to url presenting a, with opts after a's own.
func (a Auth) Connect(url string, opts ...nats.Option) (*nats.Conn, error) {
	own, err := a.Options()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(url, append(own, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect %s%s: %w", url, a.describe(), err)
	}
	return nc, nil
}

// describe names, for an error, how the connection presented itself.
func (a Auth) describe() string {
	var s string
	switch {
	case a.Creds != "":
		s = " with credentials " + a.Creds
	case a.NKey != "":
		s = " with the nkey seed in " + a.NKey
	case a.User != "":
		s = " as user " + a.User
	}
	if a.CA != "" {
		s += " over TLS (CA " + a.CA + ")"
	}
	return s
}

// LogValue logs which ways of authenticating are set — the files, never
// the password.
func (a Auth) LogValue() slog.Value {
	var attrs []slog.Attr
	for _, f := range []struct{ k, v string }{{"creds", a.Creds}, {"nkey", a.NKey}, {"user", a.User}, {"tls_ca", a.CA}, {"tls_cert", a.Cert}} {
		if f.v != "" {
			attrs = append(attrs, slog.String(f.k, f.v))
		}
	}
	if a.Password != "" {
		attrs = append(attrs, slog.String("password", "set"))
	}
	return slog.GroupValue(attrs...)
}

// DeniedError is a permissions violation the server reported: the
// process's credentials do not allow a publish or a subscription it made.
// A request denied so is never answered; the process stops saying why
// instead of waiting (Guard).
type DeniedError struct {
	Err error
	// As is how the process presented itself.
	As string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("NATS denied the connection%s: %v: its credentials do not allow what this process does (weir auth writes each process's own)", e.As, e.Err)
}

func (e *DeniedError) Unwrap() error { return e.Err }

// Guard runs f with a context that ends when watch is given a permissions
// violation — f installs watch as its connection's error handler (or calls
// it from its own) — and then returns a *DeniedError, unless what f
// returned wraps it and says more (a stream weir provision makes).
func (a Auth) Guard(ctx context.Context, f func(ctx context.Context, watch func(error)) error) error {
	return a.guard(ctx, f, func(error) bool { return true })
}

// GuardAnswering is Guard for a process that answers requests (the
// service framework's $SRV pings, a status endpoint): a denied publish
// other than a JetStream API request does not end it. An answer goes to
// the reply subject the asker named, and anyone who may ping the process
// can name one it may not publish to — that must not stop it. What the
// process publishes itself and is denied fails on its own: a JetStream
// publish is never acknowledged, and says so.
func (a Auth) GuardAnswering(ctx context.Context, f func(ctx context.Context, watch func(error)) error) error {
	return a.guard(ctx, f, func(err error) bool {
		s, ok := DeniedPublish(err)
		return !ok || strings.HasPrefix(s, "$JS.API.")
	})
}

func (a Auth) guard(ctx context.Context, f func(ctx context.Context, watch func(error)) error, fatal func(error) bool) error {
	gctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	err := f(gctx, func(err error) {
		if errors.Is(err, nats.ErrPermissionViolation) && fatal(err) {
			cancel(&DeniedError{Err: err, As: a.describe()})
		}
	})
	var denied *DeniedError
	if ctx.Err() == nil && errors.As(context.Cause(gctx), &denied) {
		if errors.As(err, new(*DeniedError)) {
			return err
		}
		return denied
	}
	return err
}

// Identity is who nc presented itself as — what the server authenticated
// it by: "nkey <public key>", "user <name>", "jwt <subject> (<name>)" or
// "certificate <common name>"; empty when it presented nothing. It is the
// client's account of itself: a record carrying it is as trustworthy as
// the subjects its writers may publish to.
func Identity(nc *nats.Conn) string {
	if nc == nil {
		return ""
	}
	o := nc.Opts
	switch {
	case o.Nkey != "":
		return "nkey " + o.Nkey
	case o.User != "":
		return "user " + o.User
	case o.UserJWT != nil:
		token, err := o.UserJWT()
		if err != nil {
			return "jwt"
		}
		claims, err := jwt.DecodeUserClaims(token)
		if err != nil {
			return "jwt"
		}
		return fmt.Sprintf("jwt %s (%s)", claims.Subject, claims.Name)
	case o.TLSCertCB != nil: // nats.ClientCert
		if c, err := o.TLSCertCB(); err == nil && len(c.Certificate) > 0 {
			if leaf, err := x509.ParseCertificate(c.Certificate[0]); err == nil {
				return "certificate " + leaf.Subject.CommonName
			}
		}
	}
	return ""
}

// DeniedPublish returns the subject a permissions violation reports a
// publish to was denied, as the server words it; ok is false for any
// other error. It lets a process that expects a denial — a request it
// makes through a library that it may not make, and does without — tell
// it from one that must stop it.
func DeniedPublish(err error) (subject string, ok bool) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return "", false
	}
	const lead = "Permissions Violation for Publish to "
	msg := err.Error()
	i := strings.Index(msg, lead)
	if i < 0 {
		return "", false
	}
	s, err := strconv.Unquote(strings.TrimSpace(msg[i+len(lead):]))
	if err != nil {
		return "", false
	}
	return s, true
}

// Published reports whether m was published to the subject its
// subscription names, rather than delivered there by a push consumer of a
// stream: a consumer's deliver subject is checked against no user's
// permissions, so anyone who may make a consumer of a stream holding a
// message of theirs could deliver it to a control subject they may not
// publish to. A delivered message keeps the subject it was stored under.
// For subscriptions to one literal subject.
func Published(m *nats.Msg) bool {
	return m.Sub == nil || m.Subject == m.Sub.Subject
}
