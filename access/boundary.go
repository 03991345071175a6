package access

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/pkg/ingress"
)

// MonitorAccount is the deployment monitor's account (Monitor).
const MonitorAccount = "monitor"

// Account is a NATS account of a deployment. Accounts are NATS's wall: a
// stream's configuration — its republish, its sources, a consumer's
// deliveries — acts with no user's permissions, but only within its
// account. So each pipeline has an account of its own, named as the
// pipeline, holding its processes' users and every stream and bucket it
// has; each ingress stream has one (ingress.Account), holding its
// producers and its administrator; the monitor has one. An account sees
// of another only what that one exports to it by name, and imports.
type Account struct {
	Name    string
	Exports []Export
	Imports []Import
	// MaxStore is the JetStream file storage, in bytes, the account may
	// use; 0 sets no limit. Without one, a pipeline writing large records
	// to its own edge can fill the server's storage and stop every other
	// account's writes.
	MaxStore int64
}

// LimitStorage gives every account of a pipeline or an ingress (not the
// monitor's, which stores nothing) at most bytes of JetStream file
// storage.
func LimitStorage(accounts []Account, bytes int64) {
	for i := range accounts {
		if accounts[i].Name != MonitorAccount {
			accounts[i].MaxStore = bytes
		}
	}
}

// ParseSize reads a size as weir auth takes it: a number of bytes, with
// an optional unit K, M, G or T (powers of 1024; KiB, MB and the like
// read the same).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	upper := strings.ToUpper(t)
	unit := int64(1)
	for _, u := range []struct {
		suffix string
		n      int64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if i := strings.Index(upper, u.suffix); i > 0 {
			if rest := upper[i:]; rest == u.suffix || rest == u.suffix+"B" || rest == u.suffix+"IB" {
				t, unit = strings.TrimSpace(t[:i]), u.n
				break
			}
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("access: %q is not a size (a number of bytes, with K, M, G or T)", s)
	}
	return n * unit, nil
}

// Export shares a subject with the accounts To: a service — requests to it
// are answered in the exporting account — or a stream, whose messages are
// delivered to them.
type Export struct {
	Subject string
	Stream  bool
	To      []string
}

// Import takes Subject from Account, seen in the importing account as As
// (empty: as Subject).
type Import struct {
	Account, Subject, As string
	Stream               bool
}

// Accounts are the accounts of a deployment running cs's pipelines, with
// what each shares, for the users grants (ForContract, IngressAdmin,
// Monitor) name:
//
//   - the ingress account shares with each pipeline reading it what the
//     pipeline's mirror of the stream needs (ingress.Mirror): resetting
//     its own durable consumer, answering that consumer's flow control,
//     and its deliveries. No pipeline can make, look at or change another
//     consumer there, nor read what another's mirror is sent;
//   - a pipeline whose contract admits producers by its lag
//     (overload.policy admission) shares with its ingress account the
//     calls that read its readers' consumers, which its gateway asks
//     under jsapi.Prefix(pipeline);
//   - every account shares with the monitor's the calls that read its
//     streams' and consumers' state, which the monitor asks under
//     jsapi.Prefix(account).
func Accounts(cs []*contracts.Contract, grants []Grant) []Account {
	byName := map[string]*Account{}
	var order []string
	account := func(name string) *Account {
		a, ok := byName[name]
		if !ok {
			a = &Account{Name: name}
			byName[name] = a
			order = append(order, name)
		}
		return a
	}
	for _, g := range grants {
		account(g.Account)
	}
	// share exports subject (a service unless stream) from account from to
	// account to, which imports it as as.
	share := func(from, to, subject, as string, stream bool) {
		a := account(from)
		i := slices.IndexFunc(a.Exports, func(e Export) bool { return e.Subject == subject && e.Stream == stream })
		if i < 0 {
			a.Exports = append(a.Exports, Export{Subject: subject, Stream: stream})
			i = len(a.Exports) - 1
		}
		if !slices.Contains(a.Exports[i].To, to) {
			a.Exports[i].To = append(a.Exports[i].To, to)
		}
		if as == subject {
			as = ""
		}
		imp := Import{Account: from, Subject: subject, As: as, Stream: stream}
		if b := account(to); !slices.Contains(b.Imports, imp) {
			b.Imports = append(b.Imports, imp)
		}
	}
	prefixed := func(acct, call string) string { return jsapi.Prefix(acct) + strings.TrimPrefix(call, "$JS.API") }
	for _, c := range cs {
		p := c.Pipeline
		in := ingress.Account(c.Ingress.Stream)
		for i, s := range c.Ingress.StreamNames() {
			reset := ingress.MirrorResetSubject(s, p)
			share(in, p, reset, prefixed(in, reset), false)
			fc := ingress.MirrorFlowControlSubject(s, p)
			share(in, p, fc, fc, false)
			share(in, p, ingress.MirrorSubjectOf(c.Ingress, p, i), "", true)
			if c.Overload.Policy == contracts.PolicyAdmission {
				for _, call := range lagCalls(s) {
					share(p, in, call, prefixed(p, call), false)
				}
			}
		}
	}
	if _, ok := byName[MonitorAccount]; ok {
		for _, name := range slices.Clone(order) {
			if name == MonitorAccount {
				continue
			}
			for _, call := range monitorCalls {
				share(name, MonitorAccount, call, prefixed(name, call), false)
			}
		}
	}
	out := make([]Account, 0, len(order))
	for _, name := range order {
		a := byName[name]
		for i := range a.Exports {
			sort.Strings(a.Exports[i].To)
		}
		out = append(out, *a)
	}
	return out
}

// Configuration is the nats-server accounts block that admits users, each
// in its account with exactly its grant's permissions, the accounts
// sharing what accounts says: what weir auth writes to auth.conf.
func Configuration(accounts []Account, users []User) []byte {
	var b bytes.Buffer
	b.WriteString("# Written by weir auth: an account per pipeline, per ingress stream and\n# for the monitor, and in each one user per process, with the permissions\n# its contract gives it. Include it from nats.conf.\naccounts {\n")
	q := strconv.Quote
	for _, a := range accounts {
		fmt.Fprintf(&b, "  %s: {\n", q(a.Name))
		switch {
		case a.Name == MonitorAccount:
		case a.MaxStore > 0:
			fmt.Fprintf(&b, "    jetstream: { max_file: %d }\n", a.MaxStore)
		default:
			b.WriteString("    jetstream: enabled\n")
		}
		b.WriteString("    users: [\n")
		for _, u := range users {
			if u.Account == a.Name {
				writeUser(&b, u)
			}
		}
		b.WriteString("    ]\n")
		if len(a.Exports) > 0 {
			b.WriteString("    exports: [\n")
			for _, e := range a.Exports {
				kind := exportKind(e.Stream)
				to := make([]string, len(e.To))
				for i, t := range e.To {
					to[i] = q(t)
				}
				fmt.Fprintf(&b, "      { %s: %s, accounts: [%s] }\n", kind, q(e.Subject), strings.Join(to, ", "))
			}
			b.WriteString("    ]\n")
		}
		if len(a.Imports) > 0 {
			b.WriteString("    imports: [\n")
			for _, i := range a.Imports {
				kind := exportKind(i.Stream)
				as := ""
				if i.As != "" {
					as = ", to: " + q(i.As)
				}
				fmt.Fprintf(&b, "      { %s: { account: %s, subject: %s }%s }\n", kind, q(i.Account), q(i.Subject), as)
			}
			b.WriteString("    ]\n")
		}
		b.WriteString("  }\n")
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// exportKind is how a server config names an export or import: a stream,
// or else a service.
func exportKind(stream bool) string {
	if stream {
		return "stream"
	}
	return "service"
}
