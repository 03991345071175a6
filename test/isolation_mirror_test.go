package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/access"
	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/pkg/ingress"
	"github.com/weirflow/weir/pkg/stream"
	"github.com/weirflow/weir/pkg/stream/streamtest"
	"github.com/weirflow/weir/pkg/view"
	"github.com/weirflow/weir/pkg/window"
	"github.com/weirflow/weir/provision"
	"github.com/weirflow/weir/services/dedup"
)

// publishEvents publishes events from..to-1 to the ingress partitions, as
// the producer.
func publishEvents(t *testing.T, ctx context.Context, js jetstream.JetStream, c *contracts.Contract, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if _, err := js.Publish(ctx, c.Ingress.Subject(i%c.Ingress.Partitions), fmt.Appendf(nil, `{"id":"e-%d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
}

// streamSubjects is what a stream holds, per subject.
func streamSubjects(ctx context.Context, js jetstream.JetStream, name string) (jetstream.StreamState, error) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return jetstream.StreamState{}, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		return jetstream.StreamState{}, err
	}
	return info.State, nil
}

// TestAServiceCannotFeedItsPipelinesMirror: the dedup pipeline's
// publisher service, as its real user, holds no right on the ingress — it
// reads an edge and writes the sink. The pipeline's mirror of the ingress
// takes as its consumer's delivery any message on weir.mirror.<pipeline>
// in the pipeline's account whose reply names a consumer called
// mirror-<pipeline>; a deliver subject is checked against no permission,
// and the service may make consumers, named as it likes, on every stream
// it reads. So it makes a consumer mirror-nexmark on its checkpoint
// bucket — whose keys it writes at the sequences it chooses — delivering
// to the mirror's subject: two of its keys go into the mirror at the
// sequences the next events would have had, and the mirror skips the
// fifty events the producer sends next. A mirror must hold exactly what
// the ingress holds. (Fails on 1146bcf, both forms: the mirror holds the
// two keys and lacks 49 events, with a gap inside it that no reader's
// check of where the stream begins sees.)
func TestAServiceCannotFeedItsPipelinesMirror(t *testing.T) {
	for _, form := range []struct {
		name string
		jwt  bool
	}{{"config", false}, {"jwt", true}} {
		t.Run(form.name, func(t *testing.T) {
			c := splitDedup(t)
			d := startDeployment(t, form.jwt, c)
			d.provision(t)
			r := d.run(c.Pipeline)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			producer := r.js(t, access.RoleProducer)
			admin := r.js(t, access.RoleAdmin)
			origin := d.js(t, access.IngressAdmin(c.Ingress).Name)
			mirrorState := func() jetstream.StreamState {
				t.Helper()
				st, err := admin.Stream(ctx, c.Ingress.Stream)
				if err != nil {
					t.Fatal(err)
				}
				return st.CachedInfo().State
			}
			publishEvents(t, ctx, producer, c, 0, 20)
			streamtest.CheckFor(t, 30*time.Second, func() error {
				if s := mirrorState(); s.LastSeq != 20 {
					return fmt.Errorf("the mirror's last sequence is %d, want 20", s.LastSeq)
				}
				return nil
			})

			a := r.attacker(t, "publisher")
			ajs := a.js(t)
			bucket := checkpoint.BucketName(c.Pipeline)
			kvStream, kv := "KV_"+bucket, "$KV."+bucket+"."
			// put writes a key the publisher may write, and returns its
			// sequence in the bucket's stream.
			put := func(key string) uint64 {
				t.Helper()
				ack, err := ajs.Publish(ctx, kv+key, []byte("forged"))
				if err != nil {
					t.Fatal(err)
				}
				return ack.Sequence
			}
			// fill writes keys until the bucket's last sequence is seq.
			fill := func(seq uint64) {
				t.Helper()
				st, err := ajs.Stream(ctx, kvStream)
				if err != nil {
					t.Fatal(err)
				}
				for last := st.CachedInfo().State.LastSeq; last < seq; {
					last = put(fmt.Sprintf("manifest.publish.filler.%d", last))
				}
			}
			const skip = 50
			next := mirrorState().LastSeq + 1
			fill(next - 1)
			if seq := put("fence.publish.8"); seq != next {
				t.Fatalf("the forged key went to sequence %d of the bucket, not %d: the attack below tries nothing", seq, next)
			}
			fill(next + skip - 1)
			put("fence.publish.9")
			filter := kv + "fence.publish.*"
			name := ingress.MirrorConsumer(c.Pipeline)
			req, _ := json.Marshal(map[string]any{"stream_name": kvStream, "config": map[string]any{
				"name": name, "deliver_subject": ingress.MirrorSubject(c.Pipeline), "filter_subject": filter,
				"ack_policy": "none", "deliver_policy": "all"}})
			if resp, err := a.nc.Request("$JS.API.CONSUMER.CREATE."+kvStream+"."+name+"."+filter, req, 5*time.Second); err != nil {
				t.Logf("the publisher's consumer %s was not made (%v)", name, err)
			} else {
				t.Logf("the publisher's consumer %s: %.120s", name, resp.Data)
			}
			time.Sleep(2 * time.Second)
			publishEvents(t, ctx, producer, c, 20, 120)

			var want jetstream.StreamState
			streamtest.CheckFor(t, 30*time.Second, func() error {
				var err error
				if want, err = streamSubjects(ctx, origin, c.Ingress.Stream); err != nil {
					return err
				}
				if s := mirrorState(); s.LastSeq < want.LastSeq {
					return fmt.Errorf("the mirror's last sequence is %d, the ingress's %d", s.LastSeq, want.LastSeq)
				}
				return nil
			})
			got, err := streamSubjects(ctx, admin, c.Ingress.Stream)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got.Subjects, want.Subjects) || got.NumDeleted != 0 {
				t.Fatalf("the publisher service fed the pipeline's mirror: it holds %d messages, by subject %v, with %d sequences skipped; the ingress holds %d, by subject %v",
					got.Msgs, got.Subjects, got.NumDeleted, want.Msgs, want.Subjects)
			}
		})
	}
}

// TestRetentionPastALaggingMirrorStopsTheReader: the dedup operator has
// read the 60 events its pipeline's mirror holds when the mirror stops
// receiving — here its consumer in the ingress account is gone until weir
// provision -ingress makes it again; a stalled mirror is the same — while
// the producer sends 410 more and the ingress, which keeps 400 messages,
// removes 10 the mirror never copied. When the mirror receives again it
// skips them (nats-server marks them deleted inside the mirror: its first
// sequence does not move). weir promises that a range retention removed
// before it was read stops the reader. (Fails on 1146bcf: the operator
// reads on past the gap.)
func TestRetentionPastALaggingMirrorStopsTheReader(t *testing.T) {
	c := splitDedup(t)
	c.Ingress.MaxMsgs = 400
	c.Ingress.Retention = contracts.Duration{Duration: 6 * time.Minute}
	c.Capacity.ArrivalRate = 1 // 400 messages keep 6m40s
	d := startDeployment(t, false, c)
	d.provision(t)
	r := d.run(c.Pipeline)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	producer := r.js(t, access.RoleProducer)
	admin := r.js(t, access.RoleAdmin)
	cfg := genConfig(c, 1000)
	cfg.Count = 60
	publish(t, producer, cfg)

	o, err := dedup.Factories()["dedup"](c)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := stream.New(stream.Config{NATSURL: r.srv.ClientURL(), Auth: r.users["dedup"], Contract: c, DataDir: t.TempDir(),
		Operator: "dedup", Instance: "0", TickInterval: 20 * time.Millisecond, Logger: testLogger(t)}, o)
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(rctx) }()
	stopped := false
	defer func() {
		rcancel()
		if !stopped {
			<-done
		}
	}()
	streamtest.CheckFor(t, 60*time.Second, func() error {
		if n := rt.Stats().In; n < 60 {
			return fmt.Errorf("the operator has read %d of 60 events", n)
		}
		return nil
	})

	inAdmin := d.users[access.IngressAdmin(c.Ingress).Name]
	origin := d.js(t, access.IngressAdmin(c.Ingress).Name)
	if err := origin.DeleteConsumer(ctx, c.Ingress.Stream, ingress.MirrorConsumer(c.Pipeline)); err != nil {
		t.Fatal(err)
	}
	cfg.Start, cfg.Count = 60, 410
	publish(t, producer, cfg)
	ost, err := origin.Stream(ctx, c.Ingress.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if first := ost.CachedInfo().State.FirstSeq; first != 71 {
		t.Fatalf("the ingress begins at %d, want 71: retention removed events 61 to 70, which the mirror never had", first)
	}
	provisionAs(t, r.srv.ClientURL(), inAdmin, provision.Options{Ingress: true}, c)

	select {
	case err := <-done:
		stopped = true
		var te *edge.TrimmedError
		if !errors.As(err, &te) {
			t.Fatalf("the operator stopped with %v, want a TrimmedError", err)
		}
		t.Logf("the operator stopped: %v", err)
	case <-time.After(30 * time.Second):
		st, _ := admin.Stream(ctx, c.Ingress.Stream)
		info, _ := st.Info(ctx, jetstream.WithDeletedDetails(true))
		t.Errorf("the operator read on past events 61 to 70, which retention removed before the mirror copied them: %d events read, the mirror begins at %d and skipped %v",
			rt.Stats().In, info.State.FirstSeq, info.State.Deleted)
	}
}

// TestTheMonitorReadsNoKeyOfAView: the monitor reads the state of every
// stream and never a message. A view's keys are the results' keys — who
// or what the pipeline counts — and a key-value bucket's key is its
// message's subject: asking a view bucket's stream information with a
// subject filter (JetStream's subjects_filter, in the request's body,
// which no permission reads) lists them — an erased key too, whose purge
// marker keeps the key as its subject until the bucket's age limit
// removes it. (Fails on 1146bcf, both forms.)
func TestTheMonitorReadsNoKeyOfAView(t *testing.T) {
	for _, form := range []struct {
		name string
		jwt  bool
	}{{"config", false}, {"jwt", true}} {
		t.Run(form.name, func(t *testing.T) { monitorReadsNoKeyOfAView(t, form.jwt) })
	}
}

func monitorReadsNoKeyOfAView(t *testing.T, decentralized bool) {
	c, err := contracts.Shipped("nexmark-q7")
	if err != nil {
		t.Fatal(err)
	}
	c.Sink.Effect = contracts.EffectVersionedUpsert
	if ps := c.Lint(); len(ps) > 0 {
		t.Fatal(ps)
	}
	d := startDeployment(t, decentralized, c)
	d.provision(t)
	r := d.run(c.Pipeline)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	result := c.Operators[len(c.Operators)-1].Output
	bucket := view.Bucket(c.Pipeline, result)
	kv, err := r.js(t, access.RoleAdmin).KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	start := time.UnixMilli(1_700_000_000_000)
	key := view.Key(window.Pane{Key: "alice@example.com", Window: window.Window{Start: start, End: start.Add(10 * time.Second)}})
	if _, err := kv.Put(ctx, key, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	// Then the key is erased (weir erase; the view's writer purges its
	// windows): a purge leaves a marker, whose subject is the key.
	v, err := view.Open(ctx, r.js(t, access.RoleAdmin), c.Pipeline, result)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := v.Erase(ctx, []byte("alice@example.com")); err != nil || n != 1 {
		t.Fatalf("erased %d windows of the key (%v), want 1", n, err)
	}
	a := r.attacker(t, access.RoleMonitor)
	resp, err := a.nc.Request(jsapi.Prefix(c.Pipeline)+".STREAM.INFO.KV_"+bucket, []byte(`{"subjects_filter":">"}`), 5*time.Second)
	if err != nil {
		t.Logf("the monitor's request was not answered: %v", err)
		return
	}
	if strings.Contains(string(resp.Data), strings.SplitN(key, ".", 2)[0]) {
		t.Fatalf("the monitor lists the keys of view %s, an erased one among them: %s", bucket, resp.Data)
	}
}

// TestAPipelineCannotFillAnothersStorage: q5's service, as its real user,
// writes to its own output edge — a stream with an age limit and no byte
// limit — until the server stores no more. Each pipeline's account may use
// only so much storage (weir auth -account-storage), so it is q5's
// account that fills, and the dedup pipeline's producer still publishes
// to the ingress. (On the build before, accounts had no limits: q5 took
// the whole server's storage and the producer's publish was refused.)
func TestAPipelineCannotFillAnothersStorage(t *testing.T) {
	for _, form := range []struct {
		name string
		jwt  bool
	}{{"config", false}, {"jwt", true}} {
		t.Run(form.name, func(t *testing.T) {
			var cs []*contracts.Contract
			for _, name := range []string{"nexmark-q5", "nexmark-dedup"} {
				c, err := contracts.Shipped(name)
				if err != nil {
					t.Fatal(err)
				}
				cs = append(cs, c)
			}
			// Each account 16 MiB; the server has room for all of them.
			d := startLimitedDeployment(t, form.jwt, 16<<20, cs...)
			d.provision(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			a := d.run("nexmark-q5").attacker(t, "nexmark-q5")
			ajs := a.js(t)
			frame := make([]byte, 1<<20)
			written := 0
			for ; written < 100; written++ {
				if _, err := ajs.Publish(ctx, q5BidSubject, frame); err != nil {
					t.Logf("q5's service wrote %d MiB to its edge, then: %v", written, err)
					break
				}
			}
			if written == 100 {
				t.Fatal("q5's service wrote 100 MiB into an account allowed 16")
			}
			producer := d.js(t, "nexmark-producer")
			if _, err := producer.Publish(ctx, "nexmark.events.0", []byte(`{"id":"e-1"}`)); err != nil {
				t.Fatalf("after q5's service wrote %d MiB to its own edge, the dedup pipeline's producer cannot publish to the ingress: %v", written, err)
			}
		})
	}
}
