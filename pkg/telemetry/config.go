package telemetry

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
)

// DefaultTracesEndpoint is where OTLP traces go when OTEL_TRACES_EXPORTER
// is "otlp" and no endpoint is named: a local collector or Jaeger.
const DefaultTracesEndpoint = "http://localhost:4318/v1/traces"

// Config says what telemetry a process exports. The zero value with a
// ServiceName exports no traces and serves no metrics endpoint; metrics are
// still recorded and can be served with Telemetry.Handler.
type Config struct {
	// ServiceName, ServiceVersion and Instance become the resource
	// attributes service.name, service.version and service.instance.id.
	ServiceName    string
	ServiceVersion string
	Instance       string
	// ResourceAttributes are further resource attributes
	// (OTEL_RESOURCE_ATTRIBUTES).
	ResourceAttributes []attribute.KeyValue

	// MetricsAddr is the listen address of the Prometheus endpoint, served
	// at /metrics, e.g. ":9464" or "127.0.0.1:0". Empty: no endpoint.
	MetricsAddr string

	// TracesEndpoint is the full OTLP/HTTP (protobuf) URL spans are posted
	// to, e.g. "http://jaeger:4318/v1/traces". Empty: tracing is off and
	// every tracer is a no-op.
	TracesEndpoint string
	// TraceSampleRatio is the fraction of root traces sampled, in [0, 1].
	// Spans with a parent follow the parent's decision
	// (parentbased_traceidratio). FromEnv defaults it to 1.
	TraceSampleRatio float64

	// Disabled turns the SDK off (OTEL_SDK_DISABLED): no-op tracer and
	// meter providers, no endpoint.
	Disabled bool

	// problems are the environment values FromEnv could not honour;
	// Validate reports them.
	problems []string
}

// Validate reports whether the configuration can be started.
func (c Config) Validate() error {
	var errs []error
	for _, p := range c.problems {
		errs = append(errs, errors.New("telemetry: "+p))
	}
	if c.ServiceName == "" {
		errs = append(errs, errors.New("telemetry: service name is empty (set it, or OTEL_SERVICE_NAME)"))
	}
	if math.IsNaN(c.TraceSampleRatio) || c.TraceSampleRatio < 0 || c.TraceSampleRatio > 1 {
		errs = append(errs, fmt.Errorf("telemetry: trace sample ratio %v is not in [0, 1]", c.TraceSampleRatio))
	}
	if c.TracesEndpoint != "" {
		u, err := url.Parse(c.TracesEndpoint)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("telemetry: traces endpoint: %w", err))
		case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
			errs = append(errs, fmt.Errorf("telemetry: traces endpoint %q is not an http(s) URL with a host", c.TracesEndpoint))
		}
	}
	return errors.Join(errs...)
}

// FromEnv builds a Config for a service from the standard OpenTelemetry
// environment variables and weir's own; getenv is os.Getenv in a main.
//
//   - OTEL_SDK_DISABLED=true: Disabled.
//   - OTEL_SERVICE_NAME, else service.name in OTEL_RESOURCE_ATTRIBUTES,
//     else service.
//   - OTEL_RESOURCE_ATTRIBUTES: key=value,... (service.version and
//     service.instance.id there fill ServiceVersion and Instance).
//   - WEIR_INSTANCE: Instance when the resource attributes name none.
//   - WEIR_METRICS_ADDR: MetricsAddr.
//   - OTEL_TRACES_EXPORTER: "otlp" or "none". Unlike the specification's
//     default of otlp, tracing is off when it is unset, unless an OTLP
//     endpoint variable is set.
//   - OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as is), else
//     OTEL_EXPORTER_OTLP_ENDPOINT (+ "/v1/traces"), else
//     DefaultTracesEndpoint.
//   - OTEL_EXPORTER_OTLP_TRACES_PROTOCOL / OTEL_EXPORTER_OTLP_PROTOCOL:
//     only http/protobuf is supported.
//   - OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG: always_on,
//     always_off, traceidratio and their parentbased_ forms, all applied
//     parent-based; default parentbased_always_on (ratio 1).
//
// FromEnv never fails: values it cannot honour are reported by Validate
// (and so by Start). The OTLP exporter itself still reads the variables
// it owns from the process environment: OTEL_EXPORTER_OTLP_HEADERS,
// _TIMEOUT, _COMPRESSION, _CERTIFICATE, and the batch processor's
// OTEL_BSP_*.
func FromEnv(getenv func(string) string, service string) Config {
	c := Config{
		ServiceName:      service,
		Instance:         getenv("WEIR_INSTANCE"),
		MetricsAddr:      getenv("WEIR_METRICS_ADDR"),
		TraceSampleRatio: 1,
	}
	if v := getenv("OTEL_SDK_DISABLED"); v != "" {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			c.problems = append(c.problems, fmt.Sprintf("OTEL_SDK_DISABLED=%q is not a boolean", v))
		}
		c.Disabled = b
	}

	attrs, err := parseResourceAttributes(getenv("OTEL_RESOURCE_ATTRIBUTES"))
	if err != nil {
		c.problems = append(c.problems, err.Error())
	}
	for _, kv := range attrs {
		switch kv.Key {
		case "service.name":
			c.ServiceName = kv.Value.AsString()
		case "service.version":
			c.ServiceVersion = kv.Value.AsString()
		case "service.instance.id":
			c.Instance = kv.Value.AsString()
		default:
			c.ResourceAttributes = append(c.ResourceAttributes, kv)
		}
	}
	if v := getenv("OTEL_SERVICE_NAME"); v != "" {
		c.ServiceName = v
	}

	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		if base := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); base != "" {
			endpoint = strings.TrimRight(base, "/") + "/v1/traces"
		}
	}
	otlp := endpoint != ""
	if v := getenv("OTEL_TRACES_EXPORTER"); v != "" {
		otlp = false
		none := false
		for _, e := range strings.Split(v, ",") {
			switch e = strings.ToLower(strings.TrimSpace(e)); e {
			case "otlp":
				otlp = true
			case "none":
				none = true
			default:
				c.problems = append(c.problems, fmt.Sprintf("OTEL_TRACES_EXPORTER: exporter %q is not supported (otlp or none)", e))
			}
		}
		if none {
			otlp = false
		}
	}
	if otlp {
		if endpoint == "" {
			endpoint = DefaultTracesEndpoint
		}
		c.TracesEndpoint = endpoint
		proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if proto == "" {
			proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		if proto != "" && proto != "http/protobuf" {
			c.problems = append(c.problems, fmt.Sprintf("OTLP protocol %q is not supported (http/protobuf)", proto))
		}
	}

	switch s := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER"))); s {
	case "", "always_on", "parentbased_always_on":
		c.TraceSampleRatio = 1
	case "always_off", "parentbased_always_off":
		c.TraceSampleRatio = 0
	case "traceidratio", "parentbased_traceidratio":
		c.TraceSampleRatio = 1
		if arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG")); arg != "" {
			r, err := strconv.ParseFloat(arg, 64)
			if err != nil || r < 0 || r > 1 {
				c.problems = append(c.problems, fmt.Sprintf("OTEL_TRACES_SAMPLER_ARG=%q is not a ratio in [0, 1]", arg))
			} else {
				c.TraceSampleRatio = r
			}
		}
	default:
		c.problems = append(c.problems, fmt.Sprintf("OTEL_TRACES_SAMPLER=%q is not supported (always_on, always_off, traceidratio or their parentbased_ forms)", s))
	}
	return c
}

// parseResourceAttributes parses OTEL_RESOURCE_ATTRIBUTES: comma-separated
// key=value pairs, values percent-encoded.
func parseResourceAttributes(s string) ([]attribute.KeyValue, error) {
	var kvs []attribute.KeyValue
	var bad []string
	for _, pair := range strings.Split(s, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			bad = append(bad, pair)
			continue
		}
		val, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			bad = append(bad, pair)
			continue
		}
		kvs = append(kvs, attribute.String(k, val))
	}
	if len(bad) > 0 {
		return kvs, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %q are not key=value pairs", bad)
	}
	return kvs, nil
}
