package test

import (
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
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/pkg/natstest"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/telemetry"
	"github.com/weirflow/weir/services/dedup"
	"github.com/weirflow/weir/services/nexmark-gen"
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

// startJaeger runs a real Jaeger v2 and returns its OTLP endpoint and
// query API base URL.
func startJaeger(t *testing.T) (otlp, query string) {
	t.Helper()
	bin := jaegerBinary()
	if bin == "" {
		t.Skip("no Jaeger binary: set WEIR_JAEGER_BIN, or run deploy/build-images.sh jaeger (or .ci/run), which builds and caches one")
	}
	_, file, _, _ := runtime.Caller(0)
	cfg := filepath.Join(filepath.Dir(file), "testdata", "jaeger.yaml")
	ports := map[string]int{}
	for _, k := range []string{"WEIR_JAEGER_QUERY_PORT", "WEIR_JAEGER_QUERY_GRPC_PORT", "WEIR_JAEGER_HEALTH_PORT", "WEIR_JAEGER_OTLP_PORT"} {
		ports[k] = freePort(t)
	}
	cmd := exec.Command(bin, "--config=file:"+cfg)
	cmd.Env = os.Environ()
	for k, p := range ports {
		cmd.Env = append(cmd.Env, k+"="+strconv.Itoa(p))
	}
	if testing.Verbose() {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	query = fmt.Sprintf("http://127.0.0.1:%d", ports["WEIR_JAEGER_QUERY_PORT"])
	checkFor(t, 60*time.Second, func() error {
		resp, err := http.Get(query + "/api/services")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("query API: %s", resp.Status)
		}
		return nil
	})
	return fmt.Sprintf("http://127.0.0.1:%d/v1/traces", ports["WEIR_JAEGER_OTLP_PORT"]), query
}

// jaegerTraces is the part of Jaeger's /api/traces answer the test reads.
type jaegerTraces struct {
	Data []struct {
		TraceID string `json:"traceID"`
		Spans   []struct {
			OperationName string `json:"operationName"`
			ProcessID     string `json:"processID"`
		} `json:"spans"`
		Processes map[string]struct {
			ServiceName string `json:"serviceName"`
		} `json:"processes"`
	} `json:"data"`
}

// TestTraceFollowsAnEventThroughThePipeline sends events from the
// generator through dedup and publish to the json sink with tracing on,
// exporting to a real Jaeger, and finds one trace that spans the
// generator, both operators and the sink.
func TestTraceFollowsAnEventThroughThePipeline(t *testing.T) {
	otlp, query := startJaeger(t)
	srv := natstest.Run(t)
	js, _ := jetstream.New(srv.Connect(t))
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

	dir := t.TempDir()
	var rts []*stream.Runtime
	for _, op := range c.Operators {
		o, _ := dedup.Factories()[op.ID](c)
		rt, err := stream.New(stream.Config{NATSURL: srv.ClientURL(), Contract: c, DataDir: filepath.Join(dir, op.ID),
			Operator: op.ID, Instance: "0", Telemetry: opTel, TickInterval: 20 * time.Millisecond}, o)
		if err != nil {
			t.Fatal(err)
		}
		rts = append(rts, rt)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- stream.RunGroup(ctx, rts...) }()

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
	checkFor(t, 60*time.Second, func() error {
		if s := rts[len(rts)-1].Stats(); s.Out < 100 {
			return fmt.Errorf("sink published %d of 100", s.Out)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, tel := range []*telemetry.Telemetry{genTel, opTel} {
		if err := tel.Shutdown(context.Background()); err != nil { // flushes the spans
			t.Fatal(err)
		}
	}

	want := []string{"nexmark-gen publish", "process dedup", "process publish", "sink events"}
	var seen string
	checkFor(t, 30*time.Second, func() error {
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
			services := map[string]bool{}
			for _, s := range trace.Spans {
				ops[s.OperationName] = true
				services[trace.Processes[s.ProcessID].ServiceName] = true
			}
			complete := services["nexmark-gen"] && services["dedup"]
			for _, w := range want {
				complete = complete && ops[w]
			}
			if complete {
				seen = trace.TraceID
				return nil
			}
		}
		return fmt.Errorf("no trace with spans %v among %d traces", want, len(tr.Data))
	})
	t.Logf("trace %s spans %v", seen, want)
}
