package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/natstest"
)

// TestProvisionIsIdempotent: `weir provision -ingress`, run with the
// ingress account administrator's credentials weir auth wrote, creates the
// shared ingress and a consumer feeding each pipeline's mirror of it;
// `weir provision -accounts`, with a pipeline administrator's, creates
// every stream, bucket and consumer of the dedup pipeline — its mirror of
// the ingress, and an outbox's for winning-bids — and run again finds each
// as declared; run with a changed contract it updates the one stream that
// changed, naming the field.
func TestProvisionIsIdempotent(t *testing.T) {
	srv, out := authServer(t, "-contract", "nexmark-dedup,nexmark-winning-bids")
	as := func(pipeline string) []string {
		user := access.UserName(pipeline, access.RoleAdmin)
		return []string{"-nats", srv.ClientURL(), "-nkey", filepath.Join(out, user+".nk"), "-inbox-prefix", access.Inbox(user)}
	}
	ingressAdmin := access.IngressAdmin(contracts.Ingress{Stream: "NEXMARK"}).Name
	in, err := weir(t, "provision", "-ingress", "-contract", "nexmark-dedup,nexmark-winning-bids", "-nats", srv.ClientURL(),
		"-nkey", filepath.Join(out, ingressAdmin+".nk"), "-inbox-prefix", access.Inbox(ingressAdmin))
	if err != nil {
		t.Fatalf("weir provision -ingress: %v\n%s", err, in)
	}
	for _, want := range []string{"stream NEXMARK: created", "consumer mirror-nexmark of stream NEXMARK: created",
		"consumer mirror-nexmark-winning-bids of stream NEXMARK: created", "3 created"} {
		if !strings.Contains(in, want) {
			t.Errorf("weir provision -ingress did not print %q:\n%s", want, in)
		}
	}
	provision := func(contract, pipeline string) string {
		t.Helper()
		o, err := weir(t, append([]string{"provision", "-accounts", "-contract", contract}, as(pipeline)...)...)
		if err != nil {
			t.Fatalf("weir provision -contract %s: %v\n%s", contract, err, o)
		}
		return o
	}
	first := provision("nexmark-dedup", "nexmark")
	for _, want := range []string{"stream NEXMARK: created", "stream WEIR_NEXMARK_DEDUPED: created", "stream WEIR_NEXMARK_EVENTS: created",
		"stream WEIR_NEXMARK_DLQ: created", "stream WEIR_NEXMARK_AUDIT: created",
		"key-value bucket WEIR_NEXMARK_CHECKPOINTS: created", "object bucket WEIR_NEXMARK_CHECKPOINTS-DEDUP: created",
		"object bucket WEIR_NEXMARK_CHECKPOINTS-PUBLISH: created", "8 created, 0 updated, 0 as declared"} {
		if !strings.Contains(first, want) {
			t.Errorf("the first weir provision did not print %q:\n%s", want, first)
		}
	}
	if again := provision("nexmark-dedup", "nexmark"); !strings.Contains(again, "0 created, 0 updated, 8 as declared") {
		t.Errorf("weir provision run again:\n%s", again)
	}
	t.Logf("first:\n%s", first)

	// The outbox's dispatcher: its outcomes, dead letters and consumer.
	outbox := provision("nexmark-winning-bids", "nexmark-winning-bids")
	for _, want := range []string{"stream NEXMARK: created", "key-value bucket WEIR_NEXMARK_WINNING_BIDS_CHARGES_OUTCOMES: created",
		"stream WEIR_NEXMARK_WINNING_BIDS_CHARGES_DLQ: created", "consumer nexmark-winning-bids_dispatcher of stream WEIR_NEXMARK_WINNING_BIDS_CHARGES: created"} {
		if !strings.Contains(outbox, want) {
			t.Errorf("weir provision of an outbox did not print %q:\n%s", want, outbox)
		}
	}
	if again := provision("nexmark-winning-bids", "nexmark-winning-bids"); !strings.Contains(again, "0 created, 0 updated, 9 as declared") {
		t.Errorf("weir provision of the outbox run again:\n%s", again)
	}

	// A changed contract: the deduped edge kept 12 hours.
	b, err := os.ReadFile(filepath.Join("..", "..", "contracts", "nexmark-dedup.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const edge = "  - name: deduped\n"
	if !strings.Contains(string(b), edge) {
		t.Fatalf("the shipped dedup contract has no %q", edge)
	}
	changed := filepath.Join(t.TempDir(), "dedup.yaml")
	if err := os.WriteFile(changed, []byte(strings.Replace(string(b), edge, edge+"    retention: 12h\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	o := provision(changed, "nexmark")
	if !strings.Contains(o, "stream WEIR_NEXMARK_DEDUPED: updated — max_age 24h0m0s → 12h0m0s") || !strings.Contains(o, "0 created, 1 updated, 7 as declared") {
		t.Errorf("weir provision of a changed contract:\n%s", o)
	}
}

// TestProvisionOverIngressStreams: weir provision makes each stream of an
// ingress over several (ingress.streams), named <stream>_<i>, and run
// again finds them as declared.
func TestProvisionOverIngressStreams(t *testing.T) {
	srv := natstest.Run(t)
	file := overStreams(t, "nexmark-q7", 2)
	first, err := weir(t, "provision", "-contract", file, "-nats", srv.ClientURL())
	if err != nil {
		t.Fatalf("weir provision: %v\n%s", err, first)
	}
	for _, want := range []string{"stream NEXMARK_0: created", "stream NEXMARK_1: created"} {
		if !strings.Contains(first, want) {
			t.Errorf("weir provision did not print %q:\n%s", want, first)
		}
	}
	if strings.Contains(first, "stream NEXMARK:") {
		t.Errorf("weir provision made the one stream too:\n%s", first)
	}
	again, err := weir(t, "provision", "-contract", file, "-nats", srv.ClientURL())
	if err != nil || !strings.Contains(again, "0 created, 0 updated") {
		t.Errorf("weir provision run again: %v\n%s", err, again)
	}
}
