package main

import (
	"context"
	"io"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/cli"
	"github.com/weirflow/weir/internal/envflag"
	"github.com/weirflow/weir/internal/natsconn"
)

// ctlFlags are the flags of the commands that talk to a running pipeline:
// the server, how to connect to it, and the pipeline.
func ctlFlags(name string, getenv func(string) string) (fs *envflag.Set, srv *natsServer, pipeline *string) {
	fs = cli.NewFlags(name, getenv)
	srv, pipeline = new(natsServer), new(string)
	fs.String(&srv.url, "nats", "NATS_URL", nats.DefaultURL, "NATS server URL")
	srv.auth.Flags(fs)
	fs.String(pipeline, "pipeline", "WEIR_PIPELINE", "nexmark", "pipeline name")
	return fs, srv, pipeline
}

// contractUsage is -contract's usage for a command that acts on a
// pipeline as its contract declares it.
const contractUsage = "the pipeline's contract: a file or a shipped contract's name (default: the shipped contract of -pipeline)"

// contractFlag is -contract, the contract of the pipeline a command acts
// on, beside ctlFlags' -pipeline.
type contractFlag struct {
	fs       *envflag.Set
	pipeline *string
	name     string
}

// newContractFlag defines -contract on fs, with usage (contractUsage for
// most commands).
func newContractFlag(fs *envflag.Set, pipeline *string, usage string) *contractFlag {
	f := &contractFlag{fs: fs, pipeline: pipeline}
	fs.String(&f.name, "contract", "WEIR_CONTRACT", "", usage)
	return f
}

// load is the contract the parsed flags name: -contract, a file or a
// shipped contract's name, or the shipped contract of -pipeline; one that
// is not -pipeline's when -pipeline is given is refused.
func (f *contractFlag) load() (*contracts.Contract, error) {
	return statusContract(f.name, *f.pipeline, f.fs.Given("pipeline"))
}

// parse parses args and loads the contract they name: how a command acting
// on one pipeline begins.
func (f *contractFlag) parse(args []string, stdout, stderr io.Writer) (*contracts.Contract, error) {
	if err := cli.Parse(f.fs, args, stdout, stderr); err != nil {
		return nil, err
	}
	return f.load()
}

// loadContracts loads the contracts of a command serving several
// pipelines (-contract of weir auth and weir provision): files or shipped
// contracts' names, comma-separated, or "shipped" for every shipped one.
func loadContracts(list string) ([]*contracts.Contract, error) {
	names := strings.Split(list, ",")
	if list == "shipped" {
		names = contracts.ShippedNames()
	}
	var cs []*contracts.Contract
	for _, name := range names {
		c, err := statusContract(name, "", false)
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// natsServer is the NATS server a command talks to, and what it presents
// there.
type natsServer struct {
	url  string
	auth natsconn.Auth
	// keys is the file of checkpoint keys, for the commands that download
	// snapshots (keysFlag); redactionKey the file of the redaction key, for
	// those that run the pipeline's operators (operatorFlags).
	keys, redactionKey string
}

// keysFlag defines -checkpoint-keys, for a command that downloads
// snapshots: sealed ones open only with their key.
func (s *natsServer) keysFlag(fs *envflag.Set) {
	fs.String(&s.keys, "checkpoint-keys", "WEIR_CHECKPOINT_KEYS", "", "file of the keys checkpoints and savepoints are sealed with, as the services are given")
}

// operatorFlags define -checkpoint-keys (keysFlag) and -redaction-key, for
// a command that runs the pipeline's operators as its services do: an
// operator whose contract hashes sensitive values does not start without
// the redaction key.
func (s *natsServer) operatorFlags(fs *envflag.Set) {
	s.keysFlag(fs)
	fs.String(&s.redactionKey, "redaction-key", "WEIR_REDACTION_KEY", "", "file of the key sensitive values are hashed with (security), as the services are given")
}

// watchKey holds, in a command's context, what the connections it opens
// report their asynchronous errors to (run: natsconn.Auth.Guard).
type watchKey struct{}

// connect opens a connection and its JetStream context. A permissions
// violation the server reports on it ends ctx, and the command with a
// natsconn.DeniedError, rather than leave a denied request to time out.
func (s *natsServer) connect(ctx context.Context, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	if watch, ok := ctx.Value(watchKey{}).(func(error)); ok {
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { watch(err) }))
	}
	return cli.Connect(s.auth, s.url, opts...)
}
