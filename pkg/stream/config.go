package stream

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/envflag"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/internal/redact"
	"github.com/weirflow/weir/pkg/telemetry"
)

// Config is how one operator instance is run. Services build it from flags
// and environment with ParseConfig; tests and `weir demo` build it directly.
type Config struct {
	// Replay, when set, runs the instance in a bounded replay (weir
	// replay): into a new result generation, the pipeline renamed
	// <pipeline>-<generation> with its own streams, buckets and state,
	// reading the ingress only from sequence From through Until and ending
	// each ingress input with a final watermark that closes every window.
	Replay *Replay
	// SemanticMigration declares that restoring a snapshot whose state
	// means something else in this build (checkpoint.Meaning: another key
	// selection, trigger policy, shorter TTL…) is intended: the restore
	// goes ahead and is audited (-semantic-migration,
	// WEIR_SEMANTIC_MIGRATION). Without it such a restore is refused.
	SemanticMigration bool
	// NATSURL is the NATS server to connect to (NATS_URL). On a cluster,
	// list several servers separated by commas so that the client
	// reconnects to another when one dies.
	NATSURL string
	// Auth is who the instance is to NATS, and the TLS it speaks (-creds,
	// -tls-ca… and their NATS_ variables).
	Auth natsconn.Auth
	// CheckpointKeys, when set, seal every snapshot file before it leaves
	// the host and open the sealed ones a restore downloads
	// (checkpoint.Keys; -checkpoint-keys, WEIR_CHECKPOINT_KEYS, a file of
	// keys). Without them snapshots are uploaded as they are, and a sealed
	// one does not restore.
	CheckpointKeys *checkpoint.Keys
	// RedactionKey keys the hashes of what the contract declares
	// sensitive (redact.For; -redaction-key, WEIR_REDACTION_KEY, a file
	// weir auth writes). A contract that hashes does not start without it.
	RedactionKey []byte
	// Replicas is how many copies JetStream keeps of every stream and
	// bucket weir creates for the pipeline — the edges, the dead-letter
	// stream and the checkpoint buckets (WEIR_REPLICAS, flag -replicas).
	// 1 (the default; zero means 1) suits a single server; a cluster of
	// three uses 3, so that the pipeline goes on when one node dies. It
	// must be at most the cluster's size, and 1 to 5. Every service of a
	// pipeline, the coordinator included, must use the value weir
	// provision made the assets with: each checks them when it starts and
	// refuses others — scaling is weir provision's — creating them only
	// where they are missing and its credentials allow.
	Replicas int
	// ContractPath is the pipeline's contract file (WEIR_CONTRACT).
	ContractPath string
	// Contract, when set, is used instead of loading ContractPath. It is
	// still linted: no instance runs on a bad contract.
	Contract *contracts.Contract
	// DataDir holds the instance's Pebble store (WEIR_DATA_DIR).
	DataDir string
	// Operator is the operator's ID in the contract (WEIR_OPERATOR).
	Operator string
	// Instance names this running copy (WEIR_INSTANCE); it is part of
	// every frame ID this instance writes.
	Instance string
	// Version is the service's version, reported to $SRV.INFO.
	Version string
	// Clock is the processing-time clock; nil means the system clock. Only
	// tests replace it.
	Clock func() time.Time
	// Logger receives the runtime's log; nil discards.
	Logger *slog.Logger
	// TickInterval is how often processing-time timers and state TTL are
	// serviced; zero means one second.
	TickInterval time.Duration
	// Telemetry, when set, receives the instance's metrics and the spans
	// of traced records.
	Telemetry *telemetry.Telemetry
	// CreateIngress makes a source operator create the ingress stream from
	// the contract when it does not exist yet (WEIR_CREATE_INGRESS, flag
	// -create-ingress); otherwise a missing ingress stream stops it with an
	// error saying which stream it needs.
	CreateIngress bool
	// Faults is what failure tests inject: a disk that refuses writes,
	// and points at which to die. Nil in production.
	Faults *Faults
}

// Faults are the test-and-fault hooks of a runtime: what failure tests
// inject to make an instance's disk fail or its process die at exactly
// the points whose recovery they check. A nil *Faults, and each nil
// hook, injects nothing.
type Faults struct {
	// StateFS is the file system the instance's Pebble store is kept on;
	// nil is the real disk (vfs.Default). Tests wrap the real disk in
	// Pebble's errorfs to make it refuse writes.
	StateFS vfs.FS
	// BeforeCommit and AfterCommit, when set, run around every step's
	// commit, with the number of steps committed before it. Failure tests
	// use them to die at exactly those points.
	BeforeCommit, AfterCommit func(step int64)
	// BeforeFence, when set, runs after a restore or start-over put its
	// state in place and before the instance fences its older
	// generations.
	BeforeFence func()
	// AfterRelease, when set, runs after a transactional sink's batch of
	// results is stored and before they are released from the state, with
	// the batch's size.
	AfterRelease func(results int64)
}

// stateFS is the file system of the instance's Pebble store: nil, the
// real disk, unless a fault test gives another.
func (f *Faults) stateFS() vfs.FS {
	if f == nil {
		return nil
	}
	return f.StateFS
}

// beforeCommit, afterCommit, beforeFence and afterRelease run the hooks
// of the same names, when set.
func (f *Faults) beforeCommit(step int64) {
	if f != nil && f.BeforeCommit != nil {
		f.BeforeCommit(step)
	}
}

func (f *Faults) afterCommit(step int64) {
	if f != nil && f.AfterCommit != nil {
		f.AfterCommit(step)
	}
}

func (f *Faults) beforeFence() {
	if f != nil && f.BeforeFence != nil {
		f.BeforeFence()
	}
}

func (f *Faults) afterRelease(results int64) {
	if f != nil && f.AfterRelease != nil {
		f.AfterRelease(results)
	}
}

// Validate reports what is missing or wrong, every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.NATSURL == "" {
		errs = append(errs, errors.New("stream: NATS URL is required (flag -nats or NATS_URL)"))
	}
	if err := c.Auth.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.ContractPath == "" && c.Contract == nil {
		errs = append(errs, errors.New("stream: contract is required (flag -contract or WEIR_CONTRACT)"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("stream: data directory is required (flag -data or WEIR_DATA_DIR)"))
	}
	if c.Operator == "" {
		errs = append(errs, errors.New("stream: operator ID is required (flag -operator or WEIR_OPERATOR)"))
	}
	if c.Instance == "" || strings.ContainsAny(c.Instance, ".*> /") {
		errs = append(errs, fmt.Errorf("stream: instance %q must be a non-empty token without . * > / or spaces (flag -instance or WEIR_INSTANCE)", c.Instance))
	}
	if c.TickInterval < 0 {
		errs = append(errs, errors.New("stream: tick interval must not be negative"))
	}
	if r := c.Replay; r != nil && (r.Generation == "" || strings.ContainsAny(r.Generation, ".*> /") || r.From < 1 || r.Until != 0 && r.Until < r.From) {
		errs = append(errs, fmt.Errorf("stream: a replay needs a generation name (a token without . * > / or spaces) and ingress sequences 1 <= from <= until (until 0: a shadow, reading on), not %q %d..%d", r.Generation, r.From, r.Until))
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("stream: replicas %d must be 1 to 5 (flag -replicas or WEIR_REPLICAS)", c.Replicas))
	}
	return errors.Join(errs...)
}

// LogValue logs the configuration once at start.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("nats", c.NATSURL),
		slog.Any("auth", c.Auth),
		slog.Bool("checkpoints_sealed", c.CheckpointKeys != nil),
		slog.Bool("redaction_keyed", c.RedactionKey != nil),
		slog.String("contract", c.ContractPath),
		slog.String("data", c.DataDir),
		slog.String("operator", c.Operator),
		slog.String("instance", c.Instance),
		slog.String("version", c.Version),
		slog.Int("replicas", c.replicas()),
	)
}

// ParseConfig builds a Config from command-line args (without the program
// name) and the environment: flags override environment variables, which
// override defaults; -h prints them all, with their variables, and returns
// flag.ErrHelp. defaultOperator is the service's operator ID.
func ParseConfig(name, defaultOperator string, args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	host, _ := os.Hostname()
	fs := envflag.New(name, getenv, stderr)
	var c Config
	fs.String(&c.NATSURL, "nats", "NATS_URL", "nats://127.0.0.1:4222", "NATS server URL; several, comma-separated, on a cluster")
	c.Auth.Flags(fs)
	fs.String(&c.ContractPath, "contract", "WEIR_CONTRACT", "", "pipeline contract file")
	fs.String(&c.DataDir, "data", "WEIR_DATA_DIR", "", "state directory")
	fs.String(&c.Operator, "operator", "WEIR_OPERATOR", defaultOperator, "operator ID in the contract ('*': every operator of the service)")
	fs.String(&c.Instance, "instance", "WEIR_INSTANCE", sanitize(host), "instance name")
	fs.Int(&c.Replicas, "replicas", "WEIR_REPLICAS", 1, "replicas of the streams and buckets, 1 to 5, as weir provision made them: one with others is refused")
	fs.Bool(&c.CreateIngress, "create-ingress", "WEIR_CREATE_INGRESS", false, "create the ingress stream from the contract when it does not exist")
	var keys string
	fs.String(&keys, "checkpoint-keys", "WEIR_CHECKPOINT_KEYS", "", "file of the keys that seal checkpoints and savepoints, one \"ID base64-key\" per line, the last one current (weir auth -checkpoint-key writes and rotates it)")
	var redactionKey string
	fs.String(&redactionKey, "redaction-key", "WEIR_REDACTION_KEY", "", "file of the key that hashes what the contract declares sensitive (security), base64 on one line (weir auth writes redaction.key)")
	fs.Bool(&c.SemanticMigration, "semantic-migration", "WEIR_SEMANTIC_MIGRATION", false, "declare that restoring a snapshot whose state this build reads with another meaning (key selection, triggers, TTL…) is intended; it is audited")
	var replay Replay
	var from, until int64
	fs.String(&replay.Generation, "replay-generation", "WEIR_REPLAY_GENERATION", "", "a replay (weir replay) or shadow (weir shadow): the result generation to write, as pipeline <pipeline>-<generation>")
	fs.Int64(&from, "replay-from", "WEIR_REPLAY_FROM", 0, "replay or shadow: the first ingress sequence to read")
	fs.Int64(&until, "replay-until", "WEIR_REPLAY_UNTIL", 0, "bounded replay: the last ingress sequence to read (0: a shadow, which reads on)")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if replay.Generation != "" || from != 0 || until != 0 {
		if replay.Generation == "" || from < 1 || until != 0 && until < from {
			return Config{}, fmt.Errorf("%s: a replay reads ingress sequences -replay-from %d through -replay-until %d into -replay-generation %q: give a generation and 1 <= from <= until, or until 0 for a shadow that reads on", name, from, until, replay.Generation)
		}
		replay.From, replay.Until = uint64(from), uint64(until)
		c.Replay = &replay
	}
	if keys != "" {
		k, err := checkpoint.LoadKeys(keys)
		if err != nil {
			return Config{}, fmt.Errorf("%s: %w", name, err)
		}
		c.CheckpointKeys = k
	}
	if redactionKey != "" {
		k, err := redact.LoadKey(redactionKey)
		if err != nil {
			return Config{}, fmt.Errorf("%s: %w", name, err)
		}
		c.RedactionKey = k
	}
	if c.Replicas == 0 {
		// Zero means 1 only in a Config built directly.
		return Config{}, fmt.Errorf("%s: replicas 0 must be 1 to 5 (flag -replicas or WEIR_REPLICAS)", name)
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("%s: unexpected arguments %q", name, fs.Args())
	}
	return c, c.Validate()
}

// Replay bounds a replay run: the generation it writes, and the ingress
// sequences it reads, both included. An Until of 0 is a shadow: it reads
// from From on, into the live records, without an end.
type Replay struct {
	Generation  string
	From, Until uint64
}

// Pipeline is the name of the replay's pipeline: its result generation.
func (r Replay) Pipeline(pipeline string) string { return pipeline + "-" + r.Generation }

// replicas is Replicas with zero meaning 1.
func (c Config) replicas() int { return max(c.Replicas, 1) }

func sanitize(s string) string {
	if s == "" {
		return "0"
	}
	return strings.NewReplacer(".", "-", "/", "-", " ", "-", "*", "-", ">", "-").Replace(s)
}
