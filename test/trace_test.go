package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/pkg/telemetry"
	"github.com/weirflow/weir/services/dedup"
	nexmarkgen "github.com/weirflow/weir/services/nexmark-gen"
)

// jaegerBinary finds a Jaeger v2 binary: WEIR_JAEGER_BIN, or the one
// deploy/build-images.sh (and .ci/run) builds and caches.
func jaegerBinary() string {
	if b := os.Getenv("WEIR_JAEGER_BIN"); b != "" {
		return b
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	b := filepath.Join(cache, "weir", "jaeger-v1.76.0-"+runtime.GOOS+"-"+runtime.GOARCH, "jaeger")
	if _, err := os.Stat(b); err == nil {
		return b
	}
	return ""
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startJaeger runs a real Jaeger v2, serving weir's trace UI
// (deploy/jaeger-ui) on its query port, and returns its OTLP endpoint and
// query base URL.
func startJaeger(t *testing.T) (otlp, query string) {
	t.Helper()
	bin := jaegerBinary()
	if bin == "" {
		t.Skip("no Jaeger binary: set WEIR_JAEGER_BIN, or run deploy/build-images.sh jaeger (or .ci/run), which builds and caches one")
	}
	_, file, _, _ := runtime.Caller(0)
	cfg := filepath.Join(filepath.Dir(file), "testdata", "jaeger.yaml")
	// A port found free can be taken by another test before Jaeger binds
	// it, and Jaeger then exits at once: start it again on other ports,
	// rather than wait for an answer that cannot come.
	var ports map[string]int
	for attempt := 1; ; attempt++ {
		ports = map[string]int{}
		for _, k := range []string{"WEIR_JAEGER_QUERY_PORT", "WEIR_JAEGER_QUERY_GRPC_PORT", "WEIR_JAEGER_HEALTH_PORT", "WEIR_JAEGER_OTLP_PORT"} {
			ports[k] = freePort(t)
		}
		cmd := exec.Command(bin, "--config=file:"+cfg)
		cmd.Env = append(os.Environ(), "WEIR_JAEGER_UI_DIR="+filepath.Join(filepath.Dir(file), "..", "deploy", "jaeger-ui"))
		for k, p := range ports {
			cmd.Env = append(cmd.Env, k+"="+strconv.Itoa(p))
		}
		var stderr syncBuffer
		cmd.Stderr = &stderr
		if testing.Verbose() {
			cmd.Stderr = io.MultiWriter(os.Stderr, &stderr)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() {
			_ = cmd.Wait()
			close(exited)
		}()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
		})
		query = fmt.Sprintf("http://127.0.0.1:%d", ports["WEIR_JAEGER_QUERY_PORT"])
		err := jaegerAnswers(query, exited, 90*time.Second)
		if err == nil {
			break
		}
		if !errors.Is(err, errJaegerExited) || attempt == 3 {
			t.Fatalf("Jaeger (attempt %d): %v; its log:\n%s", attempt, err, stderr.String())
		}
		t.Logf("Jaeger exited at start (attempt %d), starting it on other ports; its log:\n%s", attempt, stderr.String())
	}
	return fmt.Sprintf("http://127.0.0.1:%d/v1/traces", ports["WEIR_JAEGER_OTLP_PORT"]), query
}

var errJaegerExited = errors.New("Jaeger exited")

// jaegerAnswers waits until Jaeger's query API at query answers, Jaeger
// exits, or within passes.
func jaegerAnswers(query string, exited <-chan struct{}, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get(query + "/api/services")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("query API: %s", resp.Status)
		}
		select {
		case <-exited:
			return errJaegerExited
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer within %s: %w", within, err)
		}
	}
}

// jaegerTraces is the part of Jaeger's /api/traces answer the test reads.
type jaegerTraces struct {
	Data []jaegerTrace `json:"data"`
}

type jaegerTrace struct {
	TraceID string `json:"traceID"`
	Spans   []struct {
		OperationName string `json:"operationName"`
		ProcessID     string `json:"processID"`
	} `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

// services counts the trace's spans by service.
func (tr jaegerTrace) services() map[string]int {
	n := map[string]int{}
	for _, s := range tr.Spans {
		n[tr.Processes[s.ProcessID].ServiceName]++
	}
	return n
}

// chromium finds a Chromium or Chrome binary, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no headless browser: install Chromium to check the trace UI (Debian/Ubuntu: apt-get install chromium)")
	return ""
}

// browse loads url in headless Chromium, lets its scripts fetch from the
// query API and render, and returns what Chromium prints (the rendered DOM
// with --dump-dom).
func browse(t *testing.T, bin, url string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args = append([]string{"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=5000"}, args...)
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v %s: %v\n%s", bin, args, url, err, stderr.String())
	}
	return string(out)
}

// mainElement is the <main> element of a dumped DOM, cut short.
func mainElement(dom string) string {
	if i := strings.Index(dom, "<main"); i >= 0 {
		dom = dom[i:]
	}
	if len(dom) > 4000 {
		dom = dom[:4000] + "..."
	}
	return dom
}

// getTrace reads one trace from the query API.
func getTrace(query, id string) (jaegerTrace, error) {
	resp, err := http.Get(query + "/api/traces/" + id)
	if err != nil {
		return jaegerTrace{}, err
	}
	defer resp.Body.Close()
	var tr jaegerTraces
	if err := json.NewDecoder(resp.Body).Decode(&tr); err != nil {
		return jaegerTrace{}, err
	}
	if len(tr.Data) != 1 {
		return jaegerTrace{}, fmt.Errorf("trace %s: %s, %d traces", id, resp.Status, len(tr.Data))
	}
	return tr.Data[0], nil
}

// checkTraceUI loads weir's trace UI (deploy/jaeger-ui) from Jaeger's query
// port in headless Chromium: a search for service lists the trace with its
// span count and services, and the trace's page draws a waterfall with a
// row per span, naming every service and operation of the trace.
func checkTraceUI(t *testing.T, query, id, service string, ops []string) {
	bin := chromium(t)
	// The DOM is compared with what the query API says; the page is loaded
	// again if spans were still arriving.
	var dom string
	check := func(what string, test func(tr jaegerTrace) error) {
		t.Helper()
		streamtest.CheckFor(t, 60*time.Second, func() error {
			tr, err := getTrace(query, id)
			if err != nil {
				return err
			}
			return test(tr)
		}, func() string { return what + ", rendered page:\n" + mainElement(dom) })
	}

	search := query + "/search?" + url.Values{"service": {service}, "lookback": {"1h"}, "limit": {"1000"}}.Encode()
	check("search page "+search, func(tr jaegerTrace) error {
		dom = browse(t, bin, search, "--dump-dom")
		if strings.Contains(dom, `role="alert"`) {
			return fmt.Errorf("the search page shows an error")
		}
		i := strings.Index(dom, fmt.Sprintf(`<li class="trace" data-trace-id="%s" data-span-count="%d">`, id, len(tr.Spans)))
		if i < 0 {
			return fmt.Errorf("the search page does not list trace %s with %d spans", id, len(tr.Spans))
		}
		item := dom[i:]
		item = item[:strings.Index(item, "</li></ul>")+len("</li></ul>")] // to the end of its services
		wants := []string{fmt.Sprintf(`href="trace/%s"`, id), fmt.Sprintf(`<span class="span-count">%d spans</span>`, len(tr.Spans))}
		for svc, n := range tr.services() {
			wants = append(wants, fmt.Sprintf(`data-service="%s">`, svc), fmt.Sprintf(`%s (%d)</li>`, svc, n))
		}
		for _, want := range wants {
			if !strings.Contains(item, want) {
				return fmt.Errorf("the search page's entry of trace %s lacks %q", id, want)
			}
		}
		return nil
	})
	t.Logf("search page %s lists trace %s", search, id)

	page := query + "/trace/" + id
	check("trace page "+page, func(tr jaegerTrace) error {
		dom = browse(t, bin, page, "--dump-dom")
		if strings.Contains(dom, `role="alert"`) {
			return fmt.Errorf("the trace page shows an error")
		}
		if !strings.Contains(dom, fmt.Sprintf(`<article class="trace-view" data-trace-id="%s" data-span-count="%d">`, id, len(tr.Spans))) ||
			!strings.Contains(dom, fmt.Sprintf(`<dd class="span-count">%d spans</dd>`, len(tr.Spans))) {
			return fmt.Errorf("the trace page does not show trace %s with %d spans", id, len(tr.Spans))
		}
		rows := map[string]int{}
		for _, m := range regexp.MustCompile(`<li class="span-row" data-span-id="[0-9a-f]+" data-service="([^"]+)"`).FindAllStringSubmatch(dom, -1) {
			rows[m[1]]++
		}
		for svc, n := range tr.services() {
			if rows[svc] != n {
				return fmt.Errorf("the waterfall has %d rows of %s, the trace %d spans (rows by service: %v)", rows[svc], svc, n, rows)
			}
		}
		if len(rows) != len(tr.services()) {
			return fmt.Errorf("the waterfall's services %v are not the trace's %v", rows, tr.services())
		}
		for _, op := range ops {
			if !strings.Contains(dom, `<span class="op">`+op+`</span>`) {
				return fmt.Errorf("the waterfall names no span %q", op)
			}
		}
		return nil
	})
	t.Logf("trace page %s draws a waterfall of the trace", page)
	if dir := os.Getenv("WEIR_SCREENSHOT_DIR"); dir != "" {
		shot := filepath.Join(dir, "weir-jaeger-trace.png")
		browse(t, bin, page, "--screenshot="+shot, "--window-size=1280,800", "--hide-scrollbars")
		t.Logf("screenshot of the trace page: %s", shot)
	}
}

// TestTraceFollowsAnEventThroughThePipeline sends events from the
// generator through dedup and publish to the json sink with tracing on,
// exporting to a real Jaeger, and finds one trace that spans the
// generator, both operators and the sink; then (subtest UI, in headless
// Chromium) that weir's trace UI on Jaeger's query port lists and draws it.
func TestTraceFollowsAnEventThroughThePipeline(t *testing.T) {
	otlp, query := startJaeger(t)
	srv := natstest.Run(t)
	js := srv.JetStream(t)
	c := loadContract(t)
	start := func(service string) *telemetry.Telemetry {
		tel, err := telemetry.Start(context.Background(), telemetry.Config{
			ServiceName: service, ServiceVersion: "test", Instance: "0", TracesEndpoint: otlp, TraceSampleRatio: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		return tel
	}
	genTel, opTel := start("nexmark-gen"), start("dedup")

	pipeline := streamtest.Run(t, srv.ClientURL(), c, t.TempDir(), dedup.Factories(),
		func(cfg *stream.Config) { cfg.Telemetry = opTel })
	rts := pipeline.Runtimes
	ctx := context.Background()

	cfg := genConfig(c, 100)
	cfg.Gen.Hard = genConfig(c, 0).Gen.Hard
	cfg.Gen.Hard.DuplicateEvery, cfg.Gen.Hard.FutureEvery = 0, 0
	cfg.Tracer = genTel.Tracer("github.com/weirflow/weir/services/nexmark-gen")
	if _, err := nexmarkgen.EnsureStream(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := nexmarkgen.Publish(ctx, js, cfg, time.Now, nil); err != nil {
		t.Fatal(err)
	}
	streamtest.CheckFor(t, 60*time.Second, func() error {
		if s := rts[len(rts)-1].Stats(); s.Out < 100 {
			return fmt.Errorf("sink published %d of 100", s.Out)
		}
		return nil
	})
	pipeline.Stop()
	for _, tel := range []*telemetry.Telemetry{genTel, opTel} {
		if err := tel.Shutdown(context.Background()); err != nil { // flushes the spans
			t.Fatal(err)
		}
	}

	want := []string{"nexmark-gen publish", "process dedup", "process publish", "sink events"}
	var seen string
	var seenServices map[string]int
	streamtest.CheckFor(t, 30*time.Second, func() error {
		resp, err := http.Get(query + "/api/traces?service=nexmark-gen&limit=200")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var tr jaegerTraces
		if err := json.NewDecoder(resp.Body).Decode(&tr); err != nil {
			return err
		}
		for _, trace := range tr.Data {
			ops := map[string]bool{}
			for _, s := range trace.Spans {
				ops[s.OperationName] = true
			}
			services := trace.services()
			complete := services["nexmark-gen"] > 0 && services["dedup"] > 0
			for _, w := range want {
				complete = complete && ops[w]
			}
			if complete {
				seen, seenServices = trace.TraceID, services
				return nil
			}
		}
		return fmt.Errorf("no trace with spans %v among %d traces", want, len(tr.Data))
	})
	t.Logf("trace %s spans %v, services %v", seen, want, seenServices)

	// Jaeger's own port serves weir's trace UI, which shows the trace.
	t.Run("UI", func(t *testing.T) { checkTraceUI(t, query, seen, "dedup", want) })
}
