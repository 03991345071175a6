package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	natsconf "github.com/nats-io/nats-server/v2/conf"

	"gopkg.in/yaml.v3"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/deploy"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..")
}

// object is one Kubernetes manifest, kept as generic YAML.
type object struct {
	file string
	doc  map[string]any
}

func (o object) kind() string { return str(o.doc, "kind") }
func (o object) name() string { return str(o.doc, "metadata", "name") }
func (o object) String() string {
	return fmt.Sprintf("%s %s/%s", filepath.Base(o.file), o.kind(), o.name())
}

// get walks maps by key.
func get(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func str(v any, path ...string) string { s, _ := get(v, path...).(string); return s }
func list(v any, path ...string) []any { l, _ := get(v, path...).([]any); return l }

func loadManifests(t *testing.T) []object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "deploy", "k8s", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/k8s: %v", err)
	}
	var objs []object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc map[string]any
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if doc == nil {
				continue
			}
			objs = append(objs, object{f, doc})
		}
	}
	return objs
}

// TestK8sManifests checks that the manifests parse and hang together: names
// that refer to each other exist, selectors select their pods, every mount
// has a volume, every contract a service reads is in the ConfigMap, NATS
// syncs every write, and the stateful operators keep their state on a
// claim.
func TestK8sManifests(t *testing.T) {
	objs := loadManifests(t)
	byKind := map[string]map[string]object{}
	for _, o := range objs {
		if o.kind() == "" || str(o.doc, "apiVersion") == "" || o.name() == "" {
			t.Errorf("%s: want apiVersion, kind and metadata.name", o)
			continue
		}
		if byKind[o.kind()] == nil {
			byKind[o.kind()] = map[string]object{}
		}
		if _, dup := byKind[o.kind()][o.name()]; dup {
			t.Errorf("%s: defined twice", o)
		}
		byKind[o.kind()][o.name()] = o
	}
	contracts := byKind["ConfigMap"]["weir-contracts"]
	if contracts.doc == nil {
		t.Fatal("no ConfigMap weir-contracts")
	}
	// Each workload's own NATS user, as weir auth names it.
	stack, err := deploy.Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	users := map[string]string{
		"nexmark-gen": stack.Generator.ProducerUser(),
		"ingest":      stack.Generator.ProducerUser(),
	}
	for _, svc := range stack.Services {
		users[svc.Name] = svc.User()
	}
	for _, p := range stack.Pipelines {
		users[p.Coordinator()] = p.CoordinatorUser()
	}
	for _, d := range stack.Dispatchers {
		users[d.Name()] = d.User()
	}
	for _, p := range stack.Pipelines {
		users["provision-"+p.Name] = p.AdminUser()
	}
	for _, in := range stack.Ingresses {
		users[in.Provision()] = in.AdminUser()
	}
	for _, o := range objs {
		if o.kind() != "StatefulSet" && o.kind() != "Deployment" && o.kind() != "Job" {
			continue
		}
		spec := get(o.doc, "spec")
		labels, _ := get(spec, "template", "metadata", "labels").(map[string]any)
		selector, _ := get(spec, "selector", "matchLabels").(map[string]any)
		for k, v := range selector {
			if labels[k] != v {
				t.Errorf("%s: selector %s=%v does not select its pods", o, k, v)
			}
		}
		if o.kind() == "StatefulSet" {
			svc := byKind["Service"][str(spec, "serviceName")]
			if svc.doc == nil || str(svc.doc, "spec", "clusterIP") != "None" {
				t.Errorf("%s: serviceName %q is not a headless Service", o, str(spec, "serviceName"))
			}
		}
		volumes := map[string]any{}
		for _, v := range list(spec, "template", "spec", "volumes") {
			volumes[str(v, "name")] = v
			if cm := str(v, "configMap", "name"); cm != "" && byKind["ConfigMap"][cm].doc == nil {
				t.Errorf("%s: volume %s: no ConfigMap %s", o, str(v, "name"), cm)
			}
		}
		claims := map[string]bool{}
		for _, c := range list(spec, "volumeClaimTemplates") {
			claims[str(c, "metadata", "name")] = true
		}
		for _, c := range list(spec, "template", "spec", "containers") {
			mounts := map[string]string{}
			for _, m := range list(c, "volumeMounts") {
				name := str(m, "name")
				mounts[str(m, "mountPath")] = name
				if volumes[name] == nil && !claims[name] {
					t.Errorf("%s: mount %s has no volume or claim", o, name)
				}
			}
			env := map[string]string{}
			for _, e := range list(c, "env") {
				env[str(e, "name")] = str(e, "value")
			}
			if p, ok := env["WEIR_CONTRACT"]; ok {
				key, found := strings.CutPrefix(p, "/contracts/")
				if !found || mounts["/contracts"] == "" || get(contracts.doc, "data", key) == nil {
					t.Errorf("%s: WEIR_CONTRACT=%s is not in the mounted weir-contracts ConfigMap", o, p)
				}
			}
			if d, ok := env["WEIR_DATA_DIR"]; ok && !claims[mounts[d]] {
				t.Errorf("%s: WEIR_DATA_DIR=%s is not on a volume claim", o, d)
			}
			if _, ok := env["NATS_URL"]; ok {
				checkSecured(t, o, users[o.name()], env, mounts, volumes)
			}
		}
	}
	for _, svc := range stack.Services {
		if name := svc.Name; byKind["StatefulSet"][name].doc == nil {
			t.Errorf("no StatefulSet %s: a stateful operator needs its volume and a stable instance name", name)
		}
	}
	// Every pipeline whose operators run has a coordinator, with a standby.
	coordinators := map[string]object{}
	for _, d := range byKind["Deployment"] {
		c := container(d)
		if !strings.Contains(str(c, "image"), "/coordinator:") {
			continue
		}
		env := containerEnv(c)
		contract := env["WEIR_CONTRACT"]
		if other, dup := coordinators[contract]; dup {
			t.Errorf("%s and %s coordinate the same contract %s", d, other, contract)
		}
		coordinators[contract] = d
		if n, _ := get(d.doc, "spec", "replicas").(int); n < 2 {
			t.Errorf("%s: %d replicas; want 2, a leader and a standby", d, n)
		}
		if env["WEIR_STATUS_ADDR"] == "" {
			t.Errorf("%s: no WEIR_STATUS_ADDR: the status page is not served", d)
		}
		if !envFromPodName(c, "WEIR_INSTANCE") {
			t.Errorf("%s: WEIR_INSTANCE is not the pod's name: the lease holders must differ", d)
		}
		if byKind["PodDisruptionBudget"][d.name()].doc == nil {
			t.Errorf("%s: no PodDisruptionBudget keeping one coordinator up", d)
		}
	}
	for _, s := range byKind["StatefulSet"] {
		if s.name() == "nats" || s.name() == "provider" {
			continue
		}
		contract := containerEnv(container(s))["WEIR_CONTRACT"]
		if _, ok := coordinators[contract]; !ok {
			t.Errorf("%s runs operators of %s, but no coordinator Deployment coordinates it", s, contract)
		}
	}
	// Every pipeline with an outbox has its dispatcher, calling a provider
	// the manifests serve.
	for _, d := range stack.Dispatchers {
		o := byKind["Deployment"][d.Name()]
		if o.doc == nil {
			t.Errorf("no Deployment %s for the outbox of %s", d.Name(), d.Pipeline)
			continue
		}
		env := containerEnv(container(o))
		if _, ok := coordinators[env["WEIR_CONTRACT"]]; !ok {
			t.Errorf("%s dispatches %s, which no coordinator coordinates", o, env["WEIR_CONTRACT"])
		}
		if env["WEIR_PROVIDER"] != "http://provider:8090" || byKind["Service"]["provider"].doc == nil {
			t.Errorf("%s calls %q; want the provider Service at http://provider:8090", o, env["WEIR_PROVIDER"])
		}
	}
	if d := byKind["Deployment"]["nexmark-gen"]; d.doc == nil {
		t.Error("no Deployment nexmark-gen")
	}
	nats := byKind["StatefulSet"]["nats"]
	if n, _ := get(nats.doc, "spec", "replicas").(int); n != 3 {
		t.Errorf("NATS StatefulSet has %d replicas, want 3", n)
	}
	conf := str(byKind["ConfigMap"]["nats-config"].doc, "data", "nats.conf")
	for _, want := range []string{"sync_interval: always", "nats-0.nats-headless:6222", "nats-2.nats-headless:6222"} {
		if !strings.Contains(conf, want) {
			t.Errorf("nats-config: nats.conf lacks %q", want)
		}
	}
	// Clients and routes both speak TLS.
	t.Setenv("SERVER_NAME", "nats-0")
	t.Setenv(access.StoreKeyVar, "store-key-from-env")
	// (Without its include, which the Secret weir-auth holds.)
	parsed, err := natsconf.Parse(strings.Replace(conf, `include "auth/auth.conf"`, "", 1))
	if err != nil {
		t.Fatalf("nats-config: %v", err)
	}
	cluster, _ := parsed["cluster"].(map[string]any)
	if parsed["tls"] == nil || cluster == nil || cluster["tls"] == nil {
		t.Errorf("nats-config: tls for clients %v, for routes %v: want both", parsed["tls"] != nil, cluster != nil && cluster["tls"] != nil)
	}
	// Mutual TLS, and the store encrypted under the key of weir-nats.
	if tls, _ := parsed["tls"].(map[string]any); tls["verify"] != true {
		t.Errorf("nats-config: tls.verify is %v: clients are not asked for a certificate", tls["verify"])
	}
	checkCipher(t, "nats-config", parsed)
	if !envFromSecret(container(nats), access.StoreKeyVar, "weir-nats") {
		t.Errorf("%s: %s is not from the Secret weir-nats", nats, access.StoreKeyVar)
	}
	checkNetworkPolicies(t, stack, byKind)
}

// container is the first container of a workload's pod template.
func container(o object) any {
	cs := list(o.doc, "spec", "template", "spec", "containers")
	if len(cs) == 0 {
		return nil
	}
	return cs[0]
}

// containerEnv is a container's env with literal values.
func containerEnv(c any) map[string]string {
	env := map[string]string{}
	for _, e := range list(c, "env") {
		env[str(e, "name")] = str(e, "value")
	}
	return env
}

// envFromPodName reports whether the container's variable name is the pod's name.
func envFromPodName(c any, name string) bool {
	for _, e := range list(c, "env") {
		if str(e, "name") == name {
			return str(e, "valueFrom", "fieldRef", "fieldPath") == "metadata.name"
		}
	}
	return false
}

// checkSecured holds a container that connects to NATS to auth and
// mutual TLS: a tls:// URL, the CA, its client certificate, the nkey seed
// and inbox prefix of user — its own process's, as weir auth names it —
// all from the process's own Secret weir-<user> holding nothing of
// another's, readable by the pod's user alone; for an operator keeping
// state, the checkpoint key; an administrator's only in a provisioning
// Job.
func checkSecured(t *testing.T, o object, user string, env, mounts map[string]string, volumes map[string]any) {
	t.Helper()
	if !strings.HasPrefix(env["NATS_URL"], "tls://") || env["NATS_CA"] != "/secrets/tls/ca.pem" {
		t.Errorf("%s: NATS_URL=%s NATS_CA=%s: want TLS with the deployment's CA", o, env["NATS_URL"], env["NATS_CA"])
	}
	if env["NATS_CERT"] != "/secrets/tls/client.pem" || env["NATS_KEY"] != "/secrets/tls/client-key.pem" {
		t.Errorf("%s: NATS_CERT=%s NATS_KEY=%s: want its client certificate", o, env["NATS_CERT"], env["NATS_KEY"])
	}
	seed := user + ".nk"
	if user == "" || env["NATS_NKEY"] != "/secrets/"+seed || env["NATS_INBOX_PREFIX"] != access.Inbox(user) {
		t.Errorf("%s: NATS_NKEY=%s NATS_INBOX_PREFIX=%s: want its own user %q's seed and inbox", o, env["NATS_NKEY"], env["NATS_INBOX_PREFIX"], user)
	}
	if strings.HasSuffix(user, "-"+access.RoleAdmin) != (o.kind() == "Job") {
		t.Errorf("%s runs as %s: an administrator's credentials belong to the provisioning Jobs alone", o, user)
	}
	var secrets []string
	for _, v := range volumes {
		if name := str(v, "secret", "secretName"); name != "" {
			secrets = append(secrets, name)
			if mode, _ := get(v, "secret", "defaultMode").(int); mode == 0 || mode&0o077&^0o040 != 0 {
				t.Errorf("%s: Secret %s mounted with mode %o: want readable by its owner (and the pod's group) alone", o, name, mode)
			}
		}
	}
	if want := []string{"weir-" + user}; !slices.Equal(secrets, want) {
		t.Errorf("%s mounts the Secrets %v, want only its own %v", o, secrets, want)
	}
	v := volumes[mounts["/secrets"]]
	if str(v, "secret", "secretName") != "weir-"+user {
		t.Errorf("%s: /secrets is not its Secret weir-%s", o, user)
		return
	}
	var keys []string
	for _, it := range list(v, "secret", "items") {
		keys = append(keys, str(it, "key")+"→"+str(it, "path"))
	}
	want := []string{seed + "→" + seed}
	if env["WEIR_DATA_DIR"] != "" && !strings.Contains(o.name(), "nexmark-gen") {
		want = append(want, "checkpoint.keys→checkpoint.keys")
		if env["WEIR_CHECKPOINT_KEYS"] != "/secrets/checkpoint.keys" {
			t.Errorf("%s: an operator without WEIR_CHECKPOINT_KEYS: its checkpoints would leave unsealed", o)
		}
	}
	want = append(want, "ca.pem→tls/ca.pem", "client.pem→tls/client.pem", "client-key.pem→tls/client-key.pem")
	if env["WEIR_GATEWAY_TOKENS"] != "" {
		// The gateway: the hashes of the producers' tokens it admits.
		want = append(want, "gateway.tokens→gateway.tokens")
		if env["WEIR_GATEWAY_TOKENS"] != "/secrets/gateway.tokens" {
			t.Errorf("%s: WEIR_GATEWAY_TOKENS=%s is not its Secret's gateway.tokens", o, env["WEIR_GATEWAY_TOKENS"])
		}
	}
	if !slices.Equal(keys, want) {
		t.Errorf("%s: mounts %v of weir-%s, want exactly %v", o, keys, user, want)
	}
}

// envFromSecret reports whether the container's variable name is a key of
// the Secret secret.
func envFromSecret(c any, name, secret string) bool {
	for _, e := range list(c, "env") {
		if str(e, "name") == name {
			return str(e, "valueFrom", "secretKeyRef", "name") == secret
		}
	}
	return false
}
