package nexmarkgen

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/pkg/ingress"
	"github.com/weirflow/weir/pkg/producer"
	"github.com/weirflow/weir/pkg/telemetry"
)

// Version is reported to $SRV.INFO.
const Version = "0.1.0"

// ReportEvery is how many acknowledged messages pass between progress
// lines of Run.
const ReportEvery = 100000

// Run is the nexmark-gen command: it reads its configuration from args and
// the environment, ensures the stream, publishes, and prints progress and
// the position to resume from to stdout. Every flag -x-y can also be set by
// the environment variable WEIR_X_Y (flags win), except -nats-url, which
// reads NATS_URL. Cancelling ctx is a clean stop: Run prints the resume
// position and returns nil.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cfg, err := parseConfig(args, getenv, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	tcfg := telemetry.FromEnv(getenv, "nexmark-gen")
	tcfg.ServiceVersion = Version
	tel, err := telemetry.Start(ctx, tcfg)
	if err != nil {
		return fmt.Errorf("nexmarkgen: telemetry: %w", err)
	}
	defer tel.Shutdown(context.Background())
	if tel.Tracing() {
		cfg.Tracer = tel.Tracer("github.com/weirflow/weir/services/nexmark-gen")
	}
	// A denied request is never answered: stop saying so instead.
	return cfg.Auth.GuardAnswering(ctx, func(ctx context.Context, denied func(error)) error {
		return generate(ctx, cfg, stdout, denied)
	})
}

// generate connects as cfg says, reporting the connection's errors to
// denied, and publishes until the corpus or ctx ends.
func generate(ctx context.Context, cfg Config, stdout io.Writer, denied func(error)) error {
	nc, err := cfg.Auth.Connect(cfg.NATSURL, nats.Name("nexmark-gen "+cfg.Producer),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied(err) }))
	if err != nil {
		return fmt.Errorf("nexmarkgen: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("nexmarkgen: jetstream: %w", err)
	}
	sts, err := EnsureStream(ctx, js, cfg)
	if err != nil {
		return err
	}
	for _, st := range sts {
		if why := Unbatched(st); why != "" {
			fmt.Fprintf(stdout, "nexmark-gen: warning: %s\n", why)
		}
	}
	if cfg.Sequenced {
		if cfg.Start, err = Resume(ctx, js, cfg); err != nil {
			return err
		}
	}
	var published atomic.Uint64
	svc, err := micro.AddService(nc, micro.Config{
		Name:        "weir-nexmark-gen",
		Version:     Version,
		Description: "weir Nexmark event generator",
		Metadata:    map[string]string{"producer": cfg.Producer, "stream": cfg.Stream},
	})
	if err != nil {
		return fmt.Errorf("nexmarkgen: register service: %w", err)
	}
	defer svc.Stop()
	err = svc.AddEndpoint("status", micro.HandlerFunc(func(req micro.Request) {
		// A reply that cannot be sent leaves the asker to time out: it
		// learns as much as an error here would tell.
		_ = req.RespondJSON(map[string]uint64{"published": published.Load(), "next_start": cfg.Start + published.Load()})
	}), micro.WithEndpointSubject("weir.svc.nexmark-gen."+cfg.Producer+".status"))
	if err != nil {
		return fmt.Errorf("nexmarkgen: register status endpoint: %w", err)
	}
	in := cfg.ingress()
	fmt.Fprintf(stdout, "nexmark-gen: producer %s publishing to stream %s (%s.*, %d partitions) from position %d\n",
		cfg.Producer, strings.Join(in.StreamNames(), ", "), cfg.SubjectPrefix, cfg.Gen.Partitions, cfg.Start)

	report := func(n uint64) {
		if before := published.Swap(n); before/ReportEvery != n/ReportEvery {
			fmt.Fprintf(stdout, "nexmark-gen: %d published, next start %d\n", n, cfg.Start+n)
		}
	}
	n, err := Publish(ctx, js, cfg, time.Now, report)
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		fmt.Fprintf(stdout, "nexmark-gen: stopped: %d published, next start %d\n", n, cfg.Start+n)
		return nil
	case err != nil:
		fmt.Fprintf(stdout, "nexmark-gen: failed: %d published, next start %d\n", n, cfg.Start+n)
		return err
	}
	fmt.Fprintf(stdout, "nexmark-gen: done: %d published, next start %d\n", n, cfg.Start+n)
	return nil
}

// envName is the environment variable that sets flag name.
func envName(name string) string {
	switch name {
	case "nats-url":
		return "NATS_URL"
	case "contract":
		return "WEIR_CONTRACT"
	}
	if env, ok := natsconn.Env(name); ok {
		return env
	}
	return "WEIR_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// parseConfig builds a Config from defaults, then the environment, then
// args. Usage and flag errors are written to out.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	var c Config
	var firstEventTime, contractPath string
	fs := flag.NewFlagSet("nexmark-gen", flag.ContinueOnError)
	fs.SetOutput(out)

	fs.StringVar(&c.NATSURL, "nats-url", nats.DefaultURL, "NATS server URL")
	c.Auth.StdFlags(fs)
	fs.StringVar(&contractPath, "contract", "", "pipeline contract; when set, its ingress section decides stream, subject prefix, partitions, retention and key groups")
	fs.StringVar(&c.Stream, "stream", DefaultStream, "ingress stream name")
	fs.StringVar(&c.SubjectPrefix, "subject-prefix", DefaultSubjectPrefix, "subject prefix; partition p publishes to <prefix>.<p>")
	fs.DurationVar(&c.Retention, "retention", 24*time.Hour, "stream MaxAge when the stream is created (0 = no age limit)")
	fs.DurationVar(&c.DuplicateWindow, "duplicate-window", DuplicateWindow, "how long the stream remembers message IDs when the stream is created: a re-publish within it is dropped (the broker keeps each in memory)")
	fs.IntVar(&c.Replicas, "replicas", 1, "stream replicas when the stream is created, 1 to 5 (3 on a three-node cluster)")
	fs.StringVar(&c.Producer, "producer", "", `producer name in headers and message IDs (default "nexmark-<seed>")`)
	fs.Float64Var(&c.Rate, "rate", 0, "messages per second of wall clock (0 = as fast as acks allow)")
	fs.Uint64Var(&c.Start, "start", 0, "publish position to start at (the 'next start' of a previous run)")
	fs.BoolVar(&c.Sequenced, "sequenced", false, "publish by stream sequence, without Nats-Msg-Id (faster): each batch states the sequence it follows, and the producer resumes where the stream says it stopped; needs a stream with atomic batches")
	fs.Uint64Var(&c.Count, "count", 0, "messages to publish, duplicates included (0 = unbounded)")
	fs.IntVar(&c.Batch, "batch", producer.MaxBatch, "most messages stored in one atomic batch (one fsync each); above 1000 the server's jetstream limits batch max_msgs must allow it")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", DefaultMaxInFlight, "bound on unacknowledged publishes when messages go one by one")

	g := &c.Gen
	fs.Int64Var(&g.Seed, "seed", 1, "generator seed")
	fs.StringVar(&firstEventTime, "first-event-time", "", "event time of event 0, RFC 3339 or Unix ms (default 2024-01-01T00:00:00Z)")
	fs.Float64Var(&g.EventsPerSecond, "events-per-second", 1000, "event-time spacing: events per second of event time")
	fs.IntVar(&g.Partitions, "partitions", 4, "ingress partitions")
	fs.IntVar(&g.KeyGroups, "key-groups", 256, "key groups of the pipeline")
	fs.DurationVar(&g.OutOfOrder, "out-of-order", 0, "largest ordinary event-time jitter")
	fs.Uint64Var(&g.Events, "events", 0, "bound the stream to this many events (0 = unbounded)")

	h := &g.Hard
	fs.IntVar(&h.LateEvery, "late-every", 0, "make every Nth event late (0 = never)")
	fs.DurationVar(&h.LateBy, "late-by", 0, "how late a late event is")
	fs.IntVar(&h.DuplicateEvery, "duplicate-every", 0, "follow every Nth event by a duplicate (0 = never)")
	fs.IntVar(&h.FutureEvery, "future-every", 0, "put every Nth event in the future (0 = never)")
	fs.DurationVar(&h.FutureBy, "future-by", 0, "how far ahead a future event is")
	fs.IntVar(&h.IdlePartition, "idle-partition", -1, "partition that goes idle (-1 = none)")
	fs.Uint64Var(&h.IdleFrom, "idle-from", 0, "first event index of the idle range")
	fs.Uint64Var(&h.IdleTo, "idle-to", 0, "end (exclusive) of the idle range")
	fs.Float64Var(&h.HotKeyRatio, "hot-key-ratio", 0, "fraction of bids on the hot auction")

	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		env := envName(f.Name)
		f.Usage += " (" + env + ")"
		if v := getenv(env); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("nexmarkgen: %s=%q: %w", env, v, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("nexmarkgen: unexpected arguments %q", fs.Args())
	}
	if c.Sequenced {
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "start" {
				errs = append(errs, fmt.Errorf("nexmarkgen: -start with -sequenced: publishing by sequence, the producer starts where the stream says it stopped"))
			}
		})
		if err := errors.Join(errs...); err != nil {
			return Config{}, err
		}
	}
	if firstEventTime != "" {
		t, err := parseTime(firstEventTime)
		if err != nil {
			return Config{}, fmt.Errorf("nexmarkgen: first-event-time: %w", err)
		}
		g.FirstEventTime = t
	}
	if contractPath != "" {
		ct, err := contracts.Load(contractPath)
		if err != nil {
			return Config{}, fmt.Errorf("nexmarkgen: refusing to start: %w", err)
		}
		c.Stream, c.Streams = ct.Ingress.Stream, ct.Ingress.Streams
		c.SubjectPrefix = ct.Ingress.SubjectPrefix
		c.Retention = ct.Ingress.Retention.D()
		c.DuplicateWindow = ingress.Duplicates(ct.Ingress)
		g.Partitions = ct.Ingress.Partitions
		g.KeyGroups = ct.State.KeyGroups
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c.WithDefaults(), nil
}

func parseTime(s string) (time.Time, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms).UTC(), nil
	}
	return time.Parse(time.RFC3339Nano, s)
}
