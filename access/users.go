package access

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"

	"github.com/nats-io/nkeys"
)

// User is a grant with its identity: an nkey pair, whose seed the process
// holds and whose public key the server knows.
type User struct {
	Grant
	// SeedFile holds the private seed; PublicKey is what the server's
	// configuration names.
	SeedFile, PublicKey string
}

// Files says where WriteUsers writes and what the processes see.
type Files struct {
	// Dir is where the files go.
	Dir string
	// Seen is the directory the processes find Dir's files in — a
	// container's mount of it — for the paths the .env files name; empty:
	// Dir's absolute path.
	Seen string
	// Readable writes seeds readable by every user, for processes that
	// run as another user than the one writing them (a local compose
	// stack's containers); otherwise only their owner reads them.
	Readable bool
}

// WriteUsers writes, in f.Dir, each grant's nkey seed (<name>.nk) and
// environment (<name>.env: NATS_NKEY and NATS_INBOX_PREFIX, as every weir
// process reads them), and the server's accounts block (auth.conf)
// naming every user, in its account, with its permissions, for nats.conf
// to include (Configuration). A seed already there is kept: generating
// again after a contract change keeps every process's identity.
func WriteUsers(f Files, accounts []Account, grants []Grant) ([]User, error) {
	users, err := f.eachUser(grants, func(u User, _ nkeys.KeyPair, seen func(string) string) (string, error) {
		return "NATS_NKEY=" + seen(u.Name+".nk"), nil
	})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(f.Dir, "auth.conf"), Configuration(accounts, users), 0o644); err != nil {
		return nil, err
	}
	return users, nil
}

// eachUser reads each grant's user seed in f.Dir (<name>.nk), or makes
// one, and writes the process's environment (<name>.env): the line
// identity returns — the variable naming the file it authenticates with,
// where seen says the process finds it — and NATS_INBOX_PREFIX.
func (f Files) eachUser(grants []Grant, identity func(u User, kp nkeys.KeyPair, seen func(file string) string) (string, error)) ([]User, error) {
	if err := os.MkdirAll(f.Dir, 0o755); err != nil {
		return nil, err
	}
	dir, err := f.seen()
	if err != nil {
		return nil, err
	}
	seen := func(file string) string { return path.Join(filepath.ToSlash(dir), file) }
	var users []User
	for _, g := range grants {
		u := User{Grant: g, SeedFile: filepath.Join(f.Dir, g.Name+".nk")}
		kp, err := seed(u.SeedFile, f.mode())
		if err != nil {
			return nil, err
		}
		if u.PublicKey, err = kp.PublicKey(); err != nil {
			return nil, err
		}
		line, err := identity(u, kp, seen)
		if err != nil {
			return nil, err
		}
		env := fmt.Sprintf("%s\nNATS_INBOX_PREFIX=%s\n", line, g.Inbox)
		for _, e := range g.Env {
			env += e + "\n"
		}
		if err := os.WriteFile(filepath.Join(f.Dir, g.Name+".env"), []byte(env), 0o644); err != nil {
			return nil, err
		}
		users = append(users, u)
	}
	return users, nil
}

// seen is the directory the processes find the files in.
func (f Files) seen() (string, error) {
	if f.Seen != "" {
		return f.Seen, nil
	}
	return filepath.Abs(f.Dir)
}

// mode is the seeds' and credentials' file mode.
func (f Files) mode() os.FileMode {
	if f.Readable {
		return 0o644
	}
	return 0o600
}

// seed reads the user seed in file, or makes one and writes it there,
// with mode.
func seed(file string, mode os.FileMode) (nkeys.KeyPair, error) {
	return keyPair(file, mode, nkeys.CreateUser)
}

// keyPair reads the seed in file, or makes one with create and writes it
// there, with mode.
func keyPair(file string, mode os.FileMode, create func() (nkeys.KeyPair, error)) (nkeys.KeyPair, error) {
	b, err := os.ReadFile(file)
	if err == nil {
		kp, err := nkeys.FromSeed(bytes.TrimSpace(b))
		if err != nil {
			return nil, fmt.Errorf("access: %s: %w", file, err)
		}
		return kp, os.Chmod(file, mode)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	kp, err := create()
	if err != nil {
		return nil, err
	}
	s, err := kp.Seed()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(file, append(s, '\n'), mode); err != nil {
		return nil, err
	}
	return kp, nil
}

// writeUser writes u's entry in an account's users: its nkey and its
// grant's permissions.
func writeUser(b *bytes.Buffer, u User) {
	fmt.Fprintf(b, "      # %s (%s)\n      {\n        nkey: %s\n        permissions: {\n", u.Name, u.Role, u.PublicKey)
	quoted := func(subjects []string) {
		for _, s := range subjects {
			fmt.Fprintf(b, "            %s\n", strconv.Quote(s))
		}
	}
	b.WriteString("          publish: { allow: [\n")
	quoted(u.Publish)
	if len(u.DenyPublish) > 0 {
		b.WriteString("          ], deny: [\n")
		quoted(u.DenyPublish)
	}
	b.WriteString("          ] }\n          subscribe: { allow: [\n")
	quoted(u.Subscribe)
	b.WriteString("          ] }\n")
	b.WriteString("        }\n      }\n")
}
