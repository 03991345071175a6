package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is a minimal OTLP/HTTP protobuf traces endpoint.
type otlpReceiver struct {
	*httptest.Server
	spans chan *tracepb.ResourceSpans
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{spans: make(chan *tracepb.ResourceSpans, 64)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Method != http.MethodPost ||
			req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "not an OTLP/HTTP protobuf traces request", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var ex collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &ex); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rs := range ex.ResourceSpans {
			select {
			case r.spans <- rs:
			default:
			}
		}
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

func TestOTLPExport(t *testing.T) {
	recv := newOTLPReceiver(t)
	env := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": recv.URL,
		"OTEL_SERVICE_NAME":           "weir-test",
		"WEIR_INSTANCE":               "test-0",
	}
	cfg := FromEnv(envOf(env), "ignored")
	cfg.ServiceVersion = "v0.0.1"
	tel, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !tel.Tracing() {
		t.Fatal("tracing off with an OTLP endpoint")
	}
	_, span := tel.Tracer("weir/test").Start(context.Background(), "step")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil { // flushes the batch
		t.Fatal(err)
	}
	select {
	case rs := <-recv.spans:
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.Key] = kv.GetValue().GetStringValue()
		}
		if res["service.name"] != "weir-test" || res["service.version"] != "v0.0.1" || res["service.instance.id"] != "test-0" {
			t.Fatalf("resource %v", res)
		}
		var names []string
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				names = append(names, s.Name)
			}
		}
		if len(names) != 1 || names[0] != "step" {
			t.Fatalf("spans %v, want [step]", names)
		}
	case <-ctx.Done():
		t.Fatal("no span reached the OTLP receiver")
	}
}

func TestUnsampledRootNotExported(t *testing.T) {
	recv := newOTLPReceiver(t)
	tel, err := Start(context.Background(), Config{ServiceName: "s", TracesEndpoint: recv.URL + "/v1/traces", TraceSampleRatio: 0})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tel.Tracer("t").Start(context.Background(), "root")
	if span.SpanContext().IsSampled() {
		t.Fatal("ratio 0 sampled a root span")
	}
	span.End()
	// A sampled remote parent is followed.
	parent, sc := sampledContext(t)
	_, child := tel.Tracer("t").Start(ContextFromString(context.Background(), SpanContextString(parent)), "child")
	if !child.SpanContext().IsSampled() || child.SpanContext().TraceID() != sc.TraceID() {
		t.Fatal("a sampled parent's child was not sampled in the same trace")
	}
	child.End()
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var rs *tracepb.ResourceSpans
	select {
	case rs = <-recv.spans:
	case <-time.After(10 * time.Second):
		t.Fatal("no span reached the OTLP receiver")
	}
	if n := len(rs.ScopeSpans[0].Spans); n != 1 || rs.ScopeSpans[0].Spans[0].Name != "child" {
		t.Fatalf("exported %v", rs.ScopeSpans)
	}
}
