package access

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// WriteAccounts is WriteUsers in NATS's decentralized form: an operator
// and accounts — their seeds in f.Dir, kept when there — and, per grant, a
// user JWT its account signs with the grant's permissions, written with
// the user's seed as <name>.creds (NATS_CREDS in <name>.env). Each
// account's JWT carries what it shares (Accounts): an export needs an
// activation token, which the exporting account signs for each account it
// names and the importing account's JWT carries, so no other account can
// import it. accounts.conf is what the server's configuration includes:
// the operator, and a memory resolver holding the accounts, the system
// account among them. The server then trusts whatever the accounts sign —
// new users need no server change.
func WriteAccounts(f Files, accounts []Account, grants []Grant) ([]User, error) {
	dir := f.Dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	op, err := keyPair(filepath.Join(dir, "operator.nk"), 0o600, nkeys.CreateOperator)
	if err != nil {
		return nil, err
	}
	// The server's own account, which JetStream needs.
	sys, err := keyPair(filepath.Join(dir, "system.nk"), 0o600, nkeys.CreateAccount)
	if err != nil {
		return nil, err
	}
	opPub, err := op.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("access: operator: %w", err)
	}
	sysPub, err := sys.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("access: system account: %w", err)
	}
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "weir"
	oc.SystemAccount = sysPub
	opJWT, err := oc.Encode(op)
	if err != nil {
		return nil, fmt.Errorf("access: operator: %w", err)
	}
	keys := map[string]nkeys.KeyPair{}
	pubs := map[string]string{}
	for _, a := range accounts {
		kp, err := keyPair(filepath.Join(dir, "account-"+a.Name+".nk"), 0o600, nkeys.CreateAccount)
		if err != nil {
			return nil, err
		}
		keys[a.Name] = kp
		if pubs[a.Name], err = kp.PublicKey(); err != nil {
			return nil, fmt.Errorf("access: account %s: %w", a.Name, err)
		}
	}
	kind := func(stream bool) jwt.ExportType {
		if stream {
			return jwt.Stream
		}
		return jwt.Service
	}
	sysJWT, err := encode(jwt.NewAccountClaims(sysPub), "SYS", op)
	if err != nil {
		return nil, err
	}
	preload := []string{fmt.Sprintf("  %s: %s", sysPub, sysJWT)}
	for _, a := range accounts {
		ac := jwt.NewAccountClaims(pubs[a.Name])
		if a.Name != MonitorAccount {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
			if a.MaxStore > 0 {
				ac.Limits.JetStreamLimits.DiskStorage = a.MaxStore
			}
		}
		for _, e := range a.Exports {
			ac.Exports.Add(&jwt.Export{Subject: jwt.Subject(e.Subject), Type: kind(e.Stream), TokenReq: true})
		}
		for _, i := range a.Imports {
			act := jwt.NewActivationClaims(pubs[a.Name])
			act.ImportSubject, act.ImportType = jwt.Subject(i.Subject), kind(i.Stream)
			token, err := act.Encode(keys[i.Account])
			if err != nil {
				return nil, fmt.Errorf("access: account %s: activation of %s: %w", a.Name, i.Subject, err)
			}
			ac.Imports.Add(&jwt.Import{Account: pubs[i.Account], Subject: jwt.Subject(i.Subject), LocalSubject: jwt.RenamingSubject(i.As), Type: kind(i.Stream), Token: token})
		}
		s, err := encode(ac, a.Name, op)
		if err != nil {
			return nil, err
		}
		preload = append(preload, fmt.Sprintf("  %s: %s", pubs[a.Name], s))
	}
	users, err := f.eachUser(grants, func(u User, kp nkeys.KeyPair, seen func(string) string) (string, error) {
		acct, ok := keys[u.Account]
		if !ok {
			return "", fmt.Errorf("access: user %s is of account %q, which is not among the accounts", u.Name, u.Account)
		}
		uc := jwt.NewUserClaims(u.PublicKey)
		uc.Name = u.Name
		uc.Pub.Allow.Add(u.Publish...)
		uc.Pub.Deny.Add(u.DenyPublish...)
		uc.Sub.Allow.Add(u.Subscribe...)
		userJWT, err := uc.Encode(acct)
		if err != nil {
			return "", fmt.Errorf("access: user %s: %w", u.Name, err)
		}
		s, err := kp.Seed()
		if err != nil {
			return "", err
		}
		creds, err := jwt.FormatUserConfig(userJWT, s)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, u.Name+".creds"), creds, f.mode()); err != nil {
			return "", err
		}
		return "NATS_CREDS=" + seen(u.Name+".creds"), nil
	})
	if err != nil {
		return nil, err
	}
	conf := fmt.Sprintf("# Written by weir auth -jwt: the operator weir, an account per pipeline,\n# per ingress stream and for the monitor, the system account, and a\n# memory resolver. Include it from nats.conf. A user's JWT carries its\n# permissions in the CONNECT line, longer than the default 4 KiB.\nmax_control_line: 65536\noperator: %s\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n%s\n}\n",
		opJWT, sysPub, strings.Join(preload, "\n"))
	if err := os.WriteFile(filepath.Join(dir, "accounts.conf"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return users, nil
}

// encode is the JWT of account ac, named name, signed by the operator.
func encode(ac *jwt.AccountClaims, name string, op nkeys.KeyPair) (string, error) {
	ac.Name = name
	s, err := ac.Encode(op)
	if err != nil {
		return "", fmt.Errorf("access: account %s: %w", name, err)
	}
	return s, nil
}
