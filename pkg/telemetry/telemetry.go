package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Telemetry holds a process's tracer and meter providers and its metrics
// endpoint. Create it with Start; Shutdown flushes and stops it.
type Telemetry struct {
	cfg     Config
	tp      trace.TracerProvider
	mp      metric.MeterProvider
	handler http.Handler

	// Set when tracing, metrics or the endpoint are on.
	sdkTP  *sdktrace.TracerProvider
	sdkMP  *sdkmetric.MeterProvider
	srv    *http.Server
	ln     net.Listener
	served chan error // Serve's result; closed after it

	shutdown struct {
		once sync.Once
		err  error
	}
}

// Start builds the providers the configuration asks for and, when
// cfg.MetricsAddr is set, listens on it and serves /metrics. Tracing off
// (no TracesEndpoint) gives no-op tracers; Disabled gives no-op tracers
// and meters and no endpoint. Nothing global is set: pass the Telemetry,
// or its providers, to whatever records.
func Start(ctx context.Context, cfg Config) (*Telemetry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Telemetry{
		cfg:     cfg,
		tp:      tracenoop.NewTracerProvider(),
		mp:      metricnoop.NewMeterProvider(),
		handler: http.NotFoundHandler(),
	}
	if cfg.Disabled {
		return t, nil
	}
	res, err := newResource(ctx, cfg)
	if err != nil {
		return nil, err
	}

	if cfg.TracesEndpoint != "" {
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(cfg.TracesEndpoint))
		if err != nil {
			return nil, fmt.Errorf("telemetry: otlp trace exporter: %w", err)
		}
		t.sdkTP = sdktrace.NewTracerProvider(
			sdktrace.WithBatcher(exp),
			sdktrace.WithResource(res),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.TraceSampleRatio))),
		)
		t.tp = t.sdkTP
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.shutdownProviders(ctx)
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	t.sdkMP = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))
	t.mp = t.sdkMP
	t.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      reg,
	})

	if cfg.MetricsAddr != "" {
		// Listen first, so the bound address is known and a taken port
		// fails Start rather than a goroutine.
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", cfg.MetricsAddr)
		if err != nil {
			t.shutdownProviders(ctx)
			return nil, fmt.Errorf("telemetry: metrics endpoint: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", t.handler)
		t.ln = ln
		t.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		t.served = make(chan error, 1)
		go func() {
			defer close(t.served)
			if err := t.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				t.served <- err
			}
		}()
	}
	return t, nil
}

func newResource(ctx context.Context, cfg Config) (*resource.Resource, error) {
	attrs := append([]attribute.KeyValue(nil), cfg.ResourceAttributes...)
	attrs = append(attrs, semconv.ServiceName(cfg.ServiceName))
	if cfg.ServiceVersion != "" {
		attrs = append(attrs, semconv.ServiceVersion(cfg.ServiceVersion))
	}
	if cfg.Instance != "" {
		attrs = append(attrs, semconv.ServiceInstanceID(cfg.Instance))
	}
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithAttributes(attrs...),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	return res, nil
}

// Tracer returns a tracer of the process's provider.
func (t *Telemetry) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return t.tp.Tracer(name, opts...)
}

// Meter returns a meter of the process's provider.
func (t *Telemetry) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	return t.mp.Meter(name, opts...)
}

// TracerProvider is the provider behind Tracer, for libraries that take one.
func (t *Telemetry) TracerProvider() trace.TracerProvider { return t.tp }

// MeterProvider is the provider behind Meter, for libraries that take one.
func (t *Telemetry) MeterProvider() metric.MeterProvider { return t.mp }

// Tracing reports whether spans are exported. Code that does per-record
// work only for tracing can skip it when this is false.
func (t *Telemetry) Tracing() bool { return t.sdkTP != nil }

// Handler serves the metrics in the Prometheus text format, for a process
// that mounts them on a server of its own. It answers 404 when the SDK is
// disabled.
func (t *Telemetry) Handler() http.Handler { return t.handler }

// MetricsURL is the URL of the metrics endpoint, with the port actually
// bound; empty when there is no endpoint. An unspecified listen host
// (":9464") is reported as 127.0.0.1.
func (t *Telemetry) MetricsURL() string {
	if t.ln == nil {
		return ""
	}
	addr := t.ln.Addr().String()
	if tcp, ok := t.ln.Addr().(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
		addr = net.JoinHostPort("127.0.0.1", fmt.Sprint(tcp.Port))
	}
	return "http://" + addr + "/metrics"
}

// Shutdown stops the metrics endpoint, flushes the spans not yet exported
// and stops the providers. It returns when done or when ctx ends. Later
// calls return the first call's result.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	t.shutdown.once.Do(func() { t.shutdown.err = t.shutdownOnce(ctx) })
	return t.shutdown.err
}

func (t *Telemetry) shutdownOnce(ctx context.Context) error {
	var errs []error
	if t.srv != nil {
		if err := t.srv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("telemetry: metrics endpoint: %w", err))
		}
		select {
		case err := <-t.served:
			if err != nil {
				errs = append(errs, fmt.Errorf("telemetry: metrics endpoint: %w", err))
			}
		case <-ctx.Done():
			errs = append(errs, ctx.Err())
		}
	}
	errs = append(errs, t.shutdownProviders(ctx))
	return errors.Join(errs...)
}

func (t *Telemetry) shutdownProviders(ctx context.Context) error {
	var errs []error
	if t.sdkTP != nil {
		if err := t.sdkTP.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("telemetry: tracer provider: %w", err))
		}
	}
	if t.sdkMP != nil {
		if err := t.sdkMP.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("telemetry: meter provider: %w", err))
		}
	}
	return errors.Join(errs...)
}

// SetGlobalPropagator makes W3C trace context the otel global
// TextMapPropagator, for third-party instrumentation that reads it. Only a
// main may call it; weir's own code uses Inject and Extract.
func SetGlobalPropagator() {
	otel.SetTextMapPropagator(propagator)
}
