package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/cli"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/internal/redact"
	"github.com/weirflow/weir/pkg/ingress"
)

// authCmd is `weir auth`: least-privilege NATS users for every process of
// a pipeline, derived from its contract, and optionally the certificates
// for TLS.
func authCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("weir auth", getenv)
	var contract, dir, seen, hosts, keyID, generations, producerList, storage string
	var readable, decentralized bool
	var validity time.Duration
	fs.String(&contract, "contract", "WEIR_CONTRACT", "", "the pipelines' contracts, comma-separated: files or shipped contracts' names (shipped: all of them); one server admits them all")
	fs.String(&dir, "out", "WEIR_AUTH_DIR", "auth", "directory to write the users' seeds, their environments and auth.conf to")
	fs.String(&seen, "seen-as", "WEIR_AUTH_SEEN_AS", "", "the directory the processes find -out's files in, for the paths the .env files name (a container's mount; default: -out)")
	fs.String(&generations, "generations", "WEIR_AUTH_GENERATIONS", "", "result generations, comma-separated, that weir replay, weir shadow and weir cutover may make of each pipeline: its services and administrator also get the streams and buckets of pipeline <pipeline>-<generation>")
	fs.String(&producerList, "producers", "WEIR_AUTH_PRODUCERS", "", "also write each pipeline's ingest gateway a bearer token per producer, name[:tenant|tenant…],… (without tenants it writes every tenant): <out>/<pipeline>-gateway-<name>.token, and the gateway's <pipeline>-gateway.tokens (-tokens) of their hashes")
	fs.Bool(&decentralized, "jwt", "WEIR_AUTH_JWT", false, "write NATS's decentralized form instead: an operator, the accounts (one per pipeline, per ingress stream and for the monitor) and a system account (accounts.conf, for nats.conf to include), and per process a user JWT its account signs, in <name>.creds (NATS_CREDS)")
	fs.String(&storage, "account-storage", "WEIR_AUTH_ACCOUNT_STORAGE", "", "JetStream file storage each pipeline's and each ingress's account may use, as 8GiB: one pipeline filling the server's storage would stop every other's writes (empty: no limit)")
	fs.Bool(&readable, "readable", "WEIR_AUTH_READABLE", false, "write the seeds readable by every user, for processes that run as another user (a local compose stack's containers)")
	fs.String(&hosts, "tls-hosts", "WEIR_TLS_HOSTS", "", "also write a local CA and certificates under <out>/tls: the server's for these comma-separated names and addresses, and a client's")
	fs.String(&keyID, "checkpoint-key", "WEIR_CHECKPOINT_KEY_ID", "", "also add a new random key with this ID to <out>/checkpoint.keys, making it the current one (a rotation, when the file has keys already)")
	fs.Duration(&validity, "tls-validity", "WEIR_TLS_VALIDITY", 365*24*time.Hour, "how long the certificates are valid")
	// A deployment's other secrets: auth_deploy.go.
	deploy := deploySecretFlags(fs)
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if contract == "" || fs.NArg() > 0 {
		return cli.UsageOf("usage: weir auth -contract FILE[,FILE…] [-out DIR] [-tls-hosts nats,localhost] [-checkpoint-key ID] [-generations G,…] [-producers NAME[:TENANT|…],…]\n", nil, stdout, stderr)
	}
	var producers []access.Producer
	if producerList != "" {
		var err error
		if producers, err = access.ParseProducers(producerList); err != nil {
			return fmt.Errorf("weir auth: -producers: %w", err)
		}
	}
	cs, err := loadContracts(contract)
	if err != nil {
		return err
	}
	if err := ingress.Agree(cs); err != nil {
		return fmt.Errorf("weir auth: %w", err)
	}
	var gens []string
	if generations != "" {
		gens = strings.Split(generations, ",")
	}
	var grants []access.Grant
	var gateways []*contracts.Contract
	ingresses := map[string]bool{}
	for _, c := range cs {
		g, err := access.ForContract(c, gens...)
		if err != nil {
			return err
		}
		grants = append(grants, g...)
		if a := ingress.Account(c.Ingress.Stream); !ingresses[a] {
			ingresses[a] = true
			grants = append(grants, access.IngressAdmin(c.Ingress))
		}
		if producers == nil {
			continue
		}
		for _, p := range producers {
			if len(p.Tenants) > 0 && !c.Identity.Tenant.Declared() {
				return fmt.Errorf("weir auth: -producers: producer %s names tenants, and contract %s declares no identity.tenant to tell an event's tenant by", p.Name, c.File)
			}
		}
		gateways = append(gateways, c)
	}
	grants = append(grants, access.Monitor())
	write, conf, reads := access.WriteUsers, "auth.conf", "NATS_NKEY"
	if decentralized {
		write, conf, reads = access.WriteAccounts, "accounts.conf", "NATS_CREDS"
	}
	accounts := access.Accounts(cs, grants)
	if storage != "" {
		n, err := access.ParseSize(storage)
		if err != nil {
			return fmt.Errorf("weir auth: -account-storage: %w", err)
		}
		access.LimitStorage(accounts, n)
	} else {
		fmt.Fprintln(stderr, "weir auth: no -account-storage: a pipeline may fill the server's storage and stop every other's writes")
	}
	users, err := write(access.Files{Dir: dir, Seen: seen, Readable: readable}, accounts, grants)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "USER\tACCOUNT\tROLE\tENVIRONMENT\tPUBLISH\tSUBSCRIBE")
	for _, u := range users {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d subjects\t%d subjects\n", u.Name, u.Account, u.Role, filepath.Join(dir, u.Name+".env"), len(u.Publish), len(u.Subscribe))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range gateways {
		file, err := access.WriteTokens(access.Files{Dir: dir, Seen: seen, Readable: readable}, c.Pipeline, producers)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Ingest gateway of %s: give it %s (-tokens, WEIR_GATEWAY_TOKENS), and each producer its %s.\n",
			c.Pipeline, file, access.TokenFile(dir, c.Pipeline, "<name>"))
	}
	if keyID != "" {
		file := filepath.Join(dir, "checkpoint.keys")
		if err := addKey(file, keyID); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Checkpoint key %s is current in %s: give the file to every service (-checkpoint-keys, WEIR_CHECKPOINT_KEYS).\n", keyID, file)
	}
	redactionKey := filepath.Join(dir, "redaction.key")
	made, err := redact.WriteKey(redactionKey)
	if err != nil {
		return err
	}
	if made {
		fmt.Fprintf(stdout, "Redaction key written to %s (owner-only): give it to every service (-redaction-key, WEIR_REDACTION_KEY); a contract hashing sensitive values (security) does not start without it.\n", redactionKey)
	}
	fmt.Fprintf(stdout, "\nThe server admits them with `include %q` in nats.conf; each process reads its %s and NATS_INBOX_PREFIX from its .env file.\n",
		filepath.Join(dir, conf), reads)
	if hosts != "" {
		certs, err := natsconn.WriteCertificates(filepath.Join(dir, "tls"), strings.Split(hosts, ","), "weir", validity)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "TLS: CA %s; server %s (key %s); client %s (key %s)\n", certs.CA, certs.Server, certs.ServerKey, certs.Client, certs.ClientKey)
	}
	// A deployment's other secrets: auth_deploy.go.
	return deploy.write(dir, users, validity, stdout)
}

// addKey appends a new random key named id to the key file, which it
// creates readable by its owner only; an ID the file holds is refused.
func addKey(file, id string) error {
	old, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if len(old) > 0 {
		k, err := checkpoint.ParseKeys(string(old))
		if err != nil {
			return err
		}
		if k.Has(id) {
			return fmt.Errorf("weir auth: %s already holds a key %s: a rotation needs a new ID", file, id)
		}
	}
	line, err := checkpoint.NewKeyLine(id)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
