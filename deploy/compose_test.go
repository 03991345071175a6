// Package deploy_test checks the deployment files. TestCompose brings the
// whole compose stack up and checks that it works: every container
// healthy, events and results flowing through JetStream, every pipeline's
// coordinator completing checkpoints and serving its status page, Jaeger
// answering.
//
// TestCompose runs whenever a Docker engine and a compose tool are there
// and the Jaeger binary is already built (cached by deploy/build-images.sh,
// or WEIR_JAEGER_BIN): with it, the test takes about three minutes on two
// cores. Without it, it skips, because a cold Jaeger build takes 10-30
// minutes; WEIR_COMPOSE_TEST=1 runs it anyway (building Jaeger),
// WEIR_COMPOSE_TEST=0 or -short skips it. See deploy/README.md.
package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/deploy"
	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/provision"
)

// testTag is the tag of the images the test builds and runs, so that it
// never replaces the images (weir/*:dev) of a stack the user runs.
const testTag = "weirtest"

// projectPrefix starts the compose project name of every test stack; the
// rest is the test process's ID, so that concurrent runs do not share a
// stack and a stack left by a killed run can be recognized and removed.
const projectPrefix = "weirtest-"

// cleanupMargin is kept free before the test's deadline for logs and
// `down -v`, so that a run that is too slow fails and cleans up instead of
// being killed by the test timeout.
const cleanupMargin = 2 * time.Minute

// grow are the streams that must grow while the stack runs; exist those
// that must exist (results that come when the data has them). Each is
// <account>/<stream>: every pipeline is an account of its own, reading a
// mirror of the ingress, whose stream is in the ingress's account.
var (
	grow = []string{
		"ingress-nexmark/NEXMARK", "nexmark/NEXMARK", "nexmark/WEIR_NEXMARK_DEDUPED",
		"nexmark-q5/NEXMARK", "nexmark-q5/WEIR_NEXMARK_Q5_BIDS", "nexmark-q5/WEIR_NEXMARK_Q5_COUNTS", "nexmark-q5/WEIR_NEXMARK_Q5_RESULTS",
		"nexmark-q7/WEIR_NEXMARK_Q7_RESULTS",
		"nexmark-q8/WEIR_NEXMARK_Q8_ENTITIES",
		"nexmark-q11/WEIR_NEXMARK_Q11_BIDS",
		"nexmark-winning-bids/WEIR_NEXMARK_WINNING_BIDS_CHARGES", // the outbox: released a checkpoint after each close
	}
	exist = []string{"nexmark-q8/WEIR_NEXMARK_Q8_RESULTS", "nexmark-q11/WEIR_NEXMARK_Q11_RESULTS"}
)

// statusPages are the coordinators' status ports (compose.yaml's
// WEIR_*_PORT variables) and the pipelines they show, as the stack
// generated from the contracts has them.
func statusPages(t *testing.T) map[string]string {
	t.Helper()
	s, err := deploy.Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	pages := map[string]string{}
	for _, p := range s.Pipelines {
		pages[p.StatusPortVar] = p.Name
	}
	return pages
}

func TestCompose(t *testing.T) {
	force := os.Getenv("WEIR_COMPOSE_TEST")
	switch {
	case force == "0":
		t.Skip("WEIR_COMPOSE_TEST=0")
	case testing.Short() && force != "1":
		t.Skip("-short: the compose stack takes minutes (WEIR_COMPOSE_TEST=1 runs it anyway)")
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		t.Skipf("no Docker engine reachable (docker info: %v)", err)
	}
	compose := composeCommand()
	if compose == nil {
		t.Skip("neither `docker compose` nor docker-compose is installed")
	}
	if bin, ok := cachedJaeger(); !ok && force != "1" {
		t.Skipf("the Jaeger binary is not built (looked for %s), and a cold Jaeger build takes 10-30 minutes. "+
			"Build it once with `deploy/build-images.sh jaeger` (cached afterwards), or set WEIR_JAEGER_BIN, "+
			"or run this test with WEIR_COMPOSE_TEST=1 to build it here", bin)
	}
	root := repoRoot(t)
	composeFile := filepath.Join(root, "compose.yaml")
	start := time.Now()

	// ctx ends early enough to clean up before the test timeout, or on
	// an interrupt, so that the stack is taken down in both cases.
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-cleanupMargin))
		defer cancel()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	project := fmt.Sprintf("%s%d", projectPrefix, os.Getpid())
	dc := func(project string, args ...string) []string {
		return append(append(slices.Clone(compose[1:]), "-p", project, "-f", composeFile), args...)
	}
	removeStale(t, root, compose[0], dc)

	// Build the images, under the test's tag.
	env := []string{
		"WEIR_IMAGE_TAG=" + testTag,
		"WEIR_NATS_IMAGE=" + imagePrefix() + "/nats:" + testTag,
		"WEIR_JAEGER_IMAGE=" + imagePrefix() + "/jaeger:" + testTag,
		// Checkpoints every two seconds instead of the contracts' ten. The
		// generous timeout: on a loaded machine the dedup pipeline's
		// publish operator falls seconds behind, and its barriers with it.
		"WEIR_CHECKPOINT_INTERVAL=2s",
		"WEIR_CHECKPOINT_TIMEOUT=30s",
		// 200 events a second instead of 500: each pipeline's mirror of
		// the ingress writes every event again, synced, and the stack
		// shares two cores with the rest of the tests.
		"WEIR_RATE=200",
	}
	run(t, ctx, root, env, "bash", filepath.Join(root, "deploy", "build-images.sh"))
	t.Logf("images built in %s", time.Since(start).Round(time.Second))
	checkSecretModes(t, filepath.Join(root, "deploy", "secrets"))

	// Every published port on a free host port, never a default one, so
	// the stack runs beside the user's and beside other tests.
	base := env
	var ports map[string]int
	pick := func() {
		ports = freePorts(t, portVariables(t, composeFile))
		env = slices.Clone(base)
		for name, p := range ports {
			env = append(env, fmt.Sprintf("%s=%d", name, p))
		}
	}
	pick()
	services := strings.Fields(string(output(t, ctx, root, env, compose[0], dc(project, "config", "--services")...)))

	t.Cleanup(func() {
		// Not ctx: it may be over; the stack must go in any case.
		ctx, cancel := context.WithTimeout(context.Background(), cleanupMargin-10*time.Second)
		defer cancel()
		if t.Failed() {
			cmd := exec.CommandContext(ctx, compose[0], dc(project, "logs", "--no-color", "--tail", "30")...)
			cmd.Env = append(os.Environ(), env...)
			out, _ := cmd.CombinedOutput()
			t.Logf("compose logs:\n%s", out)
		}
		cmd := exec.CommandContext(ctx, compose[0], dc(project, "down", "-v", "--remove-orphans", "-t", "10")...)
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("compose down: %v\n%s", err, out)
		}
	})
	up := time.Now()
	// A port found free can be taken by another process before Docker
	// binds it: then the stack comes down and up again on other ports.
	for attempt := 1; ; attempt++ {
		cmd := exec.CommandContext(ctx, compose[0], dc(project, "up", "-d")...)
		cmd.Dir, cmd.Env = root, append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		t.Logf("%s", out)
		if err == nil {
			break
		}
		if attempt == 3 || !bytes.Contains(out, []byte("address already in use")) {
			t.Fatalf("compose up: %v", err)
		}
		t.Logf("a chosen port was taken before Docker bound it; again on other ports")
		down := exec.CommandContext(ctx, compose[0], dc(project, "down", "-v", "--remove-orphans", "-t", "10")...)
		down.Dir, down.Env = root, append(os.Environ(), env...)
		if out, err := down.CombinedOutput(); err != nil {
			t.Fatalf("compose down: %v\n%s", err, out)
		}
		pick()
	}

	// Every service healthy.
	checkFor(t, ctx, 3*time.Minute, 2*time.Second, func() error {
		ids := strings.Fields(string(output(t, ctx, root, env, compose[0], dc(project, "ps", "-q")...)))
		if len(ids) < len(services) {
			return fmt.Errorf("%d containers, want %d", len(ids), len(services))
		}
		out := output(t, ctx, root, nil, "docker", append([]string{"inspect", "-f",
			"{{.Name}} {{if .State.Health}}{{.State.Health.Status}}{{else}}no-healthcheck{{end}} {{.State.Status}} {{.State.ExitCode}}"}, ids...)...)
		var bad []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			// A provisioning job is done when it exited with 0.
			job := len(f) == 4 && strings.Contains(f[0], "_provision-") && f[2] == "exited" && f[3] == "0"
			if !job && (len(f) != 4 || f[1] != "healthy") {
				bad = append(bad, line)
			}
		}
		if len(bad) > 0 {
			return fmt.Errorf("not healthy: %s", strings.Join(bad, "; "))
		}
		return nil
	})
	t.Logf("all %d services healthy %s after up", len(services), time.Since(up).Round(time.Second))
	checkLoopback(t, ctx, root, output(t, ctx, root, env, compose[0], dc(project, "ps", "-q")...))

	// Events and results flow: the ingress stream and the edges grow, the
	// result streams of q8 and q11 exist.
	// As the deployment's monitor, over TLS: the server admits no one
	// else from outside, and the monitor reads streams' state only.
	secrets := filepath.Join(root, "deploy", "secrets")
	monitor := natsconn.Auth{NKey: filepath.Join(secrets, "weir-monitor.nk"), InboxPrefix: "_INBOX_weir-monitor", CA: filepath.Join(secrets, "tls", "ca.pem"),
		Cert: filepath.Join(secrets, "tls", "weir-monitor.pem"), Key: filepath.Join(secrets, "tls", "weir-monitor-key.pem")}
	if nc, err := (natsconn.Auth{CA: monitor.CA, Cert: monitor.Cert, Key: monitor.Key}).Connect(fmt.Sprintf("tls://127.0.0.1:%d", ports["WEIR_NATS_PORT"]), nats.NoReconnect()); err == nil {
		nc.Close()
		t.Fatal("the stack's NATS admitted a client without credentials")
	}
	// A seed alone is not enough: the server verifies client certificates
	// (mutual TLS), so a stolen seed without its certificate is refused.
	stolen := monitor
	stolen.Cert, stolen.Key = "", ""
	if nc, err := stolen.Connect(fmt.Sprintf("tls://127.0.0.1:%d", ports["WEIR_NATS_PORT"]), nats.NoReconnect()); err == nil {
		nc.Close()
		t.Fatal("the stack's NATS admitted a user's seed without a client certificate")
	}
	nc, err := monitor.Connect(fmt.Sprintf("tls://127.0.0.1:%d", ports["WEIR_NATS_PORT"]))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The monitor asks each account for its streams' state under the
	// account's prefix ($JS.<account>.API): what each exports to it.
	js := func(account string) jetstream.JetStream {
		js, err := jetstream.NewWithAPIPrefix(nc, jsapi.Prefix(account))
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	first := map[string]uint64{}
	checkFor(t, ctx, 3*time.Minute, time.Second, func() error {
		var waiting []string
		for _, stream := range append(slices.Clone(grow), exist...) {
			n, err := messages(ctx, js, stream)
			if err != nil {
				waiting = append(waiting, err.Error())
				continue
			}
			if !slices.Contains(grow, stream) {
				continue
			}
			f, seen := first[stream]
			switch {
			case !seen:
				first[stream] = n
				waiting = append(waiting, fmt.Sprintf("%s: %d messages", stream, n))
			case n <= f:
				waiting = append(waiting, fmt.Sprintf("%s: still %d messages", stream, n))
			}
		}
		if len(waiting) > 0 {
			return fmt.Errorf("waiting for the streams to grow: %s", strings.Join(waiting, "; "))
		}
		return nil
	})
	for _, stream := range append(slices.Clone(grow), exist...) {
		n, _ := messages(ctx, js, stream)
		t.Logf("%-54s %6d messages", stream, n)
	}
	t.Logf("streams grow %s after up", time.Since(up).Round(time.Second))
	// Each pipeline is an account of its own: q5's administrator, the most
	// a compromised q5 process could hold, is in an account holding q5's
	// streams and buckets alone — nothing a stream's configuration there
	// does reaches the dedup pipeline's checkpoints.
	q5 := natsconn.Auth{NKey: filepath.Join(secrets, "nexmark-q5-admin.nk"), InboxPrefix: "_INBOX_nexmark-q5-admin", CA: monitor.CA,
		Cert: filepath.Join(secrets, "tls", "nexmark-q5-admin.pem"), Key: filepath.Join(secrets, "tls", "nexmark-q5-admin-key.pem")}
	qnc, err := q5.Connect(fmt.Sprintf("tls://127.0.0.1:%d", ports["WEIR_NATS_PORT"]))
	if err != nil {
		t.Fatal(err)
	}
	defer qnc.Close()
	qjs, err := jetstream.New(qnc)
	if err != nil {
		t.Fatal(err)
	}
	q5Contract, err := contracts.Shipped("nexmark-q5")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := provision.PlanFor([]*contracts.Contract{q5Contract}, provision.Options{Accounts: true})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := qjs.AccountInfo(ctx); err != nil || info.Streams != len(plan.Declared) {
		t.Fatalf("q5's administrator's account holds %+v streams (%v), want q5's %d alone", info, err, len(plan.Declared))
	}

	// The ingest gateway stores what a producer POSTs, in the same ingress
	// — a producer with its token (build-images.sh: weir auth -producers
	// compose), and no one without.
	body := fmt.Sprintf(`{"id":"compose-gw-1","key":"gw","ts":%d,"type":"bid"}`+"\n", time.Now().UnixMilli())
	token, err := os.ReadFile(filepath.Join(secrets, "nexmark-gateway-compose.token"))
	if err != nil {
		t.Fatal(err)
	}
	post := func(token string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v1/events", ports["WEIR_INGEST_PORT"]), strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-ndjson")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, answer
	}
	if resp, answer := post(""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST /v1/events without a token: %s %s, want 401", resp.Status, answer)
	}
	resp, answer := post(strings.TrimSpace(string(token)))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(answer), `"accepted":1`) {
		t.Fatalf("POST /v1/events: %s %s", resp.Status, answer)
	}
	t.Logf("ingest gateway: %s", strings.TrimSpace(string(answer)))
	// What the gateway stored is sealed on the server's disk: a copy of
	// the NATS volume does not show it.
	checkStoreSealed(t, ctx, root, strings.TrimSpace(string(output(t, ctx, root, env, compose[0], dc(project, "ps", "-q", "nats")...))), "compose-gw-1")

	// Every coordinator leads its pipeline, has completed a checkpoint,
	// and says so on its status page.
	pages := statusPages(t)
	for _, v := range slices.Sorted(maps.Keys(pages)) {
		pipeline := pages[v]
		url := fmt.Sprintf("http://127.0.0.1:%d/status.json", ports[v])
		checkFor(t, ctx, 2*time.Minute, time.Second, func() error {
			s, err := getStatus(ctx, url)
			switch {
			case err != nil:
				return err
			case s.Pipeline != pipeline:
				return fmt.Errorf("%s shows pipeline %q, want %q", url, s.Pipeline, pipeline)
			case s.Leader == "":
				return fmt.Errorf("%s: no coordinator leads %s", url, pipeline)
			case s.Latest == nil || s.Latest.ID == 0:
				return fmt.Errorf("%s: no completed checkpoint of %s yet (%d records; problems: %q)", url, pipeline, len(s.Checkpoints), s.Problems)
			}
			for _, c := range s.Checkpoints {
				if c.Status == "complete" && c.Acks == c.Expected && c.Expected > 0 {
					t.Logf("%-11s leader %s, checkpoint %d complete (%d acks in %s) %s after up",
						pipeline, s.Leader, s.Latest.ID, c.Acks, time.Duration(c.Took).Round(time.Millisecond), time.Since(up).Round(time.Second))
					return nil
				}
			}
			return fmt.Errorf("%s: latest %d but no complete checkpoint record among %d", url, s.Latest.ID, len(s.Checkpoints))
		})
	}

	// The auction flow's dispatcher performs the outbox's charges at the
	// provider simulator.
	checkFor(t, ctx, 2*time.Minute, time.Second, func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/effects", ports["WEIR_PROVIDER_PORT"]), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var effects []struct {
			Key  string `json:"key"`
			Kind string `json:"kind"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&effects); err != nil || resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /effects: %s, %v", resp.Status, err)
		}
		if len(effects) == 0 {
			return errors.New("the provider has performed no charge yet")
		}
		for _, e := range effects {
			if e.Kind != "charges" || e.Key == "" {
				return fmt.Errorf("effect %+v: want a charge with its idempotency key", e)
			}
		}
		t.Logf("the provider performed %d charges %s after up", len(effects), time.Since(up).Round(time.Second))
		return nil
	})

	// Traces show in Jaeger: the generator's and dedup's spans reached it,
	// and its port serves the trace UI.
	jaeger := fmt.Sprintf("http://127.0.0.1:%d", ports["WEIR_JAEGER_UI_PORT"])
	checkFor(t, ctx, 2*time.Minute, time.Second, func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, jaeger+"/api/services", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var body struct {
			Data []string `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /api/services: %s, %v", resp.Status, err)
		}
		for _, want := range []string{"nexmark-gen", "dedup"} {
			if !slices.Contains(body.Data, want) {
				return fmt.Errorf("Jaeger has traces of %q, not yet of %s", body.Data, want)
			}
		}
		t.Logf("Jaeger has traces of %q", body.Data)
		return nil
	})
	checkFor(t, ctx, time.Minute, time.Second, func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, jaeger+"/search?service=dedup", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		page, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "weir traces") {
			return fmt.Errorf("GET /search: %s, not the trace UI:\n%.300s", resp.Status, page)
		}
		return nil
	})
	// Every process ran as its own user, and the server denied none of
	// them anything — but answers to another pipeline's asking: a
	// coordinator discovers instances with $SRV.INFO, which every
	// pipeline's services hear, and a process answers only its own
	// pipeline's administrator and coordinator (access: no
	// allow_responses). Those denials are the isolation working.
	var denied []string
	answers := 0
	for _, line := range strings.Split(string(output(t, ctx, root, env, compose[0], dc(project, "logs", "--no-color", "nats")...)), "\n") {
		switch {
		case strings.Contains(line, `Publish Violation - Subject "_ANSWER_`):
			answers++
		case strings.Contains(line, "Violation"):
			denied = append(denied, line)
		}
	}
	if len(denied) > 0 {
		t.Errorf("NATS denied the stack's processes %d times, first: %s", len(denied), denied[0])
	}
	t.Logf("NATS denied %d answers to another pipeline's discovery", answers)
	t.Logf("compose test took %s (without taking the stack down)", time.Since(start).Round(time.Second))
}

// status is what the test reads of a coordinator's /status.json.
type status struct {
	Pipeline string `json:"pipeline"`
	Leader   string `json:"leader"`
	Latest   *struct {
		ID uint64 `json:"id"`
	} `json:"latest"`
	Checkpoints []struct {
		ID       uint64 `json:"id"`
		Status   string `json:"status"`
		Took     int64  `json:"took"`
		Acks     int    `json:"acks"`
		Expected int    `json:"expected"`
	} `json:"checkpoints"`
	// Problems says what the page could not gather, and the age of a
	// status it serves again because a gathering failed.
	Problems []string `json:"problems"`
}

func getStatus(ctx context.Context, url string) (status, error) {
	var s status
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return s, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// composeCommand is `docker compose` when the plugin is there, else
// docker-compose, else nil.
func composeCommand() []string {
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}
	}
	return nil
}

// cachedJaeger is where deploy/build-images.sh takes the Jaeger binary
// from, and whether it is there.
func cachedJaeger() (string, bool) {
	bin := os.Getenv("WEIR_JAEGER_BIN")
	if bin == "" {
		cache := os.Getenv("WEIR_CACHE_DIR")
		if cache == "" {
			base := os.Getenv("XDG_CACHE_HOME")
			if base == "" {
				base = filepath.Join(os.Getenv("HOME"), ".cache")
			}
			cache = filepath.Join(base, "weir")
		}
		version := cmpOr(os.Getenv("WEIR_JAEGER_VERSION"), "v1.76.0")
		arch := cmpOr(os.Getenv("GOARCH"), runtime.GOARCH)
		bin = filepath.Join(cache, "jaeger-"+version+"-linux-"+arch, "jaeger")
	}
	fi, err := os.Stat(bin)
	return bin, err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

func cmpOr(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

func imagePrefix() string { return cmpOr(os.Getenv("WEIR_IMAGE_PREFIX"), "weir") }

// removeStale takes down the stacks of earlier test runs whose process is
// gone (killed by a timeout or a signal before its cleanup ran). Only for
// a local engine: process IDs mean nothing on another machine.
func removeStale(t *testing.T, root, compose string, dc func(string, ...string) []string) {
	t.Helper()
	if h := os.Getenv("DOCKER_HOST"); h != "" && !strings.HasPrefix(h, "unix://") {
		return
	}
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label=com.docker.compose.project",
		"--format", `{{.Label "com.docker.compose.project"}}`).Output()
	if err != nil {
		return
	}
	seen := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(strings.TrimPrefix(p, projectPrefix))
		if seen[p] || !strings.HasPrefix(p, projectPrefix) || err != nil || pid == os.Getpid() {
			continue
		}
		seen[p] = true
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue // still running, or not ours to judge
		}
		cmd := exec.Command(compose, dc(p, "down", "-v", "--remove-orphans", "-t", "5")...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "WEIR_IMAGE_TAG="+testTag)
		out, err := cmd.CombinedOutput()
		t.Logf("removed the stack %s of a test run that is gone: %v\n%s", p, err, out)
	}
}

// portVariables are the WEIR_*_PORT variables of the host ports
// compose.yaml publishes.
func portVariables(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range regexp.MustCompile(`\$\{(WEIR_[A-Z0-9_]+_PORT):-[0-9]+\}`).FindAllStringSubmatch(string(b), -1) {
		if !slices.Contains(names, m[1]) {
			names = append(names, m[1])
		}
	}
	for _, want := range []string{"WEIR_NATS_PORT", "WEIR_JAEGER_UI_PORT"} {
		if !slices.Contains(names, want) {
			t.Fatalf("%s publishes no port as ${%s:-...}", file, want)
		}
	}
	for v := range statusPages(t) {
		if !slices.Contains(names, v) {
			t.Fatalf("%s publishes no port as ${%s:-...}", file, v)
		}
	}
	return names
}

// freePorts gives each name a TCP port nothing listens on right now, all
// different.
func freePorts(t *testing.T, names []string) map[string]int {
	t.Helper()
	ports := map[string]int{}
	for _, name := range names {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close() // held until all are chosen, so none twice
		ports[name] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// messages is the number of messages stream holds.
func messages(ctx context.Context, js func(account string) jetstream.JetStream, accountStream string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	account, stream, _ := strings.Cut(accountStream, "/")
	info, err := jsapi.Listed(ctx, js(account), stream)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", stream, err)
	}
	return info.State.Msgs, nil
}

// run runs a command in dir with extra environment, streaming its output
// into the test log, and fails the test if it fails.
func run(t *testing.T, ctx context.Context, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = t.Output()
	cmd.Stderr = t.Output()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
}

// output runs a command and returns its standard output.
func output(t *testing.T, ctx context.Context, dir string, env []string, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

// checkFor polls f every interval until it returns nil, failing the test
// with f's last error after timeout or when ctx ends.
func checkFor(t *testing.T, ctx context.Context, timeout, interval time.Duration, f func() error) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := f()
		if err == nil {
			return
		}
		select {
		case <-deadline.C:
			t.Fatalf("after %s: %v", timeout, err)
		case <-ctx.Done():
			t.Fatalf("%v (test deadline or interrupt): %v", context.Cause(ctx), err)
		case <-tick.C:
		}
	}
}
