package stream_test

import (
	"strings"
	"testing"

	"github.com/weirflow/weir/pkg/stream"
)

func TestParseConfigReplicas(t *testing.T) {
	base := map[string]string{"NATS_URL": "nats://a:4222,nats://b:4222", "WEIR_CONTRACT": "c.yaml", "WEIR_DATA_DIR": "/d", "WEIR_INSTANCE": "i-1"}
	parse := func(env map[string]string, args ...string) (stream.Config, error) {
		merged := map[string]string{}
		for k, v := range base {
			merged[k] = v
		}
		for k, v := range env {
			merged[k] = v
		}
		return stream.ParseConfig("x", "dedup", args, func(k string) string { return merged[k] }, &strings.Builder{})
	}
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		want int
		err  string
	}{
		{name: "default", want: 1},
		{name: "environment", env: map[string]string{"WEIR_REPLICAS": "3"}, want: 3},
		{name: "flag wins", env: map[string]string{"WEIR_REPLICAS": "3"}, args: []string{"-replicas", "5"}, want: 5},
		{name: "not a number", env: map[string]string{"WEIR_REPLICAS": "three"}, err: "WEIR_REPLICAS"},
		{name: "zero", args: []string{"-replicas", "0"}, err: "replicas 0"},
		{name: "too many", env: map[string]string{"WEIR_REPLICAS": "7"}, err: "replicas 7"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := parse(c.env, c.args...)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want mention of %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Replicas != c.want || cfg.NATSURL != base["NATS_URL"] {
				t.Fatalf("replicas %d, URL %q; want %d", cfg.Replicas, cfg.NATSURL, c.want)
			}
		})
	}
	// A Config built directly may leave Replicas zero: it means 1.
	if err := (stream.Config{NATSURL: "n", ContractPath: "c", DataDir: "d", Operator: "o", Instance: "i"}).Validate(); err != nil {
		t.Fatal(err)
	}
}
