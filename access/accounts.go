package access

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// WriteAccounts is WriteUsers in NATS's decentralized form: an operator
// and an account — their seeds in f.Dir, kept when there — and, per grant,
// a user JWT the account signs with the grant's permissions, written with
// the user's seed as <name>.creds (NATS_CREDS in <name>.env). accounts.conf
// is what the server's configuration includes: the operator, and a memory
// resolver holding the account, with JetStream enabled. The server then
// trusts whatever the account signs — new users need no server change.
func WriteAccounts(f Files, grants []Grant) ([]User, error) {
	dir := f.Dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	op, err := keyPair(filepath.Join(dir, "operator.nk"), 0o600, nkeys.CreateOperator)
	if err != nil {
		return nil, err
	}
	acct, err := keyPair(filepath.Join(dir, "account.nk"), 0o600, nkeys.CreateAccount)
	if err != nil {
		return nil, err
	}
	// The server's own account, which JetStream needs.
	sys, err := keyPair(filepath.Join(dir, "system.nk"), 0o600, nkeys.CreateAccount)
	if err != nil {
		return nil, err
	}
	opPub, _ := op.PublicKey()
	acctPub, _ := acct.PublicKey()
	sysPub, _ := sys.PublicKey()
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "weir"
	oc.SystemAccount = sysPub
	opJWT, err := oc.Encode(op)
	if err != nil {
		return nil, fmt.Errorf("access: operator: %w", err)
	}
	ac := jwt.NewAccountClaims(acctPub)
	ac.Name = "weir"
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	acctJWT, err := ac.Encode(op)
	if err != nil {
		return nil, fmt.Errorf("access: account: %w", err)
	}
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	sysJWT, err := sc.Encode(op)
	if err != nil {
		return nil, fmt.Errorf("access: system account: %w", err)
	}
	users, err := f.eachUser(grants, func(u User, kp nkeys.KeyPair, seen func(string) string) (string, error) {
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
	conf := fmt.Sprintf("# Written by weir auth -jwt: the operator weir, its account weir with\n# JetStream, the system account, and a memory resolver. Include it\n# from nats.conf. A user's JWT carries its permissions in the CONNECT\n# line, longer than the default 4 KiB.\nmax_control_line: 65536\noperator: %s\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n  %s: %s\n  %s: %s\n}\n",
		opJWT, sysPub, acctPub, acctJWT, sysPub, sysJWT)
	if err := os.WriteFile(filepath.Join(dir, "accounts.conf"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return users, nil
}
