// Package cli is what weir's commands share of the command line: flag sets
// whose every flag has an environment variable, how -h and bad flags end a
// command, and the exit status a command ends with. cmd/weir and the
// development harness (internal/harness) parse their flags with it, so a
// command behaves alike whichever of them runs it.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/envflag"
	"github.com/weirflow/weir/internal/natsconn"
)

// ExitError ends the command with a status and no further message: the
// command has already said what went wrong.
type ExitError int

func (e ExitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// ErrHelp ends a command that printed its usage because it was asked to:
// the command succeeded.
var ErrHelp = errors.New("help printed")

// NewFlags is a command's flag set. Every flag has an environment
// variable, named in the usage: NATS_URL and the WEIR_ variables the
// services read where a flag means the same, WEIR_<FLAG> otherwise.
func NewFlags(name string, getenv func(string) string) *envflag.Set {
	return envflag.New(name, getenv, io.Discard)
}

// Parse parses a command's flags. Asked for -h, it prints the usage on
// stdout and returns ErrHelp; a bad flag or variable is printed on stderr
// with the usage, and ends the command with status 2.
func Parse(fs *envflag.Set, args []string, stdout, stderr io.Writer) error {
	fs.SetOutput(stderr)
	if WantsHelp(args) {
		fs.SetOutput(stdout)
	}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return ErrHelp
	case err != nil:
		return ExitError(2)
	}
	return nil
}

// WantsHelp reports whether args ask for the usage (-h, -help, --help).
func WantsHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if slices.Contains([]string{"-h", "-help", "--help"}, a) {
			return true
		}
	}
	return false
}

// UsageOf prints a command's usage line: on stdout when asked for (-h),
// and the command ends well; on stderr otherwise, with status 2.
func UsageOf(line string, args []string, stdout, stderr io.Writer) error {
	if WantsHelp(args) {
		fmt.Fprint(stdout, line)
		return ErrHelp
	}
	fmt.Fprint(stderr, line)
	return ExitError(2)
}

// WorkDir is dir, or if dir is empty a new temporary directory named after
// prefix that cleanup removes.
func WorkDir(dir, prefix string) (_ string, cleanup func(), _ error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	tmp, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	return tmp, func() { os.RemoveAll(tmp) }, nil
}

// Connect opens a connection to url, presenting what auth holds, and its
// JetStream context.
func Connect(auth natsconn.Auth, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := auth.Connect(url, opts...)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}
