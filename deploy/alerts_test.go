package deploy_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metricsql"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	"gopkg.in/yaml.v3"

	"github.com/weirflow/weir/pkg/telemetry"
)

// rules is the Prometheus rule file format, as much as the test reads.
type rules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// exportedMetrics are the metric names a weir service's /metrics serves:
// a runtime's metrics, each fed once, scraped from a real endpoint.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	ctx := context.Background()
	tel, err := telemetry.Start(ctx, telemetry.Config{ServiceName: "alerts-test", MetricsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	m, err := telemetry.NewRuntimeMetrics(tel.Meter("weir"), attribute.String("pipeline", "p"), attribute.String("operator", "o"), attribute.String("instance", "0"))
	if err != nil {
		t.Fatal(err)
	}
	m.In(ctx, "ingress/0", 1, 10)
	m.CheckpointFailed(ctx)
	m.SinkCommitted(ctx, time.Millisecond)
	m.Observe(func(o telemetry.Observation) {
		o.Watermark(time.Now())
		o.EventTimeLag(time.Now(), time.Now().Add(-time.Second))
		o.StateKeys("f", 1)
		o.StateSize("", 1)
		o.PartitionLag("ingress/0", 1)
		o.PendingSinkEpochs(1)
	})
	resp, err := http.Get(tel.MetricsURL())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for n := range fams {
		names[n] = true
	}
	return names
}

// TestAlertRulesParse reads the generated alert rules (deploy/alerts.yaml):
// every expression parses as PromQL (MetricsQL's parser, a superset),
// names only series a weir service exports and filters by its pipeline,
// and every rule has a severity, its pipeline and a summary; every
// deployed pipeline has its rules for each threat of the contract.
func TestAlertRulesParse(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f rules
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	exported := exportedMetrics(t)
	seen := map[string]map[string]bool{}
	for _, g := range f.Groups {
		pipeline := strings.TrimPrefix(g.Name, "weir-")
		seen[pipeline] = map[string]bool{}
		for _, r := range g.Rules {
			seen[pipeline][r.Alert] = true
			e, err := metricsql.Parse(r.Expr)
			if err != nil {
				t.Errorf("%s %s: %q does not parse: %v", g.Name, r.Alert, r.Expr, err)
				continue
			}
			metricsql.VisitAll(e, func(e metricsql.Expr) {
				me, ok := e.(*metricsql.MetricExpr)
				if !ok {
					return
				}
				var name string
				filtered := false
				for _, lfs := range me.LabelFilterss {
					for _, lf := range lfs {
						switch {
						case lf.Label == "__name__":
							name = lf.Value
						case lf.Label == "pipeline" && lf.Value == pipeline:
							filtered = true
						}
					}
				}
				if !exported[name] {
					t.Errorf("%s %s: series %q is not among those weir exports", g.Name, r.Alert, name)
				}
				if !filtered {
					t.Errorf("%s %s: series %s is not filtered by pipeline=%q", g.Name, r.Alert, name, pipeline)
				}
			})
			if r.For != "" {
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("%s %s: for %q: %v", g.Name, r.Alert, r.For, err)
				}
			}
			if r.Labels["severity"] == "" || r.Labels["pipeline"] != pipeline || r.Annotations["summary"] == "" {
				t.Errorf("%s %s: labels %v, annotations %v: want a severity, pipeline %s and a summary", g.Name, r.Alert, r.Labels, r.Annotations, pipeline)
			}
		}
	}
	for _, p := range statusPages(t) {
		for _, want := range []string{"WeirRetentionHeadroom", "WeirWatermarkStalled", "WeirCheckpointsFailing", "WeirNotCatchingUp"} {
			if !seen[p][want] {
				t.Errorf("pipeline %s has no %s rule", p, want)
			}
		}
	}
	if !seen["nexmark"]["WeirStateNearBound"] {
		t.Error("the dedup pipeline's seen family has no state bound rule")
	}
}
