package deploy_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/pkg/natstest"
)

// shippedServer runs a real nats-server from the compose stack's shipped
// configuration (deploy/nats-secure.conf, which includes deploy/nats.conf)
// with the secrets weir auth writes for the contract c: its users' seeds,
// a CA with the server's certificate and one client certificate per user,
// and the store's key. It returns the server, its store directory and the
// secrets' directory.
func shippedServer(t *testing.T, c *contracts.Contract) (*natstest.Server, string, string) {
	t.Helper()
	dir := t.TempDir()
	etc := filepath.Join(dir, "etc")
	secrets := filepath.Join(etc, "secrets")
	grants, err := access.ForContract(c)
	if err != nil {
		t.Fatal(err)
	}
	grants = append(grants, access.IngressAdmin(c.Ingress))
	users, err := access.WriteUsers(access.Files{Dir: secrets}, access.Accounts([]*contracts.Contract{c}, grants), grants)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natsconn.WriteCertificates(filepath.Join(secrets, "tls"), []string{"localhost", "127.0.0.1"}, "weir", time.Hour); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range users {
		names = append(names, u.Name)
	}
	if err := access.WriteClientCertificates(filepath.Join(secrets, "tls"), names, time.Hour); err != nil {
		t.Fatal(err)
	}
	key, err := access.WriteStoreKey(filepath.Join(secrets, "nats-store.env"))
	if err != nil {
		t.Fatal(err)
	}
	// The server's environment, as compose gives it.
	t.Setenv(access.StoreKeyVar, key)
	t.Setenv("SERVER_NAME", "nats-0")
	// The shipped files as they are but for where the container mounts
	// them and the monitoring port, which a test leaves to the system.
	for _, name := range []string{"nats.conf", "nats-secure.conf"} {
		b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", name))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(b), "/etc/nats/secrets/", filepath.ToSlash(secrets)+"/")
		s = strings.Replace(s, "http: 0.0.0.0:8222", "http: 127.0.0.1:-1", 1)
		if err := os.WriteFile(filepath.Join(etc, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	store := filepath.Join(dir, "store")
	srv, err := natstest.Start(natstest.Options{Dir: store, ConfigFile: filepath.Join(etc, "nats-secure.conf")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv, store, secrets
}

// userAuth is a process's credentials as weir auth writes them: its seed,
// inbox, the CA and its own client certificate.
func userAuth(secrets, user string) natsconn.Auth {
	tls := filepath.Join(secrets, "tls")
	return natsconn.Auth{
		NKey: filepath.Join(secrets, user+".nk"), InboxPrefix: access.Inbox(user),
		CA: filepath.Join(tls, "ca.pem"), Cert: filepath.Join(tls, user+".pem"), Key: filepath.Join(tls, user+"-key.pem"),
	}
}

// TestAStolenSeedAloneIsRefused: an attacker holding a process's seed —
// copied from a container, a volume, a backup — but not its client
// certificate cannot connect to the shipped server, nor with a certificate
// of a CA of its own making; the process itself, with both, can.
func TestAStolenSeedAloneIsRefused(t *testing.T) {
	c, err := contracts.Shipped("nexmark-dedup")
	if err != nil {
		t.Fatal(err)
	}
	srv, _, secrets := shippedServer(t, c)
	user := access.UserName(c.Pipeline, c.Operators[0].Service)
	own := userAuth(secrets, user)

	stolen := own
	stolen.Cert, stolen.Key = "", ""
	if nc, err := stolen.Connect(srv.ClientURL(), nats.NoReconnect(), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatalf("%s's seed without its client certificate was let in", user)
	} else {
		t.Logf("a seed without a certificate: %v", err)
	}
	forged, err := natsconn.WriteCertificates(t.TempDir(), []string{"localhost"}, user, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	mine := own
	mine.Cert, mine.Key = forged.Client, forged.ClientKey
	if nc, err := mine.Connect(srv.ClientURL(), nats.NoReconnect(), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatalf("%s's seed with a certificate of another CA was let in", user)
	} else {
		t.Logf("a seed with a certificate of another CA: %v", err)
	}
	nc, err := own.Connect(srv.ClientURL(), nats.NoReconnect())
	if err != nil {
		t.Fatalf("%s with its seed and certificate: %v", user, err)
	}
	nc.Close()
}

// TestTheStoreIsSealedOnDisk: what a producer stores through the shipped
// server is in no file of the server's store in clear — an attacker
// reading the volume (a snapshot, a stolen disk, a backup) reads no event,
// no dead letter, no erasure registry entry.
func TestTheStoreIsSealedOnDisk(t *testing.T) {
	c, err := contracts.Shipped("nexmark-dedup")
	if err != nil {
		t.Fatal(err)
	}
	srv, store, secrets := shippedServer(t, c)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	// The ingress's administrator provisions it; the producer writes to it.
	admin, err := userAuth(secrets, access.IngressAdmin(c.Ingress).Name).Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ajs, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ajs.CreateStream(ctx, jetstream.StreamConfig{Name: c.Ingress.Stream, Subjects: []string{c.Ingress.SubjectPrefix + ".>"}}); err != nil {
		t.Fatal(err)
	}
	producer, err := userAuth(secrets, access.UserName(c.Pipeline, access.RoleProducer)).Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	pjs, err := jetstream.New(producer)
	if err != nil {
		t.Fatal(err)
	}
	secret := "card-4111111111111111-of-alice@example.com"
	for i := range 10 {
		if _, err := pjs.Publish(ctx, c.Ingress.SubjectPrefix+".0", []byte(`{"id":"e-`+string(rune('0'+i))+`","who":"`+secret+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	producer.Close()
	admin.Close()
	srv.Shutdown()

	files := 0
	err = filepath.WalkDir(store, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds an event in clear: JetStream's store is not encrypted", strings.TrimPrefix(path, store))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatalf("the server wrote no file under %s", store)
	}
	if !t.Failed() {
		t.Logf("%d files in the server's store, none holding an event in clear", files)
	}
}
