package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/cli"
	"github.com/weirflow/weir/pkg/view"
)

const viewUsage = `usage: weir view get KEY... | list | watch  [-nats URL] [-pipeline NAME] [-edge NAME]

Reads a versioned view — the KV bucket a pipeline with sink.effect
versioned-upsert keeps of its result edge: per key and window, the newest
pane. Each entry is printed as a JSON line: its view key (the pane's key,
escaped, then its window's bounds in Unix milliseconds), its KV revision and
the pane. list leaves retracted windows out; get shows them (kind
"retract"); watch prints every pane the view holds, then each one applied,
until interrupted.
`

// viewCmd is `weir view get|list|watch`.
func viewCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "get" && args[0] != "list" && args[0] != "watch") {
		return cli.UsageOf(viewUsage, args, stdout, stderr)
	}
	verb := args[0]
	fs, srv, pipeline := ctlFlags("weir view "+verb, getenv)
	edgeName := new(string)
	fs.String(edgeName, "edge", "WEIR_EDGE", "results", "the result edge whose view to read")
	if err := cli.Parse(fs, args[1:], stdout, stderr); err != nil {
		return err
	}
	keys := fs.Args()
	switch {
	case verb == "get" && len(keys) == 0:
		return cli.UsageOf(viewUsage, nil, stdout, stderr)
	case verb != "get" && len(keys) > 0:
		return fmt.Errorf("view %s takes no keys (got %q)", verb, keys)
	}
	nc, js, gen, err := connectServed(ctx, srv, *pipeline, stderr)
	if err != nil {
		return err
	}
	defer nc.Close()
	*pipeline = gen
	v, err := view.Open(ctx, js, *pipeline, *edgeName)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("pipeline %s keeps no view of edge %s (no bucket %s): its contract's sink.effect is not versioned-upsert, or it has not started", *pipeline, *edgeName, view.Bucket(*pipeline, *edgeName))
	}
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	switch verb {
	case "get":
		for _, k := range keys {
			e, err := v.Get(ctx, k)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				return fmt.Errorf("view %s holds no key %q", view.Bucket(*pipeline, *edgeName), k)
			}
			if err != nil {
				return err
			}
			if err := enc.Encode(e); err != nil {
				return err
			}
		}
		return nil
	case "list":
		es, err := v.List(ctx)
		if err != nil {
			return err
		}
		for _, e := range es {
			if err := enc.Encode(e); err != nil {
				return err
			}
		}
		return nil
	}
	return v.Watch(ctx, func(e view.Entry) error { return enc.Encode(e) })
}
