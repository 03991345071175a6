package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/dispatcher"
	"github.com/weirflow/weir/pkg/checkpoint"
	"github.com/weirflow/weir/pkg/natsconn"
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

// refused publishes data to subject and fails the test unless the server
// denies it.
func (a *attacker) refused(t *testing.T, what, subject string, data []byte) {
	t.Helper()
	if err := a.nc.Publish(subject, data); err != nil {
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
// in the audit trail. The pipeline goes on checkpointing, and every event
// reaches the sink once.
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
	if h, err := cr.store.LeaseHolder(ctx); err != nil || h != "co" {
		t.Errorf("the lease is held by %q (%v), want the coordinator co", h, err)
	}
	if _, _, err := cr.store.Assignment(ctx); err == nil {
		t.Error("an assignment was written")
	}
	streamtest.CheckFor(t, 30*time.Second, func() error {
		l, _, err := cr.store.Latest(ctx)
		if err != nil || l.Checkpoint < cr.first.Checkpoint+2 || l.Checkpoint > cr.first.Checkpoint+1000 {
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
	streamtest.CheckFor(t, 60*time.Second, func() error {
		l, _, err := cr.store.Latest(ctx)
		if err != nil || l.Checkpoint < attacked+3 || triggers.Load() < 3 {
			return fmt.Errorf("latest is checkpoint %d after %d triggers attacked, want 3 completed under attack after %d (%v)", l.Checkpoint, triggers.Load(), attacked, err)
		}
		return nil
	})
	recs, err := cr.store.Records(ctx)
	if err != nil {
		t.Fatal(err)
	}
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
		{"make it as a durable", "$JS.API.CONSUMER.DURABLE.CREATE." + s + "." + name, `{}`},
		{"delete the consumer", "$JS.API.CONSUMER.DELETE." + s + "." + name, ``},
		{"acknowledge an intent", "$JS.ACK." + s + "." + name + ".1.1.1.0.0", `+ACK`},
	} {
		a.refused(t, at.what, at.subject, []byte(at.body))
	}
	runUntilCleanup(t, "dispatcher", d.Run)
	streamtest.CheckFor(t, 60*time.Second, func() error { return checkCharged(p, want) })
}
