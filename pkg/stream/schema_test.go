package stream_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
)

// TestSchemaVersionsShareTheIngress runs the dedup operator over an
// ingress holding records of three schemas, as it does while producers
// move from one to the next: each record is read through its own schema's
// identity fields, records that name no schema as the older one, and what
// no declared decoder reads — a dropped schema, an undeclared one, a
// record whose payload is not the schema it names — is a dead letter
// naming the schema, never a record read with the wrong fields. A contract
// that drops a decoder before its replay horizon does not start.
func TestSchemaVersionsShareTheIngress(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	// The contract as a user writes it: the shipped dedup contract with a
	// schema section under identity.
	c := schemaContract(t, `
    older:
      - version: "1"
        id:         {from: json, field: event_id}
        key:        {from: json, field: user}
        event_time: {from: json, field: time, format: rfc3339}
      - version: "0"
        id:         {from: json, field: old_id}
        key:        {from: json, field: who}
        event_time: {from: json, field: at, format: unix-ms}
        written_until: 2026-01-01T00:00:00Z
        dropped: true
`)
	at := time.Now().Add(-time.Minute)
	v2 := func(id, key string) string {
		return fmt.Sprintf(`{"id":%q,"key":%q,"ts":%d}`, id, key, at.UnixMilli())
	}
	v1 := func(id, key string) string {
		return fmt.Sprintf(`{"event_id":%q,"user":%q,"time":%q}`, id, key, at.Format(time.RFC3339Nano))
	}
	inputs := []struct{ version, payload string }{
		{"2", v2("a", "ann")},
		{"", v1("b", "bob")}, // written before producers named their schema
		{"1", v1("c", "cy")},
		{"2", v2("d", "dee")},
		{"0", `{"old_id":"e","who":"eve","at":1}`},
		{"9", v2("f", "fay")},
		{"1", v2("g", "gus")}, // names 1, written as 2
	}
	for i, in := range inputs {
		m := nats.NewMsg(c.Ingress.Subject(i % c.Ingress.Partitions))
		m.Data = []byte(in.payload)
		if in.version != "" {
			m.Header.Set("Weir-Schema", in.version)
		}
		if _, err := h.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	h.run(c, "dedup", seenOp{families: []string{"seen"}}, t.TempDir())
	var got []string
	var letters []deadletter.Letter
	streamtest.CheckFor(t, 30*time.Second, func() error {
		got = got[:0]
		for _, r := range h.records("deduped") {
			got = append(got, r.ID+"/"+string(r.Key))
		}
		letters = h.letters()
		if len(got) < 4 || len(letters) < 3 {
			return fmt.Errorf("%d records %v and %d dead letters so far", len(got), got, len(letters))
		}
		return nil
	})
	slices.Sort(got)
	if want := []string{"a/ann", "b/bob", "c/cy", "d/dee"}; !slices.Equal(got, want) {
		t.Errorf("read %v, want %v", got, want)
	}
	want := map[uint64]struct{ field, schema, reason string }{
		5: {"schema_version", "", `names schema "0", whose decoder the contract dropped`},
		6: {"schema_version", "", `names schema "9", which the contract does not declare`},
		7: {"id", "1", "json event_id is missing"},
	}
	if len(letters) != len(want) {
		t.Fatalf("%d dead letters, want %d: %+v", len(letters), len(want), letters)
	}
	for _, l := range letters {
		w, ok := want[l.At.Seq]
		if !ok || l.Field != w.field || l.Schema != w.schema || !strings.Contains(l.Reason, w.reason) || l.At.Stream != c.Ingress.Stream {
			t.Errorf("letter at %s: field %s, schema %q, reason %q; want %+v", l.At, l.Field, l.Schema, l.Reason, w)
		}
	}

	// Dropping schema 1, written until a minute ago, with the ingress
	// keeping a day: its records may be replayed for a day yet.
	early := schemaContract(t, `
    older:
      - version: "1"
        id:         {from: json, field: event_id}
        key:        {from: json, field: user}
        event_time: {from: json, field: time, format: rfc3339}
        written_until: `+time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)+`
        dropped: true
`)
	emit := operator.Func(func(env operator.Env, r record.Record) error { return env.Emit(r) })
	_, err := stream.New(stream.Config{NATSURL: h.srv.ClientURL(), Contract: early, DataDir: t.TempDir(), Operator: "dedup", Instance: "0"}, emit)
	if err == nil || !strings.Contains(err.Error(), "identity.schema.older[0].dropped") || !strings.Contains(err.Error(), "keep its decoder") {
		t.Fatalf("a decoder dropped before its replay horizon: %v", err)
	}
}

// schemaContract is the shipped dedup contract whose identity names its
// schema in the Weir-Schema header, reads version 2 with its own fields,
// and records naming none as version 1; older is the YAML of the older
// schemas.
func schemaContract(t *testing.T, older string) *contracts.Contract {
	t.Helper()
	data, err := os.ReadFile("../../contracts/nexmark-dedup.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const after = "  event_time: {from: json, field: ts, format: unix-ms}\n"
	if !bytes.Contains(data, []byte(after)) {
		t.Fatal("the dedup contract's identity changed")
	}
	schema := after + `  schema:
    version: {from: header, header: Weir-Schema}
    current: "2"
    unnamed: "1"` + older
	c, err := contracts.Parse("dedup-schemas.yaml", bytes.Replace(data, []byte(after), []byte(schema), 1))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
