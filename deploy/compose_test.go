// Package deploy_test brings the whole compose stack up and checks that it
// works: every container healthy, events and results flowing through
// JetStream, Jaeger answering.
//
// It runs only with WEIR_COMPOSE_TEST=1: building the images compiles
// Jaeger, about ten minutes cold on two cores, which `go test ./...` in CI
// cannot afford. See deploy/README.md.
package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// project is the compose project name, so the test never touches a stack
// the user brought up with the default name.
const project = "weirtest"

// services are the services of compose.yaml; each must become healthy.
var services = []string{"nats", "jaeger", "nexmark-gen", "dedup", "nexmark-q7", "nexmark-q11"}

func TestCompose(t *testing.T) {
	if os.Getenv("WEIR_COMPOSE_TEST") != "1" {
		t.Skip("set WEIR_COMPOSE_TEST=1 to build the images and run the compose stack (a cold Jaeger build takes ~10 minutes)")
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		t.Skipf("no Docker engine reachable (docker info: %v)", err)
	}
	compose := composeCommand()
	if compose == nil {
		t.Skip("neither `docker compose` nor docker-compose is installed")
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..")
	start := time.Now()

	// Build the images.
	run(t, root, nil, 25*time.Minute, "bash", filepath.Join(root, "deploy", "build-images.sh"))
	t.Logf("images built in %s", time.Since(start).Round(time.Second))

	// Bring the stack up on free host ports, beside any other stack.
	ports := map[string]int{}
	for _, name := range []string{"NATS", "NATS_MONITOR", "JAEGER_UI", "OTLP_GRPC", "OTLP_HTTP", "GEN_METRICS", "DEDUP_METRICS", "Q7_METRICS", "Q11_METRICS"} {
		ports[name] = freePort(t)
	}
	var env []string
	for name, p := range ports {
		env = append(env, fmt.Sprintf("WEIR_%s_PORT=%d", name, p))
	}
	dc := func(args ...string) []string {
		return append(append(compose[1:len(compose):len(compose)], "-p", project, "-f", filepath.Join(root, "compose.yaml")), args...)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command(compose[0], dc("logs", "--no-color", "--tail", "40")...).CombinedOutput()
			t.Logf("compose logs:\n%s", out)
		}
		cmd := exec.Command(compose[0], dc("down", "-v", "--remove-orphans")...)
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("compose down: %v\n%s", err, out)
		}
	})
	up := time.Now()
	run(t, root, env, 5*time.Minute, compose[0], dc("up", "-d")...)

	// Every service healthy.
	checkFor(t, 3*time.Minute, 2*time.Second, func() error {
		ids := strings.Fields(string(output(t, root, env, compose[0], dc("ps", "-q")...)))
		if len(ids) < len(services) {
			return fmt.Errorf("%d containers, want %d", len(ids), len(services))
		}
		out := output(t, root, nil, "docker", append([]string{"inspect", "-f",
			"{{.Name}} {{if .State.Health}}{{.State.Health.Status}}{{else}}no-healthcheck{{end}} {{.State.Status}}"}, ids...)...)
		var bad []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Fields(line); len(f) != 3 || f[1] != "healthy" {
				bad = append(bad, line)
			}
		}
		if len(bad) > 0 {
			return fmt.Errorf("not healthy: %s", strings.Join(bad, "; "))
		}
		return nil
	})
	t.Logf("all %d services healthy %s after up", len(services), time.Since(up).Round(time.Second))

	// Events and results flow: the ingress stream and the edges grow.
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", ports["NATS"]))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, stream := range []string{"NEXMARK", "WEIR_NEXMARK_DEDUPED", "WEIR_NEXMARK_Q7_BIDS", "WEIR_NEXMARK_Q7_RESULTS", "WEIR_NEXMARK_Q11_BIDS"} {
		first := uint64(0)
		checkFor(t, 3*time.Minute, time.Second, func() error {
			n, err := messages(t.Context(), js, stream)
			switch {
			case err != nil:
				return err
			case first == 0:
				first = n
				return fmt.Errorf("%s: %d messages; waiting for it to grow", stream, n)
			case n <= first:
				return fmt.Errorf("%s: still %d messages", stream, n)
			}
			t.Logf("%s grows: %d → %d messages (%s after up)", stream, first, n, time.Since(up).Round(time.Second))
			return nil
		})
	}

	// Jaeger's query API answers.
	checkFor(t, time.Minute, time.Second, func() error {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/services", ports["JAEGER_UI"]))
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
		t.Logf("Jaeger knows services %q", body.Data)
		return nil
	})
	t.Logf("compose test took %s", time.Since(start).Round(time.Second))
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

// messages is the number of messages stream holds.
func messages(ctx context.Context, js jetstream.JetStream, stream string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", stream, err)
	}
	return info.State.Msgs, nil
}

// run runs a command in dir with extra environment, streaming its output
// into the test log, and fails the test if it fails.
func run(t *testing.T, dir string, env []string, timeout time.Duration, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
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
func output(t *testing.T, dir string, env []string, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
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

// freePort is a TCP port nothing listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	n, _ := strconv.Atoi(p)
	return n
}

// checkFor polls f every interval until it returns nil, failing the test
// with f's last error after timeout.
func checkFor(t *testing.T, timeout, interval time.Duration, f func() error) {
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
		case <-tick.C:
		}
	}
}
