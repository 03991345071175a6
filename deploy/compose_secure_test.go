package deploy_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	natsconf "github.com/nats-io/nats-server/v2/conf"
	"gopkg.in/yaml.v3"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/deploy"
)

// composeService is what TestComposeIsLockedDown reads of a compose service.
type composeService struct {
	Image       string            `yaml:"image"`
	EnvFile     string            `yaml:"env_file"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

// composeUsers maps each compose service that connects to NATS to its
// own user, as weir auth names it, and gives the pipeline it belongs to.
func composeUsers(s deploy.Stack) (users, pipelines map[string]string) {
	users = map[string]string{
		"nexmark-gen": s.Generator.ProducerUser(),
		"ingest":      s.Generator.ProducerUser(),
	}
	pipelines = map[string]string{"nexmark-gen": s.Generator.Name, "ingest": s.Generator.Name}
	for _, svc := range s.Services {
		users[svc.Name], pipelines[svc.Name] = svc.User(), svc.Pipeline
	}
	for _, p := range s.Pipelines {
		users[p.Coordinator()], pipelines[p.Coordinator()] = p.CoordinatorUser(), p.Name
		users["provision-"+p.Name], pipelines["provision-"+p.Name] = p.AdminUser(), p.Name
	}
	for _, d := range s.Dispatchers {
		users[d.Name()], pipelines[d.Name()] = d.User(), d.Pipeline
	}
	// An ingress's provisioning job is of its account, not a pipeline.
	for _, in := range s.Ingresses {
		users[in.Provision()], pipelines[in.Provision()] = in.AdminUser(), strings.TrimSuffix(in.AdminUser(), "-"+access.RoleAdmin)
	}
	return users, pipelines
}

// provisionedBy is the job that provisions what the compose service name
// uses: the generator and the gateway write the ingress, which its job
// makes in the ingress's account; the rest are a pipeline's.
func provisionedBy(s deploy.Stack, name, pipeline string) string {
	if name == "nexmark-gen" || name == "ingest" {
		return s.Generator.Ingress.Provision()
	}
	return "provision-" + pipeline
}

// TestComposeIsLockedDown holds the local stack to what a compromised
// container must not get: each container mounts, of deploy/secrets, only
// its own seed, its own client certificate and key, the CA, and for an
// operator the checkpoint key — an admin's seed only in its pipeline's
// provisioning job; NATS verifies client certificates and encrypts its
// store with a key it reads from its own environment file; every process
// of a pipeline starts after the pipeline's provisioning job succeeded;
// and build-images.sh makes no secret readable by others.
func TestComposeIsLockedDown(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Services map[string]composeService `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	stack, err := deploy.Load(root)
	if err != nil {
		t.Fatal(err)
	}
	users, pipelines := composeUsers(stack)
	for _, p := range stack.Pipelines {
		job, ok := file.Services["provision-"+p.Name]
		if !ok {
			t.Errorf("no provisioning job provision-%s for pipeline %s", p.Name, p.Name)
			continue
		}
		if !strings.Contains(strings.Join(job.Volumes, " "), "/"+p.AdminUser()+".nk:") {
			t.Errorf("provision-%s does not run as the pipeline's admin %s", p.Name, p.AdminUser())
		}
	}
	for name, s := range file.Services {
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("service %s: port %q is published on every interface, not the loopback", name, p)
			}
		}
		if name == "nats" {
			checkComposeNATS(t, s)
			continue
		}
		var secrets []string
		for _, v := range s.Volumes {
			if src, _, _ := strings.Cut(v, ":"); strings.HasPrefix(src, "./deploy/secrets/") {
				secrets = append(secrets, v)
			}
		}
		user, ok := users[name]
		if !ok {
			if len(secrets) > 0 || s.EnvFile != "" {
				t.Errorf("service %s connects to no NATS but mounts secrets %v", name, secrets)
			}
			continue
		}
		if s.EnvFile != "./deploy/secrets/"+user+".env" {
			t.Errorf("service %s: env_file %s, want its own user's %s.env", name, s.EnvFile, user)
		}
		want := []string{
			"./deploy/secrets/" + user + ".nk:/secrets/" + user + ".nk:ro",
			"./deploy/secrets/tls/ca.pem:/secrets/tls/ca.pem:ro",
			"./deploy/secrets/tls/" + user + ".pem:/secrets/tls/client.pem:ro",
			"./deploy/secrets/tls/" + user + "-key.pem:/secrets/tls/client-key.pem:ro",
		}
		if s.Environment["WEIR_CHECKPOINT_KEYS"] != "" {
			want = append(want, "./deploy/secrets/checkpoint.keys:/secrets/checkpoint.keys:ro")
		}
		if s.Environment["WEIR_GATEWAY_TOKENS"] != "" {
			// The gateway: the hashes of the producers' tokens, of its
			// user's pipeline.
			want = append(want, "./deploy/secrets/"+strings.TrimSuffix(user, "-producer")+"-gateway.tokens:"+s.Environment["WEIR_GATEWAY_TOKENS"]+":ro")
		}
		slices.Sort(want)
		slices.Sort(secrets)
		if !slices.Equal(secrets, want) {
			t.Errorf("service %s mounts of deploy/secrets\n  %v\nwant exactly its own\n  %v", name, secrets, want)
		}
		if s.Environment["NATS_CERT"] != "/secrets/tls/client.pem" || s.Environment["NATS_KEY"] != "/secrets/tls/client-key.pem" {
			t.Errorf("service %s: NATS_CERT=%q NATS_KEY=%q: want its client certificate", name, s.Environment["NATS_CERT"], s.Environment["NATS_KEY"])
		}
		role := strings.TrimPrefix(user, pipelines[name]+"-")
		if (role == access.RoleAdmin) != strings.HasPrefix(name, "provision-") {
			t.Errorf("service %s runs as %s: an admin's credentials belong to the provisioning job alone", name, user)
		}
		if !strings.HasPrefix(name, "provision-") {
			job := provisionedBy(stack, name, pipelines[name])
			if s.DependsOn[job].Condition != "service_completed_successfully" {
				t.Errorf("service %s does not wait for %s to complete: it would start before its streams exist", name, job)
			}
		}
	}
	script, err := os.ReadFile(filepath.Join(root, "deploy", "build-images.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"-readable", "a+r", "o+r", "644"} {
		if strings.Contains(string(script), bad) {
			t.Errorf("build-images.sh has %q: the stack's secrets are its owner's alone", bad)
		}
	}
}

// checkComposeNATS holds the compose stack's server to mutual TLS and an
// encrypted store, and to the server's own secrets alone.
func checkComposeNATS(t *testing.T, s composeService) {
	t.Helper()
	if s.EnvFile != "./deploy/secrets/nats-store.env" {
		t.Errorf("nats: env_file %q, want ./deploy/secrets/nats-store.env (%s)", s.EnvFile, access.StoreKeyVar)
	}
	for _, v := range s.Volumes {
		src, _, _ := strings.Cut(v, ":")
		if !strings.HasPrefix(src, "./deploy/secrets/") {
			continue
		}
		switch strings.TrimPrefix(src, "./deploy/secrets/") {
		case "auth.conf", "tls/server.pem", "tls/server-key.pem", "tls/ca.pem":
		default:
			t.Errorf("nats mounts %s: a process's secret, not the server's", src)
		}
	}
	conf := parseNATSConf(t, filepath.Join(repoRoot(t), "deploy", "nats-secure.conf"))
	tls, _ := conf["tls"].(map[string]any)
	if tls["verify"] != true {
		t.Errorf("nats-secure.conf: tls.verify is %v: a client without a certificate of the stack's CA is admitted to try its nkey", tls["verify"])
	}
	checkCipher(t, "nats-secure.conf", conf)
}

// checkCipher holds a parsed server configuration to JetStream encrypted
// at rest under the key of the server's environment.
func checkCipher(t *testing.T, name string, conf map[string]any) {
	t.Helper()
	js, _ := conf["jetstream"].(map[string]any)
	if c, _ := js["cipher"].(string); c != "chachapoly" && c != "aes" {
		t.Errorf("%s: jetstream.cipher is %q: the store is in clear", name, c)
	}
	if js["key"] != "store-key-from-env" {
		t.Errorf("%s: jetstream.key is not $%s", name, access.StoreKeyVar)
	}
}

// parseNATSConf parses a server configuration file, without the includes
// of deploy/secrets, with the variables it reads from the environment set.
func parseNATSConf(t *testing.T, file string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"nats.conf", "nats-secure.conf"} {
		src, err := os.ReadFile(filepath.Join(filepath.Dir(file), name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, `include "secrets/`) {
			lines = append(lines, l)
		}
	}
	f := filepath.Join(dir, filepath.Base(file))
	if err := os.WriteFile(f, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SERVER_NAME", "nats-0")
	t.Setenv(access.StoreKeyVar, "store-key-from-env")
	conf, err := natsconf.ParseFile(f)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return conf
}

// checkSecretModes holds the secrets build-images.sh wrote (dir) to their
// owner: no seed, private key, checkpoint key or store key readable or
// writable by anyone else.
func checkSecretModes(t *testing.T, dir string) {
	t.Helper()
	secret := func(name string) bool {
		for _, suffix := range []string{".nk", ".creds", "-key.pem", "checkpoint.keys", "nats-store.env"} {
			if strings.HasSuffix(name, suffix) {
				return true
			}
		}
		return false
	}
	n := 0
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !secret(d.Name()) {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n++
		if info.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is %v: a secret readable by others than its owner", path, info.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("no secrets in %s", dir)
	}
	t.Logf("%d secrets in %s, each its owner's alone", n, dir)
}

// checkLoopback holds every published port of the containers ids (one per
// line) to the host's loopback.
func checkLoopback(t *testing.T, ctx context.Context, root string, ids []byte) {
	t.Helper()
	out := output(t, ctx, root, nil, "docker", append([]string{"inspect", "-f",
		"{{.Name}}{{range $p, $b := .NetworkSettings.Ports}}{{range $b}} {{.HostIp}}:{{.HostPort}}{{end}}{{end}}"}, strings.Fields(string(ids))...)...)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, b := range f[1:] {
			if !strings.HasPrefix(b, "127.0.0.1:") {
				t.Errorf("%s publishes %s, not on the loopback", f[0], b)
			}
		}
	}
}

// checkStoreSealed copies JetStream's store out of the NATS container and
// holds it to encryption at rest: plain, which the stack stored, is in no
// file of it.
func checkStoreSealed(t *testing.T, ctx context.Context, root, container, plain string) {
	t.Helper()
	// The store is live: a file the server writes or removes while docker
	// cp streams it ends the copy with "unexpected EOF". Each attempt
	// copies afresh into an empty directory.
	var dir string
	for attempt := 1; ; attempt++ {
		dir = t.TempDir()
		cmd := exec.CommandContext(ctx, "docker", "cp", container+":/data/jetstream", dir)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err == nil {
			break
		}
		if attempt == 5 {
			t.Fatalf("docker cp %s:/data/jetstream: %d attempts: %v\n%s", container, attempt, err, out)
		}
		t.Logf("docker cp %s:/data/jetstream: %v (%s): the store changed under the copy; again", container, err, bytes.TrimSpace(out))
		time.Sleep(time.Second)
	}
	files := 0
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if bytes.Contains(b, []byte(plain)) {
			t.Errorf("%s holds %q in clear: JetStream's store is not encrypted", strings.TrimPrefix(path, dir), plain)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("the NATS container's /data/jetstream has no files")
	}
	if !t.Failed() {
		t.Logf("%d files of JetStream's store, none with %q in clear", files, plain)
	}
}
