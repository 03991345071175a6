package ingress

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/jsapi"
)

// A deployment whose users weir auth writes puts each pipeline in a NATS
// account of its own, so that nothing one pipeline's processes do — no
// stream configuration's republish or source included — reaches another's
// streams. The ingress is shared: its stream lives in an account of its
// own (Account), where its producers write, and each pipeline reading it
// holds a mirror of it under the same name (Mirror), fed through a durable
// consumer the ingress account's administrator makes (MirrorConsumer) and
// no pipeline can change. The ingress account shares with pipeline P only
// what that one consumer needs: resetting it, answering its flow control,
// and its deliveries on MirrorSubject(P). Its readers never see the
// difference: they read the mirror in their own account by the stream's
// name.

// Account is the NATS account that holds ingress stream s: ingress-<s>,
// lower-cased, as the name of what a deployment makes for it (a
// Kubernetes Secret of its administrator's, a provisioning job) must be.
func Account(s string) string { return "ingress-" + strings.ToLower(s) }

// Agree refuses contracts that share an ingress (the same account,
// Account) but declare it differently: over another number of streams,
// partitions or subject prefix, they would make overlapping streams, and
// which contract's shape the ingress got would depend on their order.
func Agree(cs []*contracts.Contract) error {
	first := map[string]*contracts.Contract{}
	for _, c := range cs {
		a := Account(c.Ingress.Stream)
		f, ok := first[a]
		if !ok {
			first[a] = c
			continue
		}
		x, y := f.Ingress, c.Ingress
		if x.Stream != y.Stream || x.StreamCount() != y.StreamCount() || x.Partitions != y.Partitions || x.SubjectPrefix != y.SubjectPrefix {
			return fmt.Errorf("ingress: contracts %s and %s share ingress %s but declare it differently (stream %s over %d streams, %d partitions, subjects %s.*; stream %s over %d, %d, %s.*): declare it alike",
				f.File, c.File, a, x.Stream, x.StreamCount(), x.Partitions, x.SubjectPrefix, y.Stream, y.StreamCount(), y.Partitions, y.SubjectPrefix)
		}
	}
	return nil
}

// MirrorConsumer is the durable consumer, on the ingress stream, that
// feeds pipeline's mirror of it.
func MirrorConsumer(pipeline string) string { return "mirror-" + pipeline }

// MirrorSubject is where MirrorConsumer(pipeline) delivers, in the ingress
// account, and what the pipeline's account imports from it.
func MirrorSubject(pipeline string) string { return "weir.mirror." + pipeline }

// MirrorSubjectOf is MirrorSubject for the i-th stream of an ingress:
// MirrorSubject itself when the ingress is one stream, with _<i> after it
// when it is several. It stays three tokens, so that no edge subject
// (weir.<pipeline>.<edge>.<partition>), and so no service's grant, can
// match it — not even edge <p> of a pipeline named mirror — and no
// pipeline's name holds a '_'.
func MirrorSubjectOf(in contracts.Ingress, pipeline string, i int) string {
	if in.StreamCount() == 1 {
		return MirrorSubject(pipeline)
	}
	return MirrorSubject(pipeline) + "_" + strconv.Itoa(i)
}

// MirrorConsumerConfigOf is MirrorConsumerConfig for the i-th stream of
// an ingress (MirrorSubjectOf).
func MirrorConsumerConfigOf(in contracts.Ingress, pipeline string, i int) jetstream.ConsumerConfig {
	cfg := MirrorConsumerConfig(pipeline)
	cfg.DeliverSubject = MirrorSubjectOf(in, pipeline, i)
	return cfg
}

// MirrorResetSubject is the API request with which pipeline's mirror asks
// the ingress account to (re)start its consumer at a sequence: the one
// JetStream API call it makes there.
func MirrorResetSubject(stream, pipeline string) string {
	return "$JS.API.CONSUMER.RESET." + stream + "." + MirrorConsumer(pipeline)
}

// MirrorFlowControlSubject is what pipeline's mirror answers its consumer's
// flow control on (one token more per request).
func MirrorFlowControlSubject(stream, pipeline string) string {
	return "$JS.FC." + stream + "." + MirrorConsumer(pipeline) + ".*"
}

// mirrorPending bounds what the ingress account sends a mirror ahead of
// its flow control's answers.
const mirrorPending = 10000

// MirrorConsumerConfig is the durable consumer feeding pipeline's mirror,
// as the ingress account's administrator makes it (weir provision
// -ingress): pushed to MirrorSubject, acknowledged by flow control — what
// JetStream's durable sourcing requires.
func MirrorConsumerConfig(pipeline string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:        MirrorConsumer(pipeline),
		Description:    "feeds pipeline " + pipeline + "'s mirror of the ingress",
		DeliverSubject: MirrorSubject(pipeline),
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckFlowControlPolicy,
		FlowControl:    true,
		IdleHeartbeat:  time.Second, // the only heartbeat durable sourcing takes
		MaxAckPending:  mirrorPending,
	}
}

// MirrorConsumerDifferences lists the fields of a mirror's consumer as the
// server holds it that differ from its declaration.
func MirrorConsumerDifferences(have, want jetstream.ConsumerConfig) []jsapi.Difference {
	var out []jsapi.Difference
	diff := func(field string, h, w any) {
		if d := jsapi.Differ(field, h, w); d != nil {
			out = append(out, *d)
		}
	}
	diff("deliver_subject", have.DeliverSubject, want.DeliverSubject)
	diff("deliver_policy", have.DeliverPolicy, want.DeliverPolicy)
	diff("ack_policy", have.AckPolicy, want.AckPolicy)
	diff("flow_control", have.FlowControl, want.FlowControl)
	diff("filter_subject", have.FilterSubject, want.FilterSubject)
	diff("filter_subjects", have.FilterSubjects, want.FilterSubjects)
	return out
}

// Mirror is pipeline's ingress streams in a deployment with an account
// per pipeline: for each, a mirror, named as the contract names it, of the
// stream in the ingress account, with the contract's retention and limits.
// They take no subjects and remember no message IDs: producers write, and
// are deduplicated, in the ingress account.
func Mirror(in contracts.Ingress, pipeline string, replicas int) []jsapi.Declared {
	out := make([]jsapi.Declared, in.StreamCount())
	for i := range out {
		cfg := StreamConfig(in, i, replicas)
		cfg.Description = "mirror of the ingress " + cfg.Name + " in account " + Account(in.Stream) + ", made by weir provision -accounts"
		cfg.Subjects, cfg.Duplicates, cfg.AllowAtomicPublish = nil, 0, false
		cfg.Mirror = &jetstream.StreamSource{
			Name:     cfg.Name,
			External: &jetstream.ExternalStream{APIPrefix: jsapi.Prefix(Account(in.Stream))},
			Consumer: &jetstream.StreamConsumerSource{Name: MirrorConsumer(pipeline), DeliverSubject: MirrorSubjectOf(in, pipeline, i)},
		}
		out[i] = jsapi.Declared{Stream: cfg}
	}
	return out
}
