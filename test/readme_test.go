package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/pkg/ingress"
	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream/streamtest"
)

// readmeCommands returns the shell commands of the README's sh blocks, in
// order, each with its continuation lines joined.
func readmeCommands(t *testing.T, root string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	in := false
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "```sh":
			in = true
		case in && line == "```":
			in = false
		case in:
			if s, ok := strings.CutSuffix(line, `\`); ok {
				cur.WriteString(s + " ")
				continue
			}
			cur.WriteString(line)
			if c := strings.TrimSpace(cur.String()); c != "" {
				cmds = append(cmds, c)
			}
			cur.Reset()
		}
	}
	if len(cmds) < 10 {
		t.Fatalf("found %d commands in the README's sh blocks; the parser is broken", len(cmds))
	}
	return cmds
}

// readmeRun is one README command running from the repository's root in
// a shell, with its output gathered.
type readmeRun struct {
	cmd  *exec.Cmd
	out  syncBuffer
	done chan struct{} // closed when the command ended, err set
	err  error
}

func (r *readmeRun) output() string { return r.out.String() }

// stop ends the command (and what it started) and waits for it.
func (r *readmeRun) stop() {
	select {
	case <-r.done:
		return
	default:
	}
	_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	<-r.done
}

func startReadme(t *testing.T, root, line string, env []string, stdin string) *readmeRun {
	t.Helper()
	r := &readmeRun{done: make(chan struct{})}
	r.cmd = exec.Command("sh", "-c", line)
	r.cmd.Dir = root
	r.cmd.Env = append(os.Environ(), env...)
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	r.cmd.Stdin = strings.NewReader(stdin)
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(r.stop)
	return r
}

// runReadme runs a README command to its end, within a minute.
func runReadme(t *testing.T, root, line string, env []string) (string, error) {
	t.Helper()
	r := startReadme(t, root, line, env, "")
	select {
	case <-r.done:
		return r.output(), r.err
	case <-time.After(2 * time.Minute):
		r.stop()
		t.Fatalf("%s: still running after 2 minutes:\n%s", line, r.output())
	}
	return "", nil
}

// awaitReadme starts a long-running README command and waits until its
// output matches want, then stops it.
func awaitReadme(t *testing.T, root, line string, env []string, want *regexp.Regexp, stdin string) {
	t.Helper()
	r := startReadme(t, root, line, env, stdin)
	defer r.stop()
	streamtest.CheckFor(t, 90*time.Second, func() error {
		if want.MatchString(r.output()) {
			return nil
		}
		select {
		case <-r.done:
			return fmt.Errorf("ended (%v) before printing %s:\n%s", r.err, want, r.output())
		default:
		}
		return fmt.Errorf("no %s yet", want)
	}, func() string { return r.output() })
}

// TestReadmeExamples pastes the README's examples as a new user would,
// against `weir demo -query all` (and, for the examples that run a service
// on its own, a NATS server of their own): every command of an sh block is
// checked, or skipped with its reason in this test, and a command nobody
// accounted for fails it. Only addresses and directories are rewritten:
// nats://127.0.0.1:4222 to the demo's server, /var/lib/weir and
// /new/deployment/dir to temporary directories. The nats CLI examples run
// when the nats CLI is installed (.ci/run installs it).
func TestReadmeExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo and every README example")
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..")
	natsCLI := true
	if _, err := exec.LookPath("nats"); err != nil {
		natsCLI = false
		t.Log("the nats CLI is not installed (go install github.com/nats-io/natscli/nats@v0.5.0): its examples are not run")
	}

	// The demo, as the README's first line runs it, on a port of its own.
	port := freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	demoDir := t.TempDir()
	providerAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	demo := startReadme(t, root, fmt.Sprintf("go run ./cmd/weir demo -query all -port %d -status '' -rate 300 -data %s -provider %s", port, demoDir, providerAddr), nil, "")
	streamtest.CheckFor(t, 2*time.Minute, func() error {
		if !strings.Contains(demo.output(), "generated") {
			return fmt.Errorf("the demo is not running yet")
		}
		return nil
	}, demo.output)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)

	// A second server for the services run on their own, with the ingress
	// stream a user's producer (or the generator) would have created.
	side := natstest.Run(t)
	sideJS, _ := jetstream.New(side.Connect(t))
	dedupContract := loadContract(t)
	if _, err := ingress.Create(context.Background(), sideJS, dedupContract.Ingress, 1); err != nil {
		t.Fatal(err)
	}

	tmp := t.TempDir()
	rewrite := strings.NewReplacer("nats://127.0.0.1:4222", url, "127.0.0.1:8090", providerAddr,
		"/var/lib/weir", filepath.Join(tmp, "var-lib-weir"), "/new/deployment/dir", filepath.Join(tmp, "new-deployment"))
	demoEnv := []string{"NATS_URL=" + url}
	sideEnv := []string{"NATS_URL=" + side.ClientURL()}
	sideRewrite := strings.NewReplacer("nats://127.0.0.1:4222", side.ClientURL(), "/var/lib/weir", filepath.Join(tmp, "var-lib-weir"))
	running := regexp.MustCompile(`"msg":"running"`)
	gatewayRewrite := strings.NewReplacer("127.0.0.1:8088", fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	outer := t

	type example struct {
		match *regexp.Regexp
		skip  string // why a command is not run here
		check func(t *testing.T, line string)
	}
	nats := func(check func(t *testing.T, line string)) func(t *testing.T, line string) {
		return func(t *testing.T, line string) {
			if !natsCLI {
				t.Logf("not run (no nats CLI): %s", line)
				return
			}
			check(t, line)
		}
	}
	examples := []example{
		{match: regexp.MustCompile(`^go run \./cmd/weir demo\s`), skip: "this test runs the demo itself, on a port of its own"},
		{match: regexp.MustCompile(`^go test (-timeout \S+ )?\./\.\.\.`), skip: "CI runs it (.ci/run)"},
		{match: regexp.MustCompile(`^go run \./cmd/weir bench nexmark `), skip: "minutes long; internal/harness's TestBenchNexmark runs every mode on a small run"},
		{match: regexp.MustCompile(`^go run \./cmd/weir chaos `), skip: "a minute or more; internal/harness's TestChaos runs a short seeded sample"},
		{match: regexp.MustCompile(`^ts=.*nats pub nexmark\.events\.0 `), check: nats(func(t *testing.T, line string) {
			if out, err := runReadme(t, root, line, demoEnv); err != nil {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
			// It comes out of dedup, and no pipeline files it.
			streamtest.CheckFor(t, time.Minute, func() error {
				for _, m := range streamtest.Messages(t, js, edge.StreamName("nexmark", "events")) {
					var ev struct{ ID string }
					if json.Unmarshal(m.Data(), &ev) == nil && ev.ID == "my-1" {
						return nil
					}
				}
				return fmt.Errorf("my-1 is not among the deduplicated events")
			})
			for _, name := range contracts.ShippedNames() {
				c, _ := contracts.Shipped(name)
				for _, m := range streamtest.Messages(t, js, deadletter.StreamName(c.Pipeline)) {
					if bytes.Contains(m.Data(), []byte(`"my-1"`)) {
						l, _ := deadletter.Parse(m)
						t.Errorf("the README's event was filed by %s of %s: %s: %s", l.Operator, c.Pipeline, l.Field, l.Reason)
					}
				}
			}
		})},
		{match: regexp.MustCompile(`^go run \./services/ingest/cmd/ingest `), check: func(t *testing.T, line string) {
			// It keeps serving for the next example, until the test ends.
			gw := startReadme(outer, root, gatewayRewrite.Replace(rewrite.Replace(line)), demoEnv, "")
			streamtest.CheckFor(t, 90*time.Second, func() error {
				if !strings.Contains(gw.output(), `"msg":"serving"`) {
					return fmt.Errorf("the gateway is not serving yet")
				}
				return nil
			}, gw.output)
		}},
		{match: regexp.MustCompile(`^ts=.*\| curl -s --data-binary @- http://127\.0\.0\.1:8088/v1/events$`), check: func(t *testing.T, line string) {
			before := time.Now()
			out, err := runReadme(t, root, gatewayRewrite.Replace(line), demoEnv)
			if err != nil || !strings.Contains(out, `{"accepted":2}`) {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
			// Both come out of dedup: read its output from the POST on.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			st, err := js.Stream(ctx, edge.StreamName("nexmark", "events"))
			if err != nil {
				t.Fatal(err)
			}
			cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &before})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]bool{"gw-1": true, "gw-2": true}
			for len(want) > 0 {
				m, err := cons.Next(jetstream.FetchContext(ctx))
				if err != nil {
					t.Fatalf("%v waiting for %v among the deduplicated events", err, want)
				}
				var ev struct{ ID string }
				if json.Unmarshal(m.Data(), &ev) == nil {
					delete(want, ev.ID)
				}
			}
		}},
		{match: regexp.MustCompile(`^go run \./cmd/weir tail `), check: func(t *testing.T, line string) {
			out, err := runReadme(t, root, rewrite.Replace(line), demoEnv)
			if err != nil || strings.Count(out, `"kind":`) < 10 {
				t.Errorf("%s: %v\n%s", line, err, out)
			}
		}},
		{match: regexp.MustCompile(`^nats sub 'weir\.nexmark-q7\.results\.>'`), check: nats(func(t *testing.T, line string) {
			awaitReadme(t, root, line, demoEnv, regexp.MustCompile(`(?s)Received on "weir\.nexmark-q7\.results\.0".*"window"`), "")
		})},
		{match: regexp.MustCompile(`^nats stream view WEIR_NEXMARK_Q7_RESULTS`), check: nats(func(t *testing.T, line string) {
			// It pages, as in a terminal: script gives it one.
			awaitReadme(t, root, "script -qec "+shellQuote(line)+" /dev/null", demoEnv, regexp.MustCompile(`\[1\] Subject: weir\.nexmark-q7\.results`), "n\n")
		})},
		{match: regexp.MustCompile(`^curl -s http://127\.0\.0\.1:8090/effects `), check: func(t *testing.T, line string) {
			// Charges come once an auction has closed and the checkpoint
			// after its close has completed.
			streamtest.CheckFor(t, 2*time.Minute, func() error {
				out, err := runReadme(t, root, rewrite.Replace(line), demoEnv)
				if err != nil || !strings.Contains(out, `"kind":"charges"`) || !strings.Contains(out, `"bidder":`) {
					return fmt.Errorf("no charge yet: %v: %s", err, out)
				}
				return nil
			})
		}},
		{match: regexp.MustCompile(`^go run \./cmd/weir effects list .*-pipeline nexmark-winning-bids`), check: func(t *testing.T, line string) {
			streamtest.CheckFor(t, 2*time.Minute, func() error {
				out, err := runReadme(t, root, rewrite.Replace(line), demoEnv)
				if err != nil || !strings.Contains(out, `"done":true`) {
					return fmt.Errorf("no outcome yet: %v: %s", err, out)
				}
				return nil
			})
		}},
		{match: regexp.MustCompile(`^go run \./cmd/weir capacity `), check: func(t *testing.T, line string) {
			out, err := runReadme(t, root, rewrite.Replace(line), demoEnv)
			for _, want := range []string{"arrival", "catch-up", "required retention", "replay at recovery"} {
				if err != nil || !strings.Contains(out, want) {
					t.Fatalf("%s: %v: no %q in\n%s", line, err, want, out)
				}
			}
		}},
		{match: regexp.MustCompile(`^go run \./cmd/weir checkpoint list `), check: func(t *testing.T, line string) {
			streamtest.CheckFor(t, time.Minute, func() error {
				out, err := runReadme(t, root, rewrite.Replace(line), demoEnv)
				if err != nil || !strings.Contains(out, "complete") {
					return fmt.Errorf("%v: %s", err, out)
				}
				return nil
			})
		}},
		{match: regexp.MustCompile(`^go run \./cmd/weir savepoint create before-upgrade `), check: func(t *testing.T, line string) {
			if out, err := runReadme(t, root, rewrite.Replace(line), demoEnv); err != nil || !strings.Contains(out, "complete") {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
		}},
		{match: regexp.MustCompile(`^go run \./cmd/weir savepoint restore before-upgrade `), check: func(t *testing.T, line string) {
			out, err := runReadme(t, root, rewrite.Replace(line), demoEnv)
			if err != nil || !strings.Contains(out, "restored") {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
			if _, err := os.Stat(filepath.Join(tmp, "new-deployment", "dedup", "state")); err != nil {
				t.Errorf("the savepoint is not in the new deployment's directory: %v", err)
			}
		}},
		{match: regexp.MustCompile(`^go run \./cmd/weir recover -pipeline nexmark$`), check: func(t *testing.T, line string) {
			out, err := runReadme(t, root, rewrite.Replace(line), demoEnv)
			if err != nil || !strings.Contains(out, "no instance refuses to start") || !strings.Contains(out, "savepoint before-upgrade") {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
		}},
		{match: regexp.MustCompile(`^go run \./cmd/weir audit -pipeline nexmark$`), check: func(t *testing.T, line string) {
			out, err := runReadme(t, root, rewrite.Replace(line), demoEnv)
			if err != nil || !strings.Contains(out, "savepoint-restore") || !strings.Contains(out, "before-upgrade") {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
		}},
		{match: regexp.MustCompile(`^deploy/build-images\.sh && docker compose up`), skip: "deploy.TestCompose builds the images and runs the stack wherever Docker is"},
		{match: regexp.MustCompile(`^go run \./services/dedup/cmd/dedup `), check: func(t *testing.T, line string) {
			awaitReadme(t, root, sideRewrite.Replace(line), sideEnv, running, "")
		}},
		{match: regexp.MustCompile(`^go run \./services/nexmark-q7/cmd/nexmark-q7 `), check: func(t *testing.T, line string) {
			awaitReadme(t, root, sideRewrite.Replace(line), sideEnv, running, "")
		}},
		{match: regexp.MustCompile(`^go run \./services/nexmark-gen/cmd/nexmark-gen -h$`), check: func(t *testing.T, line string) {
			if out, err := runReadme(t, root, line, nil); err != nil || !strings.Contains(out, "-rate") {
				t.Errorf("%s: %v\n%s", line, err, out)
			}
		}},
		{match: regexp.MustCompile(`^go run \./cmd/weir scale -pipeline nexmark-q11 `), check: func(t *testing.T, line string) {
			// A pipeline rescales from a completed checkpoint: the demo's
			// coordinator takes one every 10 s.
			streamtest.CheckFor(t, time.Minute, func() error {
				out, err := runReadme(t, root, line, demoEnv)
				if err != nil || !regexp.MustCompile(`(?m)^q11-sessions\s+a\s`).MatchString(out) {
					return fmt.Errorf("%v: %s", err, out)
				}
				return nil
			})
		}},
		{match: regexp.MustCompile(`^go run \./cmd/weir contract lint contracts/\*\.yaml$`), check: func(t *testing.T, line string) {
			if out, err := runReadme(t, root, line, nil); err != nil || !strings.Contains(out, "file(s) ok") {
				t.Errorf("%s: %v\n%s", line, err, out)
			}
		}},
		{match: regexp.MustCompile(`^go run \./cmd/weir contract lint contracts/testdata/bad-\*\.yaml`), check: func(t *testing.T, line string) {
			out, err := runReadme(t, root, line, nil)
			if err == nil || strings.Count(out, "; fix: ") < 10 {
				t.Errorf("%s: want a refusal with one line per problem, got %v:\n%s", line, err, out)
			}
		}},
	}
	for _, line := range readmeCommands(t, root) {
		var ex *example
		for i := range examples {
			if examples[i].match.MatchString(line) {
				ex = &examples[i]
				break
			}
		}
		switch {
		case ex == nil:
			t.Errorf("the README's example %q is checked by nobody: add it to TestReadmeExamples", line)
		case ex.skip != "":
			t.Logf("not run here (%s): %s", ex.skip, line)
		default:
			t.Run(ex.match.String(), func(t *testing.T) { ex.check(t, line) })
		}
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
