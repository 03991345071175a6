package access_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
)

func allows(subjects []string, subject string) bool {
	return slices.ContainsFunc(subjects, func(f string) bool { return server.SubjectMatchesFilter(subject, f) })
}

// publishes is whether g may publish subject: allowed and not denied, as
// the server judges it.
func publishes(g access.Grant, subject string) bool {
	return allows(g.Publish, subject) && !allows(g.DenyPublish, subject)
}

// TestGrantsAreLeast: with dedup and publish in services of their own,
// only dedup may read the ingress and only publish may write the result
// edge; the producer may publish to the ingress and nothing else of the
// pipeline; no process may subscribe to another's inbox or to the
// default one; and nothing granted for one pipeline touches the streams,
// buckets or subjects of another.
func TestGrantsAreLeast(t *testing.T) {
	c, err := contracts.Shipped("nexmark-dedup")
	if err != nil {
		t.Fatal(err)
	}
	c.Operators[1].Service = "publisher"
	c.Deletion = contracts.Deletion{Within: contracts.Duration{Duration: 48 * time.Hour}, Replay: contracts.ErasureWins}
	grants, err := access.ForContract(c)
	if err != nil {
		t.Fatal(err)
	}
	g := func(role string) access.Grant {
		gr, ok := access.Of(grants, role)
		if !ok {
			t.Fatalf("no grant for %s", role)
		}
		return gr
	}
	dedup, publisher, producer, coord, admin := g("dedup"), g("publisher"), g(access.RoleProducer), g(access.RoleCoordinator), g(access.RoleAdmin)
	const kv, files = "$KV.WEIR_NEXMARK_CHECKPOINTS.", "WEIR_NEXMARK_CHECKPOINTS"
	for _, c := range []struct {
		what  string
		grant access.Grant
		pub   string
		want  bool
	}{
		{"dedup pulls from the ingress", dedup, "$JS.API.CONSUMER.MSG.NEXT.NEXMARK.nexmark_dedup_0_ingress_0", true},
		{"publisher pulls from the ingress", publisher, "$JS.API.CONSUMER.MSG.NEXT.NEXMARK.nexmark_dedup_0_ingress_0", false},
		{"publisher writes the result edge", publisher, "weir.nexmark.events.0", true},
		{"dedup writes the result edge", dedup, "weir.nexmark.events.0", false},
		{"dedup writes the deduped edge", dedup, "weir.nexmark.deduped.3", true},
		{"dedup files its own dead letters", dedup, "weir.nexmark.dlq.dedup", true},
		{"dedup files the publisher's dead letters", dedup, "weir.nexmark.dlq.publish", false},
		{"dedup triggers a checkpoint", dedup, "weir.ctl.nexmark.checkpoint.trigger", false},
		{"the producer publishes to the ingress", producer, "nexmark.events.2", true},
		{"the producer writes an edge", producer, "weir.nexmark.deduped.0", false},
		{"the producer reads the checkpoints", producer, "$JS.API.CONSUMER.CREATE.OBJ_WEIR_NEXMARK_CHECKPOINTS.x", false},
		{"dedup watches the erasure registry", dedup, "$JS.API.DIRECT.GET.KV_WEIR_NEXMARK_ERASURES", true},
		{"dedup makes or changes a consumer of the erasure registry", dedup, "$JS.API.CONSUMER.CREATE.KV_WEIR_NEXMARK_ERASURES.x", false},
		{"dedup makes or changes a consumer of the checkpoint bucket", dedup, "$JS.API.CONSUMER.CREATE.KV_WEIR_NEXMARK_CHECKPOINTS.x", false},
		{"the coordinator makes or changes a consumer of an edge", coord, "$JS.API.CONSUMER.CREATE.WEIR_NEXMARK_DEDUPED.x", false},
		{"the coordinator looks at an edge's consumers", coord, "$JS.API.CONSUMER.INFO.WEIR_NEXMARK_DEDUPED.x", true},
		{"dedup reports an erasure", dedup, "weir.ctl.nexmark.erase.done.dedup.0", true},
		{"dedup reports the publisher's erasure", dedup, "weir.ctl.nexmark.erase.done.publish.0", false},
		{"dedup acknowledges a checkpoint", dedup, "weir.ctl.nexmark.checkpoint.ack.dedup.0", true},
		{"dedup acknowledges for the publisher", dedup, "weir.ctl.nexmark.checkpoint.ack.publish.0", false},
		{"dedup stores its manifest", dedup, kv + "manifest.dedup.0.7", true},
		{"dedup stores its savepoint manifest", dedup, kv + "savepoint.before.dedup.0", true},
		{"dedup registers, fences, reports what was trimmed", dedup, kv + "fence.dedup.0", true},
		{"dedup stores the publisher's manifest", dedup, kv + "manifest.publish.0.7", false},
		{"dedup fences the publisher", dedup, kv + "fence.publish.0", false},
		{"dedup moves the latest checkpoint", dedup, kv + "latest", false},
		{"dedup takes the coordinator's lease", dedup, kv + "coordinator", false},
		{"dedup writes the assignment", dedup, kv + "assignment", false},
		{"dedup writes the checkpoint log", dedup, kv + "checkpoint.00000000000000000007", false},
		{"dedup purges the checkpoint bucket", dedup, "$JS.API.STREAM.PURGE.KV_WEIR_NEXMARK_CHECKPOINTS", false},
		{"dedup purges the snapshot files", dedup, "$JS.API.STREAM.PURGE.OBJ_WEIR_NEXMARK_CHECKPOINTS", false},
		{"dedup deletes a manifest's message", dedup, "$JS.API.STREAM.MSG.DELETE.KV_WEIR_NEXMARK_CHECKPOINTS", false},
		{"dedup writes a snapshot file", dedup, "$O." + files + "-DEDUP.C.abc", true},
		{"dedup writes a snapshot file's metadata", dedup, "$O." + files + "-DEDUP.M.abc", true},
		{"dedup reads its snapshot files", dedup, "$JS.API.CONSUMER.CREATE.OBJ_" + files + "-DEDUP.x", true},
		{"dedup purges its snapshot files", dedup, "$JS.API.STREAM.PURGE.OBJ_" + files + "-DEDUP", false},
		{"dedup writes the publisher's snapshot file", dedup, "$O." + files + "-PUBLISH.C.abc", false},
		{"dedup rolls the publisher's snapshot files up", dedup, "$O." + files + "-PUBLISH.M.abc", false},
		{"dedup purges the publisher's snapshot files", dedup, "$JS.API.STREAM.PURGE.OBJ_" + files + "-PUBLISH", false},
		{"dedup deletes a message of the publisher's files", dedup, "$JS.API.STREAM.MSG.DELETE.OBJ_" + files + "-PUBLISH", false},
		{"dedup reads the publisher's snapshot files", dedup, "$JS.API.CONSUMER.CREATE.OBJ_" + files + "-PUBLISH.x", false},
		{"dedup reads a chunk of the publisher's files", dedup, "$JS.API.DIRECT.GET.OBJ_" + files + "-PUBLISH.$O." + files + "-PUBLISH.C.abc", false},
		{"dedup looks the publisher's files up", dedup, "$JS.API.DIRECT.GET.OBJ_" + files + "-PUBLISH.$O." + files + "-PUBLISH.M.abc", true},
		{"dedup writes the shared snapshot files", dedup, "$O." + files + ".M.abc", false},
		{"dedup reads the shared snapshot files", dedup, "$JS.API.CONSUMER.CREATE.OBJ_" + files + ".x", true},
		{"dedup files a fallback", dedup, "weir.nexmark.audit.fallback.nexmark", true},
		{"dedup files a restore", dedup, "weir.nexmark.audit.restore.nexmark", false},
		{"the coordinator moves the latest checkpoint", coord, kv + "latest", true},
		{"the coordinator takes its lease", coord, kv + "coordinator", true},
		{"the coordinator writes the assignment", coord, kv + "assignment", false},
		{"the coordinator acknowledges for dedup", coord, "weir.ctl.nexmark.checkpoint.ack.dedup.0", false},
		{"the coordinator purges the checkpoint bucket", coord, "$JS.API.STREAM.PURGE.KV_WEIR_NEXMARK_CHECKPOINTS", false},
		{"the coordinator purges dedup's snapshot files", coord, "$JS.API.STREAM.PURGE.OBJ_" + files + "-DEDUP", true},
		{"the coordinator purges the publisher's snapshot files", coord, "$JS.API.STREAM.PURGE.OBJ_" + files + "-PUBLISH", true},
		{"the coordinator purges the shared snapshot files", coord, "$JS.API.STREAM.PURGE.OBJ_" + files, true},
		{"the coordinator deletes a publisher's file", coord, "$O." + files + "-PUBLISH.M.abc", true},
		{"the coordinator writes a publisher's file", coord, "$O." + files + "-PUBLISH.C.abc", false},
		{"the administrator writes the assignment", admin, kv + "assignment", true},
		{"the administrator purges the checkpoint bucket", admin, "$JS.API.STREAM.PURGE.KV_WEIR_NEXMARK_CHECKPOINTS", true},
		{"the administrator purges the publisher's snapshot files", admin, "$JS.API.STREAM.PURGE.OBJ_" + files + "-PUBLISH", true},
		{"the administrator purges the shared snapshot files", admin, "$JS.API.STREAM.PURGE.OBJ_" + files, true},
		{"dedup registers an erasure", dedup, "$KV.WEIR_NEXMARK_ERASURES.key.x", false},
		{"the producer reads the erasure registry", producer, "$JS.API.CONSUMER.CREATE.KV_WEIR_NEXMARK_ERASURES.x", false},
	} {
		if got := publishes(c.grant, c.pub); got != c.want {
			t.Errorf("%s (%s): allowed %t, want %t", c.what, c.pub, got, c.want)
		}
	}
	other, err := contracts.Shipped("nexmark-q5")
	if err != nil {
		t.Fatal(err)
	}
	other.Pipeline = "other"
	others, err := access.ForContract(other)
	if err != nil {
		t.Fatal(err)
	}
	for _, gr := range grants {
		if allows(gr.Subscribe, "_INBOX.x") {
			t.Errorf("%s may read the default inbox", gr.Name)
		}
		for _, o := range others {
			if allows(gr.Subscribe, o.Inbox+".x") {
				t.Errorf("%s may read %s's replies", gr.Name, o.Name)
			}
			for _, s := range append(o.Publish, o.Subscribe...) {
				if shared(s) {
					continue
				}
				for _, mine := range append(gr.Publish, gr.Subscribe...) {
					if server.SubjectsCollide(mine, s) {
						t.Errorf("%s of pipeline %s is granted %s, which touches %s of pipeline %s", gr.Name, c.Pipeline, mine, s, other.Pipeline)
					}
				}
			}
		}
	}
}

// TestOnlyTheAdministratorProvisions: no runtime process — a service, the
// coordinator, the producer, the dispatcher — may create or update a
// stream or bucket, its own edges included (a stream's republish or
// sources reach past every permission); the dispatcher may not make or
// change its durable consumer, only consume through it; each may still
// look its streams up. The
// administrator, who runs weir provision, may do all of it.
func TestOnlyTheAdministratorProvisions(t *testing.T) {
	c, err := contracts.Shipped("nexmark-dedup")
	if err != nil {
		t.Fatal(err)
	}
	c.Sink.Effect = contracts.EffectOutbox
	c.Deletion = contracts.Deletion{Within: contracts.Duration{Duration: 48 * time.Hour}, Replay: contracts.ErasureWins}
	grants, err := access.ForContract(c)
	if err != nil {
		t.Fatal(err)
	}
	streams := []string{"NEXMARK", "WEIR_NEXMARK_DEDUPED", "WEIR_NEXMARK_EVENTS", "WEIR_NEXMARK_DLQ", "WEIR_NEXMARK_AUDIT",
		"KV_WEIR_NEXMARK_CHECKPOINTS", "OBJ_WEIR_NEXMARK_CHECKPOINTS", "OBJ_WEIR_NEXMARK_CHECKPOINTS-DEDUP",
		"OBJ_WEIR_NEXMARK_CHECKPOINTS-PUBLISH", "KV_WEIR_NEXMARK_ERASURES",
		"KV_WEIR_NEXMARK_EVENTS_OUTCOMES", "WEIR_NEXMARK_EVENTS_DLQ"}
	durable := "$JS.API.CONSUMER.DURABLE.CREATE.WEIR_NEXMARK_EVENTS.nexmark_dispatcher"
	filtered := "$JS.API.CONSUMER.CREATE.WEIR_NEXMARK_EVENTS.nexmark_dispatcher.weir.nexmark.events.*"
	for _, g := range grants {
		admin := g.Role == access.RoleAdmin
		for _, s := range streams {
			for _, call := range []string{"STREAM.CREATE", "STREAM.UPDATE"} {
				// The audit trail is created once and never updated.
				want := admin && !(s == "WEIR_NEXMARK_AUDIT" && call == "STREAM.UPDATE")
				if subj := "$JS.API." + call + "." + s; allows(g.Publish, subj) != want {
					t.Errorf("%s: %s allowed %t", g.Name, subj, !want)
				}
			}
		}
	}
	d, _ := access.Of(grants, access.RoleDispatcher)
	admin, _ := access.Of(grants, access.RoleAdmin)
	for _, subj := range []string{durable, filtered} {
		if allows(d.Publish, subj) || !allows(admin.Publish, subj) {
			t.Errorf("%s: the dispatcher allowed %t, the administrator %t", subj, allows(d.Publish, subj), allows(admin.Publish, subj))
		}
	}
	for _, subj := range []string{"$JS.API.STREAM.INFO.WEIR_NEXMARK_EVENTS", "$JS.API.CONSUMER.INFO.WEIR_NEXMARK_EVENTS.nexmark_dispatcher",
		"$JS.API.CONSUMER.MSG.NEXT.WEIR_NEXMARK_EVENTS.nexmark_dispatcher", "$JS.ACK.WEIR_NEXMARK_EVENTS.nexmark_dispatcher.1.2.3.4.5.6.7"} {
		if !allows(d.Publish, subj) {
			t.Errorf("the dispatcher may not %s", subj)
		}
	}
	if allows(d.Publish, "$JS.API.CONSUMER.DELETE.WEIR_NEXMARK_EVENTS.nexmark_dispatcher") {
		t.Error("the dispatcher may delete its consumer")
	}
}

// TestOnlyTheAdministratorErasesAnOutbox: weir erase, run as the
// administrator, deletes a key's settled intents from the outbox and its
// dead letters, and rewrites the dispatcher's outcomes; no runtime process
// may delete an intent or a dead letter — the writer of the outbox and
// the dispatcher included — and only the dispatcher, whose records they
// are, may write outcomes besides.
func TestOnlyTheAdministratorErasesAnOutbox(t *testing.T) {
	c, err := contracts.Shipped("nexmark-winning-bids")
	if err != nil {
		t.Fatal(err)
	}
	c.Deletion = contracts.Deletion{Within: contracts.Duration{Duration: 48 * time.Hour}, Replay: contracts.ErasureWins}
	grants, err := access.ForContract(c)
	if err != nil {
		t.Fatal(err)
	}
	const outbox, letters = "WEIR_NEXMARK_WINNING_BIDS_CHARGES", "WEIR_NEXMARK_WINNING_BIDS_CHARGES_DLQ"
	outcome := "$KV.WEIR_NEXMARK_WINNING_BIDS_CHARGES_OUTCOMES.0b2e3d8c-3a4b-5c6d-8e9f-0a1b2c3d4e5f"
	for _, g := range grants {
		admin := g.Role == access.RoleAdmin
		for _, s := range []string{outbox, letters} {
			if subj := "$JS.API.STREAM.MSG.DELETE." + s; allows(g.Publish, subj) != admin {
				t.Errorf("%s: %s allowed %t", g.Name, subj, !admin)
			}
		}
		if want := admin || g.Role == access.RoleDispatcher; allows(g.Publish, outcome) != want {
			t.Errorf("%s: %s allowed %t", g.Name, outcome, !want)
		}
	}
}

// shared says whether a subject is one every pipeline may use: the
// account's JetStream limits, the service framework's pings — which name
// operators, not pipelines — the Nexmark generator's status endpoint,
// named by its producer, and the user's ingress stream NEXMARK, which both
// pipelines of the test read.
func shared(subject string) bool {
	if subject == "$JS.API.INFO" || strings.HasPrefix(subject, "$SRV.") || strings.HasPrefix(subject, "nexmark.events.") ||
		strings.HasPrefix(subject, "weir.svc.nexmark-gen.") {
		return true
	}
	return slices.Contains(strings.Split(subject, "."), "NEXMARK")
}
