// Package deploy generates what runs weir outside `go run` from the
// contracts: the services of the local stack (compose.yaml), the
// Kubernetes manifests of their StatefulSets, coordinators, provisioning
// Jobs, NetworkPolicies and contracts ConfigMap (deploy/k8s), and the image
// targets of deploy/Dockerfile.
//
// Both run locked down (docs/SECURITY.md): NATS speaks mutual TLS and
// encrypts JetStream at rest; every process holds only its own seed,
// client certificate and key (in Kubernetes its own Secret, weir-<user>);
// a pipeline's administrator provisions its streams, buckets and consumers
// in a one-shot job before its processes start, and only that job holds
// the administrator's credentials; nothing is published beyond the host's
// loopback in compose, and in Kubernetes a pipeline's pods reach only NATS,
// Jaeger's collector and DNS. TestComposeIsLockedDown and TestK8sManifests
// hold the generated files to it.
//
// A pipeline is deployed when every service its contract names
// (operators[].service) has its code, services/<name>/cmd/<name>. So a new
// query needs its code and its contract; `go run ./deploy/cmd/generate`
// writes the rest, and TestGeneratedFilesAreCurrent fails while the
// committed files differ from what it writes. The parts that are not one
// per service or pipeline — NATS, Jaeger, the generator — are in the
// templates (deploy/templates), written once.
package deploy

import (
	"bytes"
	"embed"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/ingress"
)

// Service is one operator service of the stack: a binary running the
// operators a contract assigns to it.
type Service struct {
	Name     string // services/<Name>/cmd/<Name>
	Pipeline string
	Contract string // file name in contracts/
	// Operators and States are what it runs and keeps, in the contract's
	// order, for the comments of its manifests.
	Operators []string
	States    []string
	// MetricsPort is its host port in the local stack, movable by
	// MetricsPortVar.
	MetricsPort    int
	MetricsPortVar string
}

// Instance is the service's instance name in the local stack.
func (s Service) Instance() string { return s.Name + "-0" }

// User is the service's NATS user (weir auth).
func (s Service) User() string { return access.UserName(s.Pipeline, s.Name) }

// Pipeline is one deployed pipeline, with its checkpoint coordinator.
type Pipeline struct {
	Name     string // the contract's pipeline
	Contract string
	Services []string
	// StatusPort is the coordinator's status page in the local stack,
	// movable by StatusPortVar.
	StatusPort    int
	StatusPortVar string
	// RetentionSeconds is the ingress retention, and Families the state
	// families with their key bounds: what the alert rules hold the
	// pipeline to.
	RetentionSeconds int64
	Families         []FamilyBound
	// Ingress is the stream of the ingress it reads, in its own account.
	Ingress Ingress
}

// Ingress is an ingress stream of the deployed pipelines. It lives in an
// account of its own (access.Accounts), where its producers write and its
// administrator provisions it — the stream, and the consumer feeding each
// pipeline's mirror of it — before anything produces into it.
type Ingress struct {
	Stream string
	// Contracts are the deployed contracts that read it.
	Contracts []string
}

// AdminUser is the NATS user of the ingress's administrator.
func (i Ingress) AdminUser() string {
	return access.IngressAdmin(contracts.Ingress{Stream: i.Stream}).Name
}

// Provision is the name of the ingress's provisioning job.
func (i Ingress) Provision() string { return "provision-" + ingress.Account(i.Stream) }

// ContractPaths are the contracts reading it as the images hold them,
// comma-separated: what weir provision -ingress takes.
func (i Ingress) ContractPaths() string {
	paths := make([]string, len(i.Contracts))
	for n, c := range i.Contracts {
		paths[n] = "/contracts/" + c
	}
	return strings.Join(paths, ",")
}

// FamilyBound is a state family and its declared key bound.
type FamilyBound struct {
	Name    string
	MaxKeys int
}

// Coordinator is the name of the pipeline's coordinator service.
func (p Pipeline) Coordinator() string { return "coordinator-" + p.Name }

// CoordinatorUser and ProducerUser are the NATS users (weir auth) of the
// pipeline's coordinator and of the producers of its ingress.
func (p Pipeline) CoordinatorUser() string { return access.UserName(p.Name, access.RoleCoordinator) }
func (p Pipeline) ProducerUser() string    { return access.UserName(p.Name, access.RoleProducer) }

// AdminUser is the NATS user of the pipeline's administrator, who
// provisions its streams, buckets and consumers (weir provision).
func (p Pipeline) AdminUser() string { return access.UserName(p.Name, access.RoleAdmin) }

// Dispatcher performs the effects of a pipeline whose contract declares
// sink.effect outbox: it reads the pipeline's outbox and calls the
// provider (in the local stack and the manifests, the simulator of
// services/provider).
type Dispatcher struct {
	Pipeline string
	Contract string
}

// Name is the dispatcher's service name.
func (d Dispatcher) Name() string { return "dispatcher-" + d.Pipeline }

// User is the dispatcher's NATS user (weir auth).
func (d Dispatcher) User() string { return access.UserName(d.Pipeline, access.RoleDispatcher) }

// Stack is every deployed pipeline and service, in the order of their
// contracts' file names (numbers in them compared as numbers: q5 before
// q11).
type Stack struct {
	Pipelines []Pipeline
	// Ingresses are the ingress streams they read.
	Ingresses []Ingress
	Services  []Service
	// Dispatchers are those of the deployed pipelines with an outbox; the
	// stack has the provider simulator when there is one.
	Dispatchers []Dispatcher
	// Generator is the pipeline whose ingress the Nexmark generator feeds
	// (its contract's ingress section): the first.
	Generator Pipeline
	// Contracts are the deployed contract files' contents by name.
	Contracts map[string]string
}

// The first host ports of the local stack.
const (
	firstStatusPort  = 8080
	firstMetricsPort = 9465 // nexmark-gen has 9464
)

// Load reads the stack from the repository at root.
func Load(root string) (Stack, error) {
	files, err := filepath.Glob(filepath.Join(root, "contracts", "*.yaml"))
	if err != nil {
		return Stack{}, err
	}
	slices.SortFunc(files, naturalCompare)
	s := Stack{Contracts: map[string]string{}}
	for _, f := range files {
		c, err := contracts.Load(f)
		if err != nil {
			return Stack{}, fmt.Errorf("deploy: %w", err)
		}
		var services []string
		for _, op := range c.Operators {
			if !slices.Contains(services, op.Service) {
				services = append(services, op.Service)
			}
		}
		deployed := len(services) > 0
		for _, svc := range services {
			if _, err := os.Stat(filepath.Join(root, "services", svc, "cmd", svc)); err != nil {
				deployed = false
			}
		}
		if !deployed {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return Stack{}, err
		}
		name := filepath.Base(f)
		s.Contracts[name] = string(data)
		p := Pipeline{Name: c.Pipeline, Contract: name, Services: services,
			StatusPort: firstStatusPort + len(s.Pipelines), StatusPortVar: portVar(c.Pipeline, "STATUS"),
			RetentionSeconds: int64(c.Ingress.Retention.D().Seconds())}
		for _, f := range c.State.Families {
			p.Families = append(p.Families, FamilyBound{Name: f.Name, MaxKeys: f.MaxKeys})
		}
		i := slices.IndexFunc(s.Ingresses, func(in Ingress) bool { return in.Stream == c.Ingress.Stream })
		if i < 0 {
			s.Ingresses = append(s.Ingresses, Ingress{Stream: c.Ingress.Stream})
			i = len(s.Ingresses) - 1
		}
		s.Ingresses[i].Contracts = append(s.Ingresses[i].Contracts, name)
		p.Ingress.Stream = c.Ingress.Stream
		s.Pipelines = append(s.Pipelines, p)
		if c.Sink.Effect == contracts.EffectOutbox {
			s.Dispatchers = append(s.Dispatchers, Dispatcher{Pipeline: c.Pipeline, Contract: name})
		}
		for _, svc := range services {
			if slices.ContainsFunc(s.Services, func(o Service) bool { return o.Name == svc }) {
				return Stack{}, fmt.Errorf("deploy: service %s runs operators of two pipelines; a service belongs to one", svc)
			}
			sv := Service{Name: svc, Pipeline: c.Pipeline, Contract: name,
				MetricsPort: firstMetricsPort + len(s.Services), MetricsPortVar: portVar(svc, "METRICS")}
			for _, op := range c.Operators {
				if op.Service == svc {
					sv.Operators = append(sv.Operators, op.ID)
					sv.States = append(sv.States, op.State...)
				}
			}
			s.Services = append(s.Services, sv)
		}
	}
	if len(s.Pipelines) == 0 {
		return Stack{}, fmt.Errorf("deploy: no contract in %s has all its services' code", filepath.Join(root, "contracts"))
	}
	for i := range s.Pipelines {
		for _, in := range s.Ingresses {
			if in.Stream == s.Pipelines[i].Ingress.Stream {
				s.Pipelines[i].Ingress = in
			}
		}
	}
	s.Generator = s.Pipelines[0]
	return s, nil
}

func portVar(name, what string) string {
	return "WEIR_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_" + what + "_PORT"
}

// naturalCompare orders strings with their digit runs compared as numbers.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na, _ := strconv.Atoi(a[:da])
			nb, _ := strconv.Atoi(b[:db])
			if na != nb {
				return na - nb
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func digits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

//go:embed templates
var templates embed.FS

// Files returns every generated file, by path from the repository's root.
func (s Stack) Files() (map[string][]byte, error) {
	t, err := template.New("").Funcs(template.FuncMap{
		"join":   strings.Join,
		"inbox":  access.Inbox,
		"indent": indent,
		"half":   func(n int64) int64 { return n / 2 },
		"most":   func(n int) int { return n * 8 / 10 },
	}).ParseFS(templates, "templates/*.tmpl")
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	render := func(file, tmpl string, data any) error {
		var b bytes.Buffer
		if err := t.ExecuteTemplate(&b, tmpl, data); err != nil {
			return fmt.Errorf("deploy: %s: %w", file, err)
		}
		out[file] = b.Bytes()
		return nil
	}
	if err := render("compose.yaml", "compose.yaml.tmpl", s); err != nil {
		return nil, err
	}
	if err := render("deploy/Dockerfile", "Dockerfile.tmpl", s); err != nil {
		return nil, err
	}
	if err := render(path.Join("deploy", "alerts.yaml"), "alerts.yaml.tmpl", s); err != nil {
		return nil, err
	}
	if err := render(path.Join("deploy", "k8s", "coordinators.yaml"), "coordinators.yaml.tmpl", s); err != nil {
		return nil, err
	}
	if err := render(path.Join("deploy", "k8s", "provision.yaml"), "provision.yaml.tmpl", s); err != nil {
		return nil, err
	}
	if err := render(path.Join("deploy", "k8s", "network.yaml"), "network.yaml.tmpl", s); err != nil {
		return nil, err
	}
	out[path.Join("deploy", "k8s", "contracts.yaml")] = contractsConfigMap(s.Contracts)
	for _, svc := range s.Services {
		if err := render(path.Join("deploy", "k8s", svc.Name+".yaml"), "service.yaml.tmpl", svc); err != nil {
			return nil, err
		}
	}
	if len(s.Dispatchers) > 0 {
		if err := render(path.Join("deploy", "k8s", "effects.yaml"), "effects.yaml.tmpl", s); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// contractsConfigMap renders the ConfigMap of the deployed contracts, each a
// literal block.
func contractsConfigMap(files map[string]string) []byte {
	var b bytes.Buffer
	b.WriteString(`# The pipeline contracts, mounted at /contracts by every weir service.
# GENERATED from contracts/ by: go run ./deploy/cmd/generate
# Edit the files in contracts/, not this one.
apiVersion: v1
kind: ConfigMap
metadata:
  name: weir-contracts
  labels:
    app.kubernetes.io/part-of: weir
data:
`)
	for _, n := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(&b, "  %s: |\n", n)
		for _, line := range strings.SplitAfter(strings.TrimSuffix(files[n], "\n"), "\n") {
			if strings.TrimSpace(line) == "" {
				b.WriteString("\n")
				continue
			}
			b.WriteString("    " + line)
		}
		b.WriteString("\n")
	}
	return b.Bytes()
}

// ContractNames are the deployed contract files, sorted as Load sorts them.
func (s Stack) ContractNames() []string {
	var names []string
	for _, p := range s.Pipelines {
		names = append(names, p.Contract)
	}
	return names
}

// indent prefixes every non-empty line of text with n spaces.
func indent(n int, text string) string {
	pad := strings.Repeat(" ", n)
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = pad + l
		}
	}
	return strings.Join(lines, "\n")
}
