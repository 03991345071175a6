package telemetry

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
)

func envOf(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestFromEnvTracingOffByDefault(t *testing.T) {
	c := FromEnv(envOf(nil), "dedup")
	if c.TracesEndpoint != "" || c.Disabled || c.MetricsAddr != "" {
		t.Fatalf("empty environment gave %+v; want tracing off, no endpoint", c)
	}
	if c.ServiceName != "dedup" || c.TraceSampleRatio != 1 {
		t.Fatalf("empty environment gave %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	tel, err := Start(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	if tel.Tracing() {
		t.Fatal("tracing is on with an empty environment")
	}
	if tel.MetricsURL() != "" {
		t.Fatalf("metrics endpoint %q with no WEIR_METRICS_ADDR", tel.MetricsURL())
	}
	_, span := tel.Tracer("test").Start(context.Background(), "op")
	defer span.End()
	if span.SpanContext().IsValid() || span.IsRecording() {
		t.Fatal("a tracer with tracing off made a real span")
	}
}

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		want     Config
		problems string // substring of Validate's error; "" for none
	}{{
		name: "endpoint turns tracing on",
		env:  map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318/"},
		want: Config{ServiceName: "svc", TracesEndpoint: "http://jaeger:4318/v1/traces", TraceSampleRatio: 1},
	}, {
		name: "traces endpoint is used as is and wins",
		env: map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT":        "http://a:4318",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:4318/custom",
		},
		want: Config{ServiceName: "svc", TracesEndpoint: "http://b:4318/custom", TraceSampleRatio: 1},
	}, {
		name: "otlp without endpoint uses the default",
		env:  map[string]string{"OTEL_TRACES_EXPORTER": "otlp"},
		want: Config{ServiceName: "svc", TracesEndpoint: DefaultTracesEndpoint, TraceSampleRatio: 1},
	}, {
		name: "none wins over an endpoint",
		env:  map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318"},
		want: Config{ServiceName: "svc", TraceSampleRatio: 1},
	}, {
		name: "sampler ratio",
		env: map[string]string{
			"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25",
		},
		want: Config{ServiceName: "svc", TracesEndpoint: DefaultTracesEndpoint, TraceSampleRatio: 0.25},
	}, {
		name: "always off",
		env:  map[string]string{"OTEL_TRACES_SAMPLER": "always_off"},
		want: Config{ServiceName: "svc"},
	}, {
		name: "service name, resource attributes, metrics address",
		env: map[string]string{
			"OTEL_RESOURCE_ATTRIBUTES": "service.name=fromattrs,service.version=1.2.3,deployment.environment=dev%20box",
			"OTEL_SERVICE_NAME":        "fromname",
			"WEIR_INSTANCE":            "dedup-0",
			"WEIR_METRICS_ADDR":        ":9464",
		},
		want: Config{
			ServiceName: "fromname", ServiceVersion: "1.2.3", Instance: "dedup-0", MetricsAddr: ":9464",
			ResourceAttributes: []attribute.KeyValue{attribute.String("deployment.environment", "dev box")},
			TraceSampleRatio:   1,
		},
	}, {
		name: "sdk disabled",
		env:  map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318"},
		want: Config{ServiceName: "svc", Disabled: true, TracesEndpoint: "http://a:4318/v1/traces", TraceSampleRatio: 1},
	}, {
		name:     "unsupported exporter",
		env:      map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"},
		want:     Config{ServiceName: "svc", TraceSampleRatio: 1},
		problems: `exporter "zipkin" is not supported`,
	}, {
		name:     "grpc protocol",
		env:      map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
		want:     Config{ServiceName: "svc", TracesEndpoint: DefaultTracesEndpoint, TraceSampleRatio: 1},
		problems: `protocol "grpc" is not supported`,
	}, {
		name:     "bad sampler arg",
		env:      map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
		want:     Config{ServiceName: "svc", TraceSampleRatio: 1},
		problems: "OTEL_TRACES_SAMPLER_ARG",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := FromEnv(envOf(tc.env), "svc")
			err := got.Validate()
			switch {
			case tc.problems == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.problems != "" && (err == nil || !strings.Contains(err.Error(), tc.problems)):
				t.Fatalf("Validate: %v; want an error containing %q", err, tc.problems)
			}
			got.problems = nil
			if got.ServiceName != tc.want.ServiceName || got.ServiceVersion != tc.want.ServiceVersion ||
				got.Instance != tc.want.Instance || got.MetricsAddr != tc.want.MetricsAddr ||
				got.TracesEndpoint != tc.want.TracesEndpoint || got.TraceSampleRatio != tc.want.TraceSampleRatio ||
				got.Disabled != tc.want.Disabled || len(got.ResourceAttributes) != len(tc.want.ResourceAttributes) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
			for i := range got.ResourceAttributes {
				if got.ResourceAttributes[i] != tc.want.ResourceAttributes[i] {
					t.Fatalf("resource attributes %v, want %v", got.ResourceAttributes, tc.want.ResourceAttributes)
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []Config{
		{},
		{ServiceName: "s", TraceSampleRatio: 1.5},
		{ServiceName: "s", TracesEndpoint: "localhost:4318"},
	} {
		if c.Validate() == nil {
			t.Errorf("%+v validated", c)
		}
		if _, err := Start(context.Background(), c); err == nil {
			t.Errorf("%+v started", c)
		}
	}
}

func TestDisabled(t *testing.T) {
	tel, err := Start(context.Background(), Config{ServiceName: "s", Disabled: true, MetricsAddr: "127.0.0.1:0", TracesEndpoint: "http://127.0.0.1:1/v1/traces"})
	if err != nil {
		t.Fatal(err)
	}
	if tel.Tracing() || tel.MetricsURL() != "" {
		t.Fatal("a disabled SDK traces or serves metrics")
	}
	if _, err := NewRuntimeMetrics(tel.Meter("m")); err != nil {
		t.Fatal(err)
	}
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestMetricsAddrTaken(t *testing.T) {
	tel, err := Start(context.Background(), Config{ServiceName: "s", MetricsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	addr := strings.TrimSuffix(strings.TrimPrefix(tel.MetricsURL(), "http://"), "/metrics")
	if _, err := Start(context.Background(), Config{ServiceName: "s", MetricsAddr: addr}); err == nil {
		t.Fatalf("a second Start on %s succeeded", addr)
	}
}
