// Package access derives from a pipeline's contract what each of its
// processes may do on NATS — least privilege — and writes it in the forms
// NATS deploys: a user per process, identified by an nkey, with publish and
// subscribe permissions in the server's configuration.
//
// A process is granted, by subject:
//
//   - the JetStream API of exactly the streams it uses: an operator the
//     streams it reads (consumers, message gets, acknowledgements), those
//     it writes (its edges, the dead-letter and audit streams), and the
//     pipeline's checkpoint buckets; nothing of another pipeline. Only the
//     administrator creates or updates a stream (weir provision): a
//     stream's republish or sources act with no user's permissions, so a
//     runtime process that could change its own edge could reach any
//     stream of the account;
//   - publishing to the subjects it writes: its output edge, its own
//     operators' dead letters, the audit stream, the checkpoint control
//     subjects its role sends;
//   - subscribing to its own inbox prefix only (Grant.Inbox), so that no
//     process reads the replies — pulled messages included — sent to
//     another; and to the control and service subjects it answers.
//
// Each pipeline is a NATS account of its own, so that nothing a stream's
// configuration does — it acts with no user's permissions, within its
// account — reaches another pipeline (boundary.go: Accounts).
//
// The checkpoint key-value bucket is shared by the pipeline's processes,
// each writing the keys of its own operators only; it refuses rollups
// and purges. Snapshot files are in an object bucket per operator
// (checkpoint.FilesBucket), because an object bucket cannot refuse a
// rollup, and object chunks have random subjects, so no subject
// permission splits one bucket by operator. Of the pipeline's services,
// only those running an operator write its bucket or read its files; the
// others look its files up (which exist, with what digest) and read
// nothing of them. No service purges a file bucket, and none can roll one
// up but its own operators'. The coordinator collects files in every
// bucket; checkpoint encryption keeps one operator's state from any other
// process that can read its files.
//
// # Where the code holds the threat model
//
// SECURITY.md (SECURITY.md) is the threat model. In the code: every
// connection is made through natsconn.Auth (Connect, and Guard, which
// turns a permissions violation the server reports asynchronously into the
// end of the run: a denied request is never answered). access.ForContract
// derives each process's permissions from the contract, with the same name
// functions the runtime uses (edge.StreamName, checkpoint.BucketName,
// deadletter.Subject, dispatcher.ForContract…), so a grant cannot drift
// from what the process does; test.TestEachServiceRunsWithItsOwnCredentials
// fails on any denial the server logs. Snapshot files are sealed in
// checkpoint.Store.Upload when the store has keys (Store.Seal,
// internal/checkpoint/seal.go): the object's name carries the key ID, so a
// rotation uploads every file anew, and Download opens a sealed file while
// hashing the object against the manifest's digest; a missing key is
// ErrNoKey, which restoreState does not treat as corruption. Redaction
// happens where a record leaves beside the results: step.deadLetterAs
// (every dead letter and side output goes through it) files
// redact.Policy.Payload's copy and a reason scrubbed by Text, with the
// record's ID and tenant (Weir-Tenant) hashed by Name where they are
// secret (the decoder reads the tenant right after the ID, so that a record
// refused for any later field is still filed within its tenant), and a
// traced record's span gets its error scrubbed (run.redacted, only when
// there is an error: nothing is added per record).
package access

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/dispatcher"
	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/erasure"
	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/internal/natsconn"
	"github.com/weirflow/weir/internal/status"
	"github.com/weirflow/weir/pkg/ingress"
	"github.com/weirflow/weir/pkg/view"
)

// Roles of the processes that are not a contract's services.
const (
	RoleCoordinator = "coordinator"
	RoleProducer    = "producer"
	RoleDispatcher  = "dispatcher"
	RoleAdmin       = "admin"
	// RoleMonitor is a deployment's, not a pipeline's: it reads the state
	// of every stream — sizes, sequences, consumers' counts — and no
	// message (Monitor).
	RoleMonitor = "monitor"
	// RoleIngressAdmin is an ingress stream's administrator, in that
	// stream's account: weir provision -ingress (IngressAdmin).
	RoleIngressAdmin = "ingress-admin"
)

// Grant is what one process of a pipeline may do.
type Grant struct {
	// Name is the process's user: <pipeline>-<service or role>.
	Name string
	// Account is the NATS account the user belongs to (accounts.go): its
	// pipeline's, its ingress stream's for a producer, the monitor's.
	Account string
	// Role is the contract's service it runs, or one of the Role
	// constants.
	Role string
	// Inbox is the prefix of the process's reply subjects
	// (nats.CustomInboxPrefix): the only inbox it may subscribe to.
	Inbox string
	// Publish and Subscribe are the subjects it may publish and
	// subscribe to, sorted.
	Publish, Subscribe []string
	// DenyPublish are subjects it may not publish to, though Publish
	// allows them: the server checks the denial first. A writer of a
	// transactional edge reads it back with consumers of its own, and
	// must not touch the durable consumer of the edge's reader.
	DenyPublish []string
	// Env are lines NAME=value the process's environment file (.env)
	// holds besides its identity.
	Env []string
}

// ForContract derives the grants of c's processes: one per service of
// its operators, the coordinator, the producers of its ingress (the
// ingest gateway, a generator), the dispatcher when the sink is an outbox,
// and an administrator for the weir commands. Each generation named —
// a `weir replay` or `weir shadow` into pipeline <pipeline>-<generation>,
// `weir cutover` to it — adds that pipeline's streams and buckets to the
// grants of the services and of the administrator, who runs a replay's
// operators in its own process.
func ForContract(c *contracts.Contract, generations ...string) ([]Grant, error) {
	grants, err := forPipeline(c)
	if err != nil {
		return nil, err
	}
	for _, gen := range generations {
		if gen == "" || strings.ContainsAny(gen, ".*> /") {
			return nil, fmt.Errorf("access: generation %q is not a name a replay takes (a token without . * > / or spaces)", gen)
		}
		renamed := *c
		renamed.Pipeline = c.Pipeline + "-" + gen
		more, err := forPipeline(&renamed)
		if err != nil {
			return nil, err
		}
		for _, g := range more {
			for i := range grants {
				// A generation's service runs where the pipeline's does; a
				// replay's operators and the commands on the generation,
				// in the administrator's process. (A replay runs no
				// coordinator, and nothing produces into a generation.)
				same := grants[i].Role == g.Role && !isRole(g.Role)
				admin := grants[i].Role == RoleAdmin && (g.Role == RoleAdmin || !isRole(g.Role))
				if admin && g.Role != RoleAdmin {
					// The administrator runs a replay's operators, and
					// keeps its own rights on what they are denied.
					g.DenyPublish = nil
				}
				if same || admin {
					grants[i] = grants[i].with(g)
				}
			}
		}
	}
	return grants, nil
}

// isRole reports whether role is one of the roles every pipeline has,
// rather than a service of its contract.
func isRole(role string) bool {
	return role == RoleAdmin || role == RoleCoordinator || role == RoleProducer || role == RoleDispatcher
}

// with is g allowed what o is too, under g's name and inbox: o's own inbox
// is left out.
func (g Grant) with(o Grant) Grant {
	for _, p := range o.Publish {
		if !slices.Contains(g.Publish, p) {
			g.Publish = append(g.Publish, p)
		}
	}
	for _, s := range o.Subscribe {
		if s != o.Inbox+".>" && !slices.Contains(g.Subscribe, s) {
			g.Subscribe = append(g.Subscribe, s)
		}
	}
	for _, d := range o.DenyPublish {
		if !slices.Contains(g.DenyPublish, d) {
			g.DenyPublish = append(g.DenyPublish, d)
		}
	}
	sort.Strings(g.DenyPublish)
	sort.Strings(g.Publish)
	sort.Strings(g.Subscribe)
	return g
}

func forPipeline(c *contracts.Contract) ([]Grant, error) {
	if strings.ContainsAny(c.Pipeline, ".*> ") {
		return nil, fmt.Errorf("access: pipeline name %q is not a subject token", c.Pipeline)
	}
	var services []string
	for _, op := range c.Operators {
		if !slices.Contains(services, op.Service) {
			services = append(services, op.Service)
		}
	}
	var grants []Grant
	for _, svc := range services {
		grants = append(grants, serviceGrant(c, svc))
	}
	grants = append(grants, coordinatorGrant(c), producerGrant(c))
	if c.Sink.Effect == contracts.EffectOutbox {
		g, err := dispatcherGrant(c)
		if err != nil {
			return nil, err
		}
		grants = append(grants, g)
	}
	admin, err := adminGrant(c)
	if err != nil {
		return nil, err
	}
	grants = append(grants, admin)
	for i := range grants {
		if grants[i].Account == "" {
			grants[i].Account = c.Pipeline
			grants[i].DenyPublish = withMirrorDenied(grants[i].DenyPublish, c)
		}
	}
	return grants, nil
}

// withMirrorDenied adds to deny every request that would make, in the
// pipeline's account, a consumer named as the one feeding its mirror of
// the ingress (ingress.MirrorConsumer), or answer that consumer's flow
// control. The mirror takes as its feed whatever arrives on its delivery
// subject with a reply naming that consumer, from whichever stream: a
// process making a consumer of that name on a stream it reads, delivering
// there, could put its own messages into the mirror and make it skip the
// ingress's.
func withMirrorDenied(deny []string, c *contracts.Contract) []string {
	name := ingress.MirrorConsumer(c.Pipeline)
	for _, d := range []string{
		"$JS.API.CONSUMER.CREATE.*." + name,
		"$JS.API.CONSUMER.CREATE.*." + name + ".>",
		"$JS.API.CONSUMER.DURABLE.CREATE.*." + name,
		"$JS.FC.*." + name + ".>",
	} {
		if !slices.Contains(deny, d) {
			deny = append(deny, d)
		}
	}
	sort.Strings(deny)
	return deny
}

// Of returns the grant of the named service or role.
func Of(grants []Grant, role string) (Grant, bool) {
	for _, g := range grants {
		if g.Role == role {
			return g, true
		}
	}
	return Grant{}, false
}

// builder collects a grant's subjects.
type builder struct {
	c              *contracts.Contract
	pub, sub, deny map[string]bool
	// answers marks a process that answers requests: it publishes to
	// the inboxes of those that ask (answerers).
	answers bool
	// provisions marks the administrator's grant: the only one that
	// creates and changes streams, buckets and durable consumers (weir
	// provision). A runtime process looks them up.
	provisions bool
}

func newBuilder(c *contracts.Contract) *builder {
	return &builder{c: c, pub: map[string]bool{}, sub: map[string]bool{}, deny: map[string]bool{}}
}

func (b *builder) publish(subjects ...string) {
	for _, s := range subjects {
		b.pub[s] = true
	}
}

func (b *builder) subscribe(subjects ...string) {
	for _, s := range subjects {
		b.sub[s] = true
	}
}

// api allows JetStream API calls on stream.
func (b *builder) api(stream string, calls ...string) {
	for _, call := range calls {
		b.publish("$JS.API." + call + "." + stream)
	}
}

// info lets the process look a stream up.
func (b *builder) info(stream string) { b.api(stream, "STREAM.INFO") }

// ensure lets the process look a stream up, and the administrator make it
// or bring its configuration to the contract (weir provision). A runtime
// process never creates or updates one: a stream's configuration acts
// with no user's permissions — a republish or a source reaches any
// subject or stream of the account.
func (b *builder) ensure(stream string) {
	b.info(stream)
	if b.provisions {
		b.api(stream, "STREAM.CREATE", "STREAM.UPDATE")
	}
}

// read lets the process read a stream: its own consumers — made, looked
// at, pulled from, acknowledged and removed — and single messages.
func (b *builder) read(stream string) {
	b.info(stream)
	// Not CONSUMER.CREATE.<stream> alone: that form takes the consumer's
	// name from the request's body, which no subject permission reads,
	// and would change any consumer of the stream. The jetstream package
	// always names the consumer in the subject.
	b.api(stream, "STREAM.MSG.GET", "DIRECT.GET", "CONSUMER.NAMES", "CONSUMER.LIST")
	b.publish(
		"$JS.API.DIRECT.GET."+stream+".>",
		"$JS.API.CONSUMER.CREATE."+stream+".>",
		"$JS.API.CONSUMER.DURABLE.CREATE."+stream+".*",
		"$JS.API.CONSUMER.INFO."+stream+".*",
		"$JS.API.CONSUMER.DELETE."+stream+".*",
		"$JS.API.CONSUMER.MSG.NEXT."+stream+".*",
		"$JS.ACK."+stream+".>",
		"$JS.FC."+stream+".>",
	)
}

// lookup lets the process read a stream's messages by direct get — a
// bucket's keys, and its watches and listings (jsapi.WatchKV, ListKeys)
// — and make no consumer of it: a grant to make consumers of a stream
// is a grant to change any of them, another process's included (a
// consumer's name is one subject token, no permission narrows to a
// process's own), and a watch whose consumer another process filtered
// away or paused would silently hear nothing.
func (b *builder) lookup(stream string) {
	b.info(stream)
	b.api(stream, "STREAM.MSG.GET", "DIRECT.GET")
	b.publish("$JS.API.DIRECT.GET." + stream + ".>")
}

// protectConsumer denies the process every request on the durable
// consumer name of stream — create or change, look at, pull from,
// acknowledge, pause, delete — which its grant to read the stream with
// consumers of its own would otherwise allow.
func (b *builder) protectConsumer(stream, name string) {
	for _, d := range []string{
		"$JS.API.CONSUMER.CREATE." + stream, // the consumer named in the body
		"$JS.API.CONSUMER.*." + stream + "." + name,
		"$JS.API.CONSUMER.*.*." + stream + "." + name,
		"$JS.API.CONSUMER.CREATE." + stream + "." + name + ".>",
		"$JS.ACK." + stream + "." + name + ".>",
		"$JS.FC." + stream + "." + name + ".>",
	} {
		b.deny[d] = true
	}
}

// durable lets the process consume through the named durable consumer of
// stream, as weir provision made it: look it up, pull and acknowledge —
// not make, change or remove it.
func (b *builder) durable(stream, consumer string) {
	b.info(stream)
	b.publish(
		"$JS.API.CONSUMER.INFO."+stream+"."+consumer,
		"$JS.API.CONSUMER.MSG.NEXT."+stream+"."+consumer,
		"$JS.ACK."+stream+"."+consumer+".>",
	)
}

// bucket gives the process a key-value or object bucket's whole stream,
// whose subjects are under prefix ($KV.<bucket> or $O.<bucket>).
func (b *builder) bucket(stream, prefix string) {
	b.ensure(stream)
	b.read(stream)
	b.api(stream, "STREAM.PURGE", "STREAM.MSG.DELETE")
	b.publish(prefix + ".>")
}

// checkpoints gives the administrator the pipeline's checkpoint buckets
// whole: the key-value bucket, every operator's file bucket, and the
// file bucket the operators shared before each had its own.
func (b *builder) checkpoints() {
	name := checkpoint.BucketName(b.c.Pipeline)
	b.bucket("KV_"+name, "$KV."+name)
	b.bucket("OBJ_"+name, "$O."+name)
	for _, op := range b.c.Operators {
		files := checkpoint.FilesBucket(b.c.Pipeline, op.ID)
		b.bucket("OBJ_"+files, "$O."+files)
	}
}

// checkpointReader lets the process read the pipeline's checkpoint
// key-value bucket — manifests, the log, the assignment — and the file
// bucket its operators shared before each had its own, which a
// checkpoint or savepoint taken then restores from; and returns the
// key-value bucket's name. Nothing writes the shared file bucket but the
// coordinator, which collects what it holds, and the administrator.
func (b *builder) checkpointReader() string {
	name := checkpoint.BucketName(b.c.Pipeline)
	b.ensure("KV_" + name)
	b.lookup("KV_" + name)
	b.ensure("OBJ_" + name)
	b.read("OBJ_" + name)
	return name
}

// fileReader lets the process read operator's snapshot files — what a
// restore or a rescale of its instances downloads — and returns the
// name of their bucket.
func (b *builder) fileReader(operator string) string {
	name := checkpoint.FilesBucket(b.c.Pipeline, operator)
	b.ensure("OBJ_" + name)
	b.read("OBJ_" + name)
	return name
}

// fileInfo lets the process look operator's snapshot files up, not read
// them: which exist, with what digest — what an instance falling back to
// an older checkpoint verifies of every operator's snapshot
// (checkpoint.Store.Verify) — by a direct get of their metadata.
func (b *builder) fileInfo(operator string) {
	name := checkpoint.FilesBucket(b.c.Pipeline, operator)
	b.info("OBJ_" + name)
	b.publish("$JS.API.DIRECT.GET.OBJ_" + name + ".$O." + name + ".M.>")
}

// instanceCheckpoints is what the instances of operator write to the
// checkpoint buckets: their snapshot files, in their operator's own file
// bucket, and under their operator's name only, their manifests,
// savepoint manifests, registrations, fences and trimmed reports
// (internal/checkpoint's keys). Never the latest checkpoint, the lease, the
// assignment, the log or another operator's keys or files; never a purge
// of any bucket.
func (b *builder) instanceCheckpoints(operator string) {
	name := b.checkpointReader()
	kv := "$KV." + name + "."
	b.publish(kv+"manifest."+operator+".>", kv+"savepoint.*."+operator+".*",
		kv+"instance."+operator+".*", kv+"fence."+operator+".*", kv+"trimmed."+operator+".*")
	// Object names have no subject of their own (chunks are named by a
	// random ID, metadata by the name's base64), and a message on either
	// may roll the bucket up: the operator's instances may destroy its
	// files, and no other's. Its files are sealed, under a key that binds
	// the pipeline and the object, and the manifest naming them
	// authenticated, so that a file written in another's place does not
	// open.
	files := b.fileReader(operator)
	b.publish("$O."+files+".C.>", "$O."+files+".M.>")
}

// coordinatorCheckpoints is what the coordinator writes: the latest
// checkpoint (the commit point), its lease, the checkpoint log and the
// savepoints' index — and, collecting old checkpoints, it deletes
// manifests and snapshot files, in every operator's file bucket and the
// shared one, which removes an object's chunks by a purge of their
// subject.
func (b *builder) coordinatorCheckpoints() {
	name := b.checkpointReader()
	kv := "$KV." + name + "."
	b.publish(kv+"latest", kv+"coordinator", kv+"checkpoint.*", kv+"savepoints.*", kv+"manifest.>")
	b.publish("$O." + name + ".M.>")
	b.api("OBJ_"+name, "STREAM.PURGE")
	for _, op := range b.c.Operators {
		files := b.fileReader(op.ID)
		b.publish("$O." + files + ".M.>")
		b.api("OBJ_"+files, "STREAM.PURGE")
	}
}

// erasures gives the process, when the contract has a deletion policy,
// the erasure registry — to watch, or with register to write — and its
// reports: an instance publishes those of the operators named (on their
// own subjects), the administrator reads them all.
func (b *builder) erasures(register bool, operators ...string) {
	if !b.c.Deletion.Declared() {
		return
	}
	name := erasure.Bucket(b.c.Pipeline)
	if register {
		b.bucket("KV_"+name, "$KV."+name)
		b.subscribe(erasure.ReportsSubject(b.c.Pipeline))
		return
	}
	b.ensure("KV_" + name)
	b.lookup("KV_" + name)
	for _, op := range operators {
		b.publish(erasure.OperatorReportsSubject(b.c.Pipeline, op))
	}
}

// auditing lets the process look up and append to the audit stream (the
// administrator list it), and the administrator make it — never change it: an update could lower its
// limits and discard history, which its denied deletes and purges
// otherwise keep (weir provision creates it and never updates it). It
// appends the actions named only (all of them when none is): an operator
// records the fallbacks and semantic migrations it makes on its own, and
// cannot file a restore, a rescale or an erasure in the administrator's
// name.
func (b *builder) auditing(actions ...string) {
	s := audit.StreamName(b.c.Pipeline)
	if b.provisions {
		b.api(s, "STREAM.CREATE")
		b.read(s) // weir audit lists it through a consumer
	} else {
		// An operator looks up a declared loss by direct get, and may
		// make no consumer of the trail: it could change the
		// administrator's listing of it (lookup).
		b.lookup(s)
	}
	if len(actions) == 0 {
		b.publish("weir." + b.c.Pipeline + ".audit.>")
	}
	for _, a := range actions {
		b.publish(audit.Subject(b.c.Pipeline, a, ""), audit.Subject(b.c.Pipeline, a, "")+".*")
	}
}

// service lets the process answer the service framework's pings, info
// and stats requests ($SRV), as the service named name, and ping itself:
// its container's health probe runs with its credentials.
//
// It answers by publishing to where those that ask hear answers — its
// own, its pipeline's administrator's and coordinator's answer prefixes
// (natsconn.AnswerPrefix), not their inboxes — never with the
// server's allow_responses: that lets a user publish once to the reply
// subject of any message delivered to it, and a process that may both
// ping itself and receive the ping could name any subject as the reply,
// and so publish anywhere.
func (b *builder) service(name string) {
	b.subscribe("$SRV.*", "$SRV.*."+name, "$SRV.*."+name+".*")
	b.publish("$SRV.PING."+name, "$SRV.PING."+name+".*")
	b.answers = true
}

// edgeStreams are the streams of the contract's edges.
func edgeStreams(b *builder) []string {
	var out []string
	for _, e := range b.c.Edges {
		out = append(out, b.edgeStream(e.Name))
	}
	return out
}

// edgeStream is the stream of the named edge.
func (b *builder) edgeStream(name string) string { return edge.StreamName(b.c.Pipeline, name) }

func (b *builder) grant(role string) Grant { return b.named(UserName(b.c.Pipeline, role), role) }

// UserName is the user of role (a service of the contract, or a Role
// constant) in pipeline.
func UserName(pipeline, role string) string { return pipeline + "-" + role }

// Inbox is the inbox prefix of user: the only one it may read replies on.
func Inbox(user string) string {
	return "_INBOX_" + strings.NewReplacer(".", "_", "*", "_", ">", "_", " ", "_").Replace(user)
}

// named is the grant of the user name in role.
func (b *builder) named(name, role string) Grant {
	inbox := Inbox(name)
	b.subscribe(inbox+".>", natsconn.AnswerPrefix(inbox)+".>")
	// The account's JetStream limits and usage, which a client asks for
	// before it makes a bucket.
	b.publish("$JS.API.INFO")
	if b.answers {
		// To where those that ask hear answers, never their inboxes
		// (natsconn.AnswerPrefix).
		b.publish(natsconn.AnswerPrefix(inbox) + ".>")
		if b.c != nil {
			for _, asker := range []string{RoleAdmin, RoleCoordinator} {
				b.publish(natsconn.AnswerPrefix(Inbox(UserName(b.c.Pipeline, asker))) + ".>")
			}
		}
	}
	g := Grant{Name: name, Role: role, Inbox: inbox}
	for s := range b.pub {
		g.Publish = append(g.Publish, s)
	}
	for s := range b.sub {
		g.Subscribe = append(g.Subscribe, s)
	}
	for s := range b.deny {
		g.DenyPublish = append(g.DenyPublish, s)
	}
	sort.Strings(g.Publish)
	sort.Strings(g.Subscribe)
	sort.Strings(g.DenyPublish)
	return g
}

// serviceGrant is what the process running service svc's operators needs.
func serviceGrant(c *contracts.Contract, svc string) Grant {
	b := newBuilder(c)
	p := c.Pipeline
	b.auditing(audit.ActionFallback, audit.ActionMigrate)
	var ops []string
	for _, op := range c.Operators {
		if op.Service == svc {
			ops = append(ops, op.ID)
		}
	}
	b.erasures(false, ops...)
	dlq := deadletter.StreamName(p)
	b.ensure(dlq)
	b.subscribe(checkpoint.TriggerSubject(p), checkpoint.CompleteSubject(p))
	for _, op := range c.Operators {
		if op.Service != svc {
			b.fileInfo(op.ID)
			continue
		}
		b.instanceCheckpoints(op.ID)
		b.publish(checkpoint.OperatorAcksSubject(p, op.ID))
		if op.Input == "ingress" {
			for _, s := range c.Ingress.StreamNames() {
				b.read(s)
			}
		} else {
			s := b.edgeStream(op.Input)
			b.ensure(s)
			b.read(s)
		}
		if op.Output != "" {
			e, _ := c.Edge(op.Output)
			s := b.edgeStream(op.Output)
			if e.JSON() && c.Sink.Effect == contracts.EffectVersionedUpsert {
				bucket := view.Bucket(p, op.Output)
				b.bucket("KV_"+bucket, "$KV."+bucket)
			} else {
				b.ensure(s)
				b.read(s) // a writer reads its own last frames back
				// Its partitions, and a transactional edge's commit markers.
				b.publish("weir." + p + "." + op.Output + ".>")
				if d, err := dispatcher.ForContract(c, ""); err == nil && d.Stream == s {
					// The outbox's reader is the dispatcher: its writer
					// must not pull, acknowledge, change or delete the
					// dispatcher's consumer (an intent taken from it is
					// an effect that never happens).
					b.protectConsumer(s, d.Consumer)
				}
			}
		}
		b.publish(deadletter.Subject(p, op.ID), deadletter.SideSubject(p, op.ID), deadletter.ShedSubject(p, op.ID))
		b.service(status.ServiceName(op.ID))
		b.subscribe("weir.svc." + p + "." + op.ID + ".*.status")
	}
	return b.grant(svc)
}

// coordinatorGrant is what a coordinator needs: the checkpoint protocol,
// the buckets, and a look at every stream and instance for the status.
func coordinatorGrant(c *contracts.Contract) Grant {
	b := newBuilder(c)
	p := c.Pipeline
	b.coordinatorCheckpoints()
	b.publish(checkpoint.TriggerSubject(p), checkpoint.CompleteSubject(p))
	b.subscribe(checkpoint.RequestSubject(p))
	for _, op := range c.Operators {
		b.subscribe(checkpoint.OperatorAcksSubject(p, op.ID))
	}
	// The status: where the ingress stands and how far its readers are.
	for _, s := range c.Ingress.StreamNames() {
		b.info(s)
		b.api(s, "CONSUMER.NAMES", "CONSUMER.LIST")
		b.publish("$JS.API.CONSUMER.INFO." + s + ".*")
	}
	// And how far each edge's readers are, and the dead letters: a look,
	// never a consumer of its own (lookup), which is a grant to change the
	// readers'.
	for _, s := range append([]string{deadletter.StreamName(p)}, edgeStreams(b)...) {
		b.lookup(s)
		b.api(s, "CONSUMER.NAMES", "CONSUMER.LIST")
		b.publish("$JS.API.CONSUMER.INFO." + s + ".*")
	}
	b.publish("$SRV.>", "weir.svc."+p+".>")
	b.service(status.CoordinatorService(c.Pipeline))
	return b.grant(RoleCoordinator)
}

// producerGrant is what a producer of the ingress needs, in the ingress
// stream's account: to look the stream up and publish to its partitions.
func producerGrant(c *contracts.Contract) Grant {
	b := newBuilder(c)
	for _, s := range c.Ingress.StreamNames() {
		b.info(s)
	}
	b.publish(c.Ingress.SubjectPrefix + ".*")
	var env []string
	if c.Overload.Policy == contracts.PolicyAdmission {
		// The gateway admits by the ingress readers' lag: it looks at
		// their consumers, on the pipeline's mirror, through what the
		// pipeline's account exports (Accounts).
		api := jsapi.Prefix(c.Pipeline)
		for _, s := range c.Ingress.StreamNames() {
			for _, call := range lagCalls(s) {
				b.publish(api + strings.TrimPrefix(call, "$JS.API"))
			}
		}
		env = append(env, "WEIR_LAG_API="+api)
	}
	// The Nexmark generator answers $SRV as its health, and its status
	// endpoint.
	b.service("weir-nexmark-gen")
	b.subscribe("weir.svc.nexmark-gen.*.status")
	g := b.grant(RoleProducer)
	g.Account, g.Env = ingress.Account(c.Ingress.Stream), env
	return g
}

// lagCalls are the JetStream API calls with which the ingest gateway
// measures the lag of stream's readers (package admission).
func lagCalls(stream string) []string {
	return []string{"$JS.API.STREAM.INFO." + stream, "$JS.API.CONSUMER.NAMES." + stream, "$JS.API.CONSUMER.LIST." + stream,
		"$JS.API.CONSUMER.INFO." + stream + ".*"}
}

// IngressAdmin is the grant of an ingress's administrator, in its
// account: to make its streams and the consumers feeding each pipeline's
// mirror of them (weir provision -ingress), and read them.
func IngressAdmin(in contracts.Ingress) Grant {
	b := newBuilder(nil)
	b.provisions = true
	for _, s := range in.StreamNames() {
		b.ensure(s)
		b.read(s)
	}
	g := b.named(UserName(ingress.Account(in.Stream), RoleAdmin), RoleIngressAdmin)
	// weir provision, run with this .env, makes the ingress (-ingress).
	g.Account, g.Env = ingress.Account(in.Stream), []string{"WEIR_PROVISION_INGRESS=true"}
	return g
}

// dispatcherGrant is what an outbox's dispatcher needs: to read the
// intents, record their outcomes, and file those that fail.
func dispatcherGrant(c *contracts.Contract) (Grant, error) {
	b := newBuilder(c)
	if _, err := b.outbox(); err != nil {
		return Grant{}, err
	}
	b.service("weir-dispatcher")
	return b.grant(RoleDispatcher), nil
}

// outbox lets the process read an outbox's intents, record their
// outcomes and file the failed ones, as its dispatcher does, and returns
// the outbox's names.
func (b *builder) outbox() (dispatcher.Config, error) {
	d, err := dispatcher.ForContract(b.c, "")
	if err != nil {
		return d, err
	}
	if b.provisions {
		b.read(d.Stream) // and makes the dispatcher's consumer
	} else {
		b.durable(d.Stream, d.Consumer)
	}
	b.bucket("KV_"+d.Outcomes, "$KV."+d.Outcomes)
	b.ensure(d.DeadLetters)
	b.read(d.DeadLetters)
	b.publish(d.DeadLetterSubject)
	return d, nil
}

// adminGrant is what the weir commands need to run the pipeline by hand:
// every stream of the pipeline, every subject under its name, the
// services' status and, with an outbox, its intents, outcomes and dead
// letters, handing an intent back (weir effects retry) and erasing a
// key's (weir erase).
func adminGrant(c *contracts.Contract) (Grant, error) {
	b := newBuilder(c)
	b.provisions = true
	p := c.Pipeline
	b.checkpoints()
	b.auditing()
	b.erasures(true)
	streams := append(c.Ingress.StreamNames(), deadletter.StreamName(p))
	for _, e := range c.Edges {
		streams = append(streams, b.edgeStream(e.Name))
		bucket := view.Bucket(p, e.Name)
		b.bucket("KV_"+bucket, "$KV."+bucket)
	}
	for _, s := range streams {
		b.ensure(s)
		b.read(s)
		b.api(s, "STREAM.PURGE", "STREAM.MSG.DELETE")
	}
	b.publish("weir."+p+".>", "weir.ctl."+p+".>", "weir.svc."+p+".>", "$SRV.>")
	b.subscribe("weir.ctl." + p + ".>")
	if c.Sink.Effect == contracts.EffectOutbox {
		d, err := b.outbox()
		if err != nil {
			return Grant{}, err
		}
		b.publish(d.RetrySubject)
		// weir erase deletes the key's dead letters, as it does its
		// settled intents from the outbox (an edge, above).
		b.api(d.DeadLetters, "STREAM.MSG.DELETE")
	}
	g := b.grant(RoleAdmin)
	// Its pipeline is an account of its own, its ingress a mirror: what
	// weir provision, run with this .env, must make (-accounts).
	g.Env = []string{"WEIR_PROVISION_ACCOUNTS=true"}
	return g, nil
}

// Monitor is the grant of a deployment's monitor, weir-monitor: the state
// of every stream and consumer — what a dashboard or a health check reads
// — and never a message. It has an account of its own, MonitorAccount,
// into which every other account exports those calls: the monitor asks
// account A's under jsapi.Prefix(A) (jetstream.NewWithAPIPrefix).
func Monitor() Grant {
	b := newBuilder(nil)
	for _, call := range monitorCalls {
		b.publish("$JS.*.API" + strings.TrimPrefix(call, "$JS.API"))
	}
	g := b.named("weir-monitor", RoleMonitor)
	g.Account = MonitorAccount
	return g
}

// monitorCalls are the JetStream API calls the monitor makes of each
// account. Not STREAM.INFO: its request may ask for the count of every
// subject the stream holds, and a bucket's keys — a view's, erased ones
// among them — are its subjects; a stream's state comes from the list
// (jsapi.Listed).
var monitorCalls = []string{"$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST",
	"$JS.API.CONSUMER.INFO.*.*", "$JS.API.CONSUMER.NAMES.*", "$JS.API.CONSUMER.LIST.*"}
