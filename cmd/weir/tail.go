package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/cli"
	"github.com/weirflow/weir/internal/edge"
)

// tailRecord is one record as tail prints it.
type tailRecord struct {
	Kind      string          `json:"kind"`
	ID        string          `json:"id,omitempty"`
	Key       string          `json:"key,omitempty"`
	Time      *time.Time      `json:"time,omitempty"`
	Epoch     uint64          `json:"epoch,omitempty"`
	Source    string          `json:"source,omitempty"`
	Partition string          `json:"subject"`
	Value     json.RawMessage `json:"value,omitempty"`
}

// tail prints the records of an edge as JSON lines.
func tail(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, srv, pipeline := ctlFlags("weir tail", getenv)
	var edgeName string
	var limit int
	var follow bool
	fs.String(&edgeName, "edge", "WEIR_EDGE", "deduped", "edge name")
	fs.Int(&limit, "n", "WEIR_TAIL_N", 0, "stop after this many records (0: follow)")
	fs.Bool(&follow, "f", "WEIR_TAIL_FOLLOW", true, "wait for new records at the end of the edge")
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	nc, js, gen, err := connectServed(ctx, srv, *pipeline, stderr)
	if err != nil {
		return err
	}
	defer nc.Close()
	*pipeline = gen
	st, err := js.Stream(ctx, edge.StreamName(*pipeline, edgeName))
	if err != nil {
		return fmt.Errorf("edge %s of pipeline %s: %w", edgeName, *pipeline, err)
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	n := 0
	for limit == 0 || n < limit {
		msg, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoMessages) {
			if !follow || ctx.Err() != nil {
				return nil
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		recs, err := edge.DecodeFrame(msg.Data())
		if err != nil {
			return err
		}
		for _, r := range recs {
			out := tailRecord{Kind: r.Kind.String(), ID: r.ID, Key: string(r.Key), Epoch: r.Epoch, Partition: msg.Subject()}
			if !r.Time.IsZero() {
				t := r.Time
				out.Time = &t
			}
			if r.At.Stream != "" {
				out.Source = r.At.String()
			}
			if json.Valid(r.Value) {
				out.Value = r.Value
			}
			if err := enc.Encode(out); err != nil {
				return err
			}
			n++
			if limit > 0 && n >= limit {
				return nil
			}
		}
	}
	return nil
}
