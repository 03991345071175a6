package deploy_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/weirflow/weir/deploy"
)

// checkNetworkPolicies holds the manifests to a closed network: a default
// deny over every weir pod; per pipeline a policy letting its pods reach
// only NATS's client port, Jaeger's collector and DNS, and letting in only
// monitoring; NATS's client port open only to the pipelines' pods; every
// pod that speaks to NATS in a pipeline, and every pipeline provisioned by
// its Job.
func checkNetworkPolicies(t *testing.T, stack deploy.Stack, byKind map[string]map[string]object) {
	t.Helper()
	policies := byKind["NetworkPolicy"]
	deny := policies["weir-default-deny"]
	if str(deny.doc, "spec", "podSelector", "matchLabels", "app.kubernetes.io/part-of") != "weir" ||
		!slices.Equal(texts(list(deny.doc, "spec", "policyTypes")), []string{"Ingress", "Egress"}) ||
		get(deny.doc, "spec", "ingress") != nil || get(deny.doc, "spec", "egress") != nil {
		t.Errorf("no NetworkPolicy weir-default-deny closing every weir pod in and out")
	}
	for _, p := range stack.Pipelines {
		o := policies["weir-pipeline-"+p.Name]
		if o.doc == nil {
			t.Errorf("pipeline %s has no NetworkPolicy weir-pipeline-%s", p.Name, p.Name)
			continue
		}
		if str(o.doc, "spec", "podSelector", "matchLabels", "weir.io/pipeline") != p.Name {
			t.Errorf("%s does not select the pods of pipeline %s", o, p.Name)
		}
		var egress []string
		for _, rule := range list(o.doc, "spec", "egress") {
			to := "any"
			if peers := list(rule, "to"); len(peers) == 1 && str(peers[0], "podSelector", "matchLabels", "app.kubernetes.io/name") != "" {
				to = str(peers[0], "podSelector", "matchLabels", "app.kubernetes.io/name")
			}
			for _, port := range list(rule, "ports") {
				egress = append(egress, fmt.Sprintf("%s:%v", to, get(port, "port")))
			}
		}
		if want := []string{"nats:4222", "jaeger:4317", "jaeger:4318", "any:53", "any:53"}; !slices.Equal(egress, want) {
			t.Errorf("%s lets the pipeline's pods reach %v, want only %v", o, egress, want)
		}
		for _, rule := range list(o.doc, "spec", "ingress") {
			for _, peer := range list(rule, "from") {
				if str(peer, "podSelector", "matchLabels", "weir.io/monitoring") != "true" {
					t.Errorf("%s lets in %v: only monitoring may come in", o, peer)
				}
			}
		}
		if byKind["Job"]["provision-"+p.Name].doc == nil {
			t.Errorf("pipeline %s has no provisioning Job provision-%s", p.Name, p.Name)
		}
	}
	nats := policies["weir-nats"]
	var clients []any
	for _, rule := range list(nats.doc, "spec", "ingress") {
		for _, port := range list(rule, "ports") {
			if get(port, "port") == 4222 {
				clients = append(clients, list(rule, "from")...)
			}
		}
	}
	if len(clients) != 1 || str(list(clients[0], "podSelector", "matchExpressions")[0], "key") != "weir.io/pipeline" {
		t.Errorf("NetworkPolicy weir-nats lets %v reach the client port; want only the pipelines' pods", clients)
	}
	// Every pod speaking to NATS is a pipeline's, and closed by default.
	pipelines := map[string]bool{}
	for _, p := range stack.Pipelines {
		pipelines[p.Name] = true
	}
	for _, kind := range []string{"StatefulSet", "Deployment", "Job"} {
		for _, o := range byKind[kind] {
			labels := get(o.doc, "spec", "template", "metadata", "labels")
			if str(labels, "app.kubernetes.io/part-of") != "weir" {
				t.Errorf("%s: its pods are not app.kubernetes.io/part-of: weir, outside the default deny", o)
			}
			if _, ok := containerEnv(container(o))["NATS_URL"]; ok && !pipelines[str(labels, "weir.io/pipeline")] {
				t.Errorf("%s speaks to NATS but its pods are of no pipeline (weir.io/pipeline=%q)", o, str(labels, "weir.io/pipeline"))
			}
		}
	}
}

func texts(l []any) []string {
	var s []string
	for _, v := range l {
		s = append(s, fmt.Sprint(v))
	}
	return s
}
