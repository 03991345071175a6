package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/dispatcher"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/services/dedup"
	"github.com/weirflow/weir/services/provider"
)

// attacker is a connection as the real user of a role — what a process of
// that role, compromised, holds — that notes every publish the server
// denies it.
type attacker struct {
	nc     *nats.Conn
	denied chan string
}

func (r *accessRun) attacker(t *testing.T, role string) *attacker {
	t.Helper()
	a := &attacker{denied: make(chan string, 4096)}
	nc, err := r.users[role].Connect(r.srv.ClientURL(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if s, ok := natsconn.DeniedPublish(err); ok {
			select {
			case a.denied <- s:
			default:
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	a.nc = nc
	return a
}

// js is JetStream on the attacker's connection.
func (a *attacker) js(t *testing.T) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(a.nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// refused publishes data to subject and fails the test unless the server
// denies it.
func (a *attacker) refused(t *testing.T, what, subject string, data []byte) {
	t.Helper()
	a.refusedMsg(t, what, &nats.Msg{Subject: subject, Data: data})
}

// refusedMsg publishes m, headers and all, and fails the test unless the
// server denies it.
func (a *attacker) refusedMsg(t *testing.T, what string, m *nats.Msg) {
	t.Helper()
	subject := m.Subject
	if err := a.nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	if err := a.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(5 * time.Second)
	for {
		select {
		case s := <-a.denied:
			if s == subject {
				return
			}
		case <-deadline:
			t.Errorf("%s: the server let the attacker publish to %s", what, subject)
			return
		}
	}
}

// controlPlaneRun runs the dedup pipeline split in two services on the
// credentials weir auth derives, until the test ends, and returns once a
// checkpoint is complete.
type controlPlaneRun struct {
	*accessRun
	c      *contracts.Contract
	store  *checkpoint.Store
	want   map[string]bool
	future int
	first  checkpoint.Latest
}

func startControlPlaneRun(t *testing.T, ctx context.Context) *controlPlaneRun {
	t.Helper()
	cr := &controlPlaneRun{c: splitDedup(t)}
	cr.accessRun = startAccessRun(t, cr.c)
	cfg := genConfig(cr.c, 1500)
	cr.want, cr.future = expected(t, cfg)
	publish(t, cr.js(t, access.RoleProducer), cfg)
	t.Cleanup(cr.runPipeline(t, dedup.Factories(), t.TempDir()))
	var err error
	if cr.store, err = checkpoint.Open(ctx, cr.js(t, access.RoleAdmin), cr.c.Pipeline, 0); err != nil {
		t.Fatal(err)
	}
	streamtest.CheckFor(t, 30*time.Second, func() error {
		if cr.first, _, err = cr.store.Latest(ctx); err != nil || len(cr.first.Manifests) != 2 {
			return fmt.Errorf("no checkpoint complete yet (%v)", err)
		}
		return nil
	})
	return cr
}

// TestAServiceCannotRewriteTheControlPlane attacks the control plane of
// the dedup pipeline, split in two services, as the dedup service's real
// user: it may write neither the latest checkpoint, nor the coordinator's
// lease, the assignment, the checkpoint log or the publisher's manifests,
// fences and registrations, nor purge the checkpoint buckets, acknowledge
// for the publisher, trigger a checkpoint, or file an administrator's act
// in the audit trail; nor purge the bucket by a rollup on a key it may
// write. The pipeline goes on checkpointing, and every event reaches the
// sink once.
func TestAServiceCannotRewriteTheControlPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cr := startControlPlaneRun(t, ctx)
	a := cr.attacker(t, "dedup")
	const kv = "$KV.WEIR_NEXMARK_CHECKPOINTS."
	forged := []byte(`{"checkpoint":999999,"manifests":{"dedup/0":"manifest.dedup.0.1"}}`)
	attacks := []struct{ what, subject string }{
		{"move the latest checkpoint", kv + "latest"},
		{"take the coordinator's lease", kv + "coordinator"},
		{"write an assignment", kv + "assignment"},
		{"write the checkpoint log", kv + "checkpoint.00000000000000999999"},
		{"index a savepoint", kv + "savepoints.forged"},
		{"store the publisher's manifest", kv + "manifest.publish.0.999999"},
		{"fence the publisher", kv + "fence.publish.0"},
		{"register an instance of the publisher", kv + "instance.publish.9"},
		{"purge the checkpoint bucket", "$JS.API.STREAM.PURGE.KV_WEIR_NEXMARK_CHECKPOINTS"},
		{"purge the snapshot files", "$JS.API.STREAM.PURGE.OBJ_WEIR_NEXMARK_CHECKPOINTS"},
		{"delete a message of the checkpoint bucket", "$JS.API.STREAM.MSG.DELETE.KV_WEIR_NEXMARK_CHECKPOINTS"},
		{"acknowledge for the publisher", "weir.ctl.nexmark.checkpoint.ack.publish.0"},
		{"trigger a checkpoint", "weir.ctl.nexmark.checkpoint.trigger"},
		{"file a restore in the audit trail", "weir.nexmark.audit.restore.nexmark"},
		{"file a rescale in the audit trail", "weir.nexmark.audit.scale.nexmark"},
	}
	for _, at := range attacks {
		a.refused(t, at.what, at.subject, forged)
	}
	// A key it may write, with a header that would purge every other
	// key of the bucket: the bucket allows no rollup.
	ajs := a.js(t)
	rollup := nats.NewMsg(kv + "fence.dedup.0")
	rollup.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
	if _, err := ajs.PublishMsg(ctx, rollup); err == nil {
		t.Error("a rollup of the checkpoint bucket was stored: it purges every key")
	}
	// Its health probe pings it: a ping of its own, naming as the reply
	// a subject it may not publish to, then answered by itself.
	echoed := make(chan string, 1)
	esub, err := a.nc.Subscribe("$SRV.PING.weir-dedup", func(m *nats.Msg) {
		if m.Reply == kv+"latest" {
			select {
			case echoed <- m.Reply:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.nc.PublishRequest("$SRV.PING.weir-dedup", kv+"latest", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case reply := <-echoed:
		a.refused(t, "answer its own ping, whose reply it named", reply, forged)
	case <-time.After(10 * time.Second):
		t.Error("the attacker's own ping never reached it")
	}
	_ = esub.Unsubscribe()
	// A consumer of the checkpoint bucket, delivering a key it may write
	// — a trigger of checkpoint 10^12 — to the trigger subject, which it
	// may not publish to: a deliver subject is checked against no
	// permission. It may make no consumer of the bucket (a grant to make
	// one is a grant to change the others'); what a consumer of a stream
	// it may read delivers there, every instance ignores
	// (natsconn.Published, TestPublishedTellsAConsumersDelivery).
	if _, err := ajs.Publish(ctx, kv+"fence.dedup.9", []byte(`{"checkpoint":1000000000000}`)); err != nil {
		t.Fatal(err)
	}
	push, _ := json.Marshal(map[string]any{"stream_name": "KV_WEIR_NEXMARK_CHECKPOINTS", "config": map[string]any{
		"name": "forger", "deliver_subject": checkpoint.TriggerSubject(cr.c.Pipeline), "filter_subject": kv + "fence.dedup.9",
		"ack_policy": "none", "deliver_policy": "all"}})
	a.refused(t, "make a consumer of the checkpoint bucket delivering to the trigger subject",
		"$JS.API.CONSUMER.CREATE.KV_WEIR_NEXMARK_CHECKPOINTS.forger."+kv+"fence.dedup.9", push)
	if l, _, err := cr.store.Latest(ctx); err != nil || l.Checkpoint < cr.first.Checkpoint {
		t.Errorf("after the attacks the latest checkpoint is %d (%v), was %d", l.Checkpoint, err, cr.first.Checkpoint)
	}
	if h, err := cr.store.LeaseHolder(ctx); err != nil || h != "co" {
		t.Errorf("the lease is held by %q (%v), want the coordinator co", h, err)
	}
	if _, _, err := cr.store.Assignment(ctx); err == nil {
		t.Error("an assignment was written")
	}
	before, _, _ := cr.store.Latest(ctx)
	streamtest.CheckFor(t, 30*time.Second, func() error {
		l, _, err := cr.store.Latest(ctx)
		if err != nil || l.Checkpoint < before.Checkpoint+3 || l.Checkpoint > cr.first.Checkpoint+1000 {
			return fmt.Errorf("latest is checkpoint %d (%v), want it to go on from %d", l.Checkpoint, err, cr.first.Checkpoint)
		}
		return nil
	})
	streamtest.CheckFor(t, 60*time.Second, func() error { return checkSink(ctx, cr.js(t, access.RoleAdmin), cr.c, cr.want, cr.future) })
	t.Logf("%d attacks on the control plane refused; checkpoints go on; %d events once at the sink", len(attacks), len(cr.want))
}

// TestForgedAcknowledgementsAreNotCounted: the dedup service's real user,
// at every checkpoint trigger, acknowledges for an instance that does not
// exist, in the publisher's name on its own subject, with another
// checkpoint's manifest, and twenty thousand times more — on every subject
// it may publish to, and on the one all instances shared before they had
// subjects of their own. Every checkpoint completes with the two real
// instances' acknowledgements and manifests alone, and every event
// reaches the sink once.
func TestForgedAcknowledgementsAreNotCounted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cr := startControlPlaneRun(t, ctx)
	a := cr.attacker(t, "dedup")
	var triggers atomic.Int64
	sub, err := a.nc.Subscribe(checkpoint.TriggerSubject(cr.c.Pipeline), func(m *nats.Msg) {
		var tr checkpoint.Trigger
		if json.Unmarshal(m.Data, &tr) != nil {
			return
		}
		triggers.Add(1)
		ghost, _ := json.Marshal(checkpoint.Ack{Checkpoint: tr.Checkpoint, Operator: "dedup", Instance: "ghost",
			Manifest: fmt.Sprintf("manifest.dedup.ghost.%d", tr.Checkpoint)})
		asPublisher, _ := json.Marshal(checkpoint.Ack{Checkpoint: tr.Checkpoint, Operator: "publish", Instance: "0",
			Manifest: fmt.Sprintf("manifest.publish.0.%d", tr.Checkpoint-1)})
		wrongManifest, _ := json.Marshal(checkpoint.Ack{Checkpoint: tr.Checkpoint, Operator: "dedup", Instance: "0",
			Manifest: fmt.Sprintf("manifest.dedup.0.%d", tr.Checkpoint-1)})
		for _, s := range []string{"weir.ctl.nexmark.checkpoint.ack", "weir.ctl.nexmark.checkpoint.ack.dedup.0"} {
			_ = a.nc.Publish(s, asPublisher)
			_ = a.nc.Publish(s, wrongManifest)
		}
		for i := range 20000 {
			s := "weir.ctl.nexmark.checkpoint.ack.dedup.ghost"
			if i%10 == 0 {
				s = "weir.ctl.nexmark.checkpoint.ack"
			}
			_ = a.nc.Publish(s, ghost)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	attacked := cr.first.Checkpoint
	// Three complete under attack (one may abort on a loaded machine:
	// what counts is that forged acknowledgements complete none).
	var recs []checkpoint.Record
	streamtest.CheckFor(t, 90*time.Second, func() error {
		var err error
		if recs, err = cr.store.Records(ctx); err != nil {
			return err
		}
		n := 0
		for _, rec := range recs {
			if rec.Checkpoint > attacked && rec.Status == checkpoint.Complete {
				n++
			}
		}
		if n < 3 || triggers.Load() < 3 {
			return fmt.Errorf("%d checkpoints complete after %d triggers attacked, want 3 completed under attack after %d", n, triggers.Load(), attacked)
		}
		return nil
	})
	complete := 0
	for _, rec := range recs {
		if rec.Checkpoint <= attacked || rec.Status != checkpoint.Complete {
			continue
		}
		complete++
		var keys []string
		for k, ack := range rec.Acks {
			keys = append(keys, k)
			op, inst, _ := strings.Cut(k, "/")
			if ack.Manifest != checkpoint.ManifestKey(op, inst, rec.Checkpoint) {
				t.Errorf("checkpoint %d: %s's acknowledgement names manifest %s", rec.Checkpoint, k, ack.Manifest)
			}
		}
		if slices.Sort(keys); !slices.Equal(keys, []string{"dedup/0", "publish/0"}) {
			t.Errorf("checkpoint %d completed with the acknowledgements of %v, want dedup/0 and publish/0", rec.Checkpoint, keys)
		}
	}
	if complete < 3 {
		t.Errorf("%d checkpoints completed under attack, want 3 or more", complete)
	}
	l, _, err := cr.store.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k, m := range l.Manifests {
		op, inst, _ := strings.Cut(k, "/")
		if m != checkpoint.ManifestKey(op, inst, l.Checkpoint) || (k != "dedup/0" && k != "publish/0") {
			t.Errorf("the latest checkpoint %d names %s's manifest %s", l.Checkpoint, k, m)
		}
	}
	streamtest.CheckFor(t, 60*time.Second, func() error { return checkSink(ctx, cr.js(t, access.RoleAdmin), cr.c, cr.want, cr.future) })
	t.Logf("checkpoints %d to %d completed with the real instances' acknowledgements alone, %d triggers each answered by 20,004 forged ones; %d events once at the sink",
		attacked+1, l.Checkpoint, triggers.Load(), len(cr.want))
}

// TestAServiceCannotForgeAnErasureReport: on a pipeline with a deletion
// policy, the dedup service's real user may report the erasures of its
// own operator only — not the publisher's, nor on the subject all
// instances shared before they had their own.
func TestAServiceCannotForgeAnErasureReport(t *testing.T) {
	c := splitDedup(t)
	c.Deletion = contracts.Deletion{Within: contracts.Duration{Duration: 48 * time.Hour}, Replay: contracts.ErasureWins}
	r := startAccessRun(t, c)
	a := r.attacker(t, "dedup")
	report := []byte(`{"operator":"publish","instance":"0","rev":1,"group_lo":0,"group_hi":255,"keys":1}`)
	a.refused(t, "report the publisher's erasure", "weir.ctl.nexmark.erase.done.publish.0", report)
	a.refused(t, "report on the shared subject", "weir.ctl.nexmark.erase.done", report)
}

// TestTheOutboxWriterCannotTouchTheDispatchersConsumer runs an outbox on
// the credentials weir auth derives and attacks the dispatcher's durable
// consumer as the real user of the service writing the outbox: pulling
// intents from it, acknowledging them, looking at it, changing it and
// deleting it are refused, and every event is charged exactly once.
func TestTheOutboxWriterCannotTouchTheDispatchersConsumer(t *testing.T) {
	c := loadContract(t)
	c.Sink.Effect, c.Sink.MaxPendingEpochs = contracts.EffectOutbox, 2
	r := startAccessRun(t, c)
	feed, want := inSlices(t, r.js(t, access.RoleProducer), c, 600, 1)
	feed(0)
	p := provider.New()
	hs := httptest.NewServer(p)
	defer hs.Close()
	factories := map[string]stream.Factory{"dedup": dedup.Factories()["dedup"], "publish": intentsOperator(c.Pipeline)}
	defer r.runPipeline(t, factories, t.TempDir())()
	cfg, err := dispatcher.ForContract(c, hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = testLogger(t)
	d, err := dispatcher.New(context.Background(), r.js(t, access.RoleDispatcher), cfg)
	if err != nil {
		t.Fatal(err)
	}
	op, _ := c.Operator("publish")
	a := r.attacker(t, op.Service)
	s, name := cfg.Stream, cfg.Consumer
	for _, at := range []struct{ what, subject, body string }{
		{"pull intents", "$JS.API.CONSUMER.MSG.NEXT." + s + "." + name, `{"batch":100}`},
		{"look at the consumer", "$JS.API.CONSUMER.INFO." + s + "." + name, ``},
		{"change the consumer", "$JS.API.CONSUMER.CREATE." + s + "." + name, `{"stream_name":"` + s + `","config":{"durable_name":"` + name + `","ack_policy":"none"}}`},
		{"change the consumer's filter", "$JS.API.CONSUMER.CREATE." + s + "." + name + ".weir.x", `{}`},
		{"change the consumer named in the body", "$JS.API.CONSUMER.CREATE." + s, `{"stream_name":"` + s + `","config":{"name":"` + name + `","filter_subject":"weir.nowhere","max_deliver":1}}`},
		{"make it as a durable", "$JS.API.CONSUMER.DURABLE.CREATE." + s + "." + name, `{}`},
		{"delete the consumer", "$JS.API.CONSUMER.DELETE." + s + "." + name, ``},
		{"acknowledge an intent", "$JS.ACK." + s + "." + name + ".1.1.1.0.0", `+ACK`},
	} {
		a.refused(t, at.what, at.subject, []byte(at.body))
	}
	runUntilCleanup(t, "dispatcher", d.Run)
	streamtest.CheckFor(t, 60*time.Second, func() error { return checkCharged(p, want) })
}

// startSharedAccessRun deploys several pipelines on one server, each
// provisioned by its administrator: one run per contract.
func startSharedAccessRun(t *testing.T, cs ...*contracts.Contract) []*accessRun {
	t.Helper()
	d := startDeployment(t, false, cs...)
	d.provision(t)
	var runs []*accessRun
	for _, c := range cs {
		runs = append(runs, d.run(c.Pipeline))
	}
	return runs
}

// TestAnotherPipelinesServiceCannotTakeTheSharedIngress: the dedup
// pipeline and q5 read the same ingress stream, and a grant to read a
// stream cannot be narrowed to the reader's own consumers (a consumer's
// name is one subject token). Each pipeline has its own account, and reads
// its own mirror of the ingress there. So q5's service, as its real user,
// looking at the ingress while dedup runs, finds none of dedup's
// consumers; pulling from them and deleting them by the names dedup's
// administrator sees reaches nothing; and every event reaches dedup's sink
// exactly once. (On one account for every pipeline it took deliveries
// from them and deleted them.)
func TestAnotherPipelinesServiceCannotTakeTheSharedIngress(t *testing.T) {
	victim := loadContract(t)
	q5, err := contracts.Shipped("nexmark-q5")
	if err != nil {
		t.Fatal(err)
	}
	runs := startSharedAccessRun(t, victim, q5)
	r, thief := runs[0], runs[1]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	feed, want := inSlices(t, r.js(t, access.RoleProducer), victim, 500, 6)
	feed(0)
	defer r.runPipeline(t, dedup.Factories(), t.TempDir())()
	// The victim's consumers, as its administrator sees them.
	vst, err := r.js(t, access.RoleAdmin).Stream(ctx, victim.Ingress.Stream)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	streamtest.CheckFor(t, 30*time.Second, func() error {
		names = nil
		for name := range vst.ConsumerNames(ctx).Name() {
			if strings.HasPrefix(name, victim.Pipeline+"_") {
				names = append(names, name)
			}
		}
		if len(names) == 0 {
			return errors.New("dedup has no consumer on the ingress yet")
		}
		return nil
	})
	a := thief.attacker(t, "nexmark-q5")
	ajs := a.js(t)
	inbox := a.nc.NewRespInbox()
	var taken atomic.Int64
	sub, err := a.nc.Subscribe(inbox, func(m *nats.Msg) {
		if strings.HasPrefix(m.Reply, "$JS.ACK.") && m.Respond([]byte("+ACK")) == nil {
			taken.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	st, err := ajs.Stream(ctx, victim.Ingress.Stream)
	if err != nil {
		t.Fatalf("the thief looks the ingress up: %v", err)
	}
	deleted := 0
	for i := 1; i < 6; i++ {
		for name := range st.ConsumerNames(ctx).Name() {
			if strings.HasPrefix(name, victim.Pipeline+"_") {
				t.Fatalf("q5's service sees dedup's consumer %s on the ingress", name)
			}
		}
		for _, name := range names {
			// A pull that waits, as the reader's do: on a shared stream,
			// new messages would go to the thief's among them.
			_ = a.nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+victim.Ingress.Stream+"."+name, inbox, []byte(`{"batch":20,"expires":1000000000}`))
			if i == 3 && st.DeleteConsumer(ctx, name) == nil {
				deleted++
			}
		}
		time.Sleep(200 * time.Millisecond)
		feed(i)
	}
	streamtest.CheckFor(t, 90*time.Second, func() error { return checkSink(ctx, r.js(t, access.RoleAdmin), victim, want, -1) })
	if taken.Load() > 0 || deleted > 0 {
		t.Fatalf("q5's service took %d deliveries from dedup's ingress consumers and deleted %d of them", taken.Load(), deleted)
	}
	t.Logf("q5's service saw none of dedup's %d ingress consumers, took nothing and deleted nothing; all %d events reached dedup's sink exactly once",
		len(names), len(want))
}

// TestTheCoordinatorAndTheDispatcherHoldToTheirRows: docs/SECURITY.md's
// rows for P's coordinator and dispatcher, tried as their real users on
// the credentials weir auth writes for the dedup pipeline with an outbox.
// The coordinator may not write the assignment, acknowledge for an
// instance, purge the checkpoint bucket, or make or change a stream (it
// may write a manifest's key: a delete of a collected one is a write, and
// sealing refuses a manifest it could forge); the dispatcher may not make, change or delete its
// durable consumer, nor make, change or delete a stream.
func TestTheCoordinatorAndTheDispatcherHoldToTheirRows(t *testing.T) {
	c := loadContract(t)
	c.Sink.Effect, c.Sink.MaxPendingEpochs = contracts.EffectOutbox, 2
	r := startAccessRun(t, c)
	cfg, err := dispatcher.ForContract(c, "http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	bucket := checkpoint.BucketName(c.Pipeline)
	edgeStream := edge.StreamName(c.Pipeline, "deduped")
	co := r.attacker(t, access.RoleCoordinator)
	for _, at := range []struct{ what, subject, body string }{
		{"write the assignment", "$KV." + bucket + ".assignment", `{"version":99}`},
		{"acknowledge for an instance", checkpoint.AckSubject(c.Pipeline, "dedup", "0"), `{}`},
		{"purge the checkpoint bucket", "$JS.API.STREAM.PURGE.KV_" + bucket, `{}`},
		{"make a stream", "$JS.API.STREAM.CREATE.X", `{"name":"X","subjects":["x.>"]}`},
		{"change an edge", "$JS.API.STREAM.UPDATE." + edgeStream, `{}`},
	} {
		co.refused(t, "the coordinator: "+at.what, at.subject, []byte(at.body))
	}
	d := r.attacker(t, access.RoleDispatcher)
	s, name := cfg.Stream, cfg.Consumer
	for _, at := range []struct{ what, subject, body string }{
		{"change its durable", "$JS.API.CONSUMER.CREATE." + s + "." + name, `{"stream_name":"` + s + `","config":{"durable_name":"` + name + `","ack_policy":"none"}}`},
		{"make its durable anew", "$JS.API.CONSUMER.DURABLE.CREATE." + s + "." + name, `{}`},
		{"delete its durable", "$JS.API.CONSUMER.DELETE." + s + "." + name, ``},
		{"make a stream", "$JS.API.STREAM.CREATE.X", `{"name":"X","subjects":["x.>"]}`},
		{"change the outbox", "$JS.API.STREAM.UPDATE." + s, `{}`},
		{"delete the outbox", "$JS.API.STREAM.DELETE." + s, ``},
	} {
		d.refused(t, "the dispatcher: "+at.what, at.subject, []byte(at.body))
	}
}
