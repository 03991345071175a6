package envflag_test

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/weirflow/weir/internal/envflag"
)

func TestFlagsOverrideEnvironmentOverridesDefaults(t *testing.T) {
	env := map[string]string{"NATS_URL": "nats://env:4222", "WEIR_WAIT": "3s", "WEIR_N": "7"}
	var out bytes.Buffer
	fs := envflag.New("cmd", func(k string) string { return env[k] }, &out)
	var url, name string
	var wait time.Duration
	var n int
	fs.String(&url, "nats", "NATS_URL", "nats://default:4222", "server")
	fs.String(&name, "name", "WEIR_NAME", "def", "a name")
	fs.Duration(&wait, "wait", "WEIR_WAIT", time.Second, "how long")
	fs.Int(&n, "n", "WEIR_N", 1, "how many")
	if err := fs.Parse([]string{"-n", "9", "rest"}); err != nil {
		t.Fatal(err)
	}
	if url != "nats://env:4222" || name != "def" || wait != 3*time.Second || n != 9 || fs.Arg(0) != "rest" {
		t.Fatalf("got %q %q %v %d %v", url, name, wait, n, fs.Args())
	}
	if !fs.Given("nats") || !fs.Given("n") || fs.Given("name") {
		t.Fatal("Given does not tell flags set by the command line or the environment")
	}
}

func TestHelpNamesTheVariables(t *testing.T) {
	var out bytes.Buffer
	fs := envflag.New("cmd", func(string) string { return "" }, &out)
	var url string
	fs.String(&url, "nats", "NATS_URL", "nats://127.0.0.1:4222", "NATS server URL")
	if err := fs.Parse([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
	if !strings.Contains(out.String(), "NATS server URL (NATS_URL)") {
		t.Fatalf("usage does not name the variable:\n%s", out.String())
	}
}

func TestBadEnvironmentValueIsAnError(t *testing.T) {
	fs := envflag.New("cmd", func(string) string { return "soon" }, &bytes.Buffer{})
	var wait time.Duration
	fs.Duration(&wait, "wait", "WEIR_WAIT", time.Second, "how long")
	if err := fs.Parse(nil); err == nil || !strings.Contains(err.Error(), `WEIR_WAIT="soon"`) {
		t.Fatalf("err = %v, want one naming WEIR_WAIT", err)
	}
}
