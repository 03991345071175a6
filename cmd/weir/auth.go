package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weirflow/weir/pkg/access"
	"github.com/weirflow/weir/pkg/natsconn"
)

// authCmd is `weir auth`: least-privilege NATS users for every process of
// a pipeline, derived from its contract, and optionally the certificates
// for TLS.
func authCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("weir auth", getenv)
	var contract, dir, hosts string
	var validity time.Duration
	fs.String(&contract, "contract", "WEIR_CONTRACT", "", "the pipeline's contract: a file or a shipped contract's name")
	fs.String(&dir, "out", "WEIR_AUTH_DIR", "auth", "directory to write the users' seeds, their environments and auth.conf to")
	fs.String(&hosts, "tls-hosts", "WEIR_TLS_HOSTS", "", "also write a local CA and certificates under <out>/tls: the server's for these comma-separated names and addresses, and a client's")
	fs.Duration(&validity, "tls-validity", "WEIR_TLS_VALIDITY", 365*24*time.Hour, "how long the certificates are valid")
	if err := parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if contract == "" || fs.NArg() > 0 {
		return usageOf("usage: weir auth -contract FILE [-out DIR] [-tls-hosts nats,localhost]\n", nil, stdout, stderr)
	}
	c, err := statusContract(contract, "", false)
	if err != nil {
		return err
	}
	grants, err := access.ForContract(c)
	if err != nil {
		return err
	}
	users, err := access.WriteUsers(dir, grants)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "USER\tROLE\tENVIRONMENT\tPUBLISH\tSUBSCRIBE")
	for _, u := range users {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d subjects\t%d subjects\n", u.Name, u.Role, filepath.Join(dir, u.Name+".env"), len(u.Publish), len(u.Subscribe))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nThe server admits them with `include %q` in nats.conf; each process reads its NATS_NKEY and NATS_INBOX_PREFIX from its .env file.\n",
		filepath.Join(dir, "auth.conf"))
	if hosts == "" {
		return nil
	}
	certs, err := natsconn.WriteCertificates(filepath.Join(dir, "tls"), strings.Split(hosts, ","), "weir", validity)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "TLS: CA %s; server %s (key %s); client %s (key %s)\n", certs.CA, certs.Server, certs.ServerKey, certs.Client, certs.ClientKey)
	return nil
}
