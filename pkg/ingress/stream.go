package ingress

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/jsapi"
)

// DuplicateWindow is the duplicate window of an ingress stream whose
// contract declares none.
const DuplicateWindow = 2 * time.Minute

// Duplicates is how long the ingress stream weir creates remembers
// Nats-Msg-Id values — a producer retrying a publish within it stores the
// event once: ingress.duplicate_window, or DuplicateWindow, never longer
// than the retention (JetStream refuses a window longer than the stream's
// age limit).
func Duplicates(in contracts.Ingress) time.Duration {
	d := in.DuplicateWindow.D()
	if d <= 0 {
		d = DuplicateWindow
	}
	if r := in.Retention.D(); r > 0 {
		d = min(d, r)
	}
	return d
}

// StreamConfig is the i-th ingress stream a contract describes
// (in.StreamOf): subjects <prefix>.* when the ingress is one stream, the
// subjects of its partitions (in.PartitionsIn(i)) when it is several; its
// retention (the replay horizon), file storage and the given replicas (0
// means 1).
func StreamConfig(in contracts.Ingress, i, replicas int) jetstream.StreamConfig {
	subjects := []string{in.SubjectPrefix + ".*"}
	if in.StreamCount() > 1 {
		subjects = nil
		for _, p := range in.PartitionsIn(i) {
			subjects = append(subjects, in.Subject(p))
		}
	}
	return jetstream.StreamConfig{
		Name:        in.StreamOf(i),
		Description: "ingress created by weir from the pipeline's contract",
		Subjects:    subjects,
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      in.Retention.D(),
		Duplicates:  Duplicates(in),
		Replicas:    max(replicas, 1),
		// Producers write in atomic batches (pkg/producer): one fsync per
		// batch, every event still its own message.
		AllowAtomicPublish: true,
		// Limits the contract declares, which its linter checked against
		// the retention at the declared arrival rate; 0 is none.
		MaxBytes: int64(in.MaxBytes),
		MaxMsgs:  int64(in.MaxMsgs),
	}
}

// Declared is the ingress streams as weir provision creates them, or
// brings them to, from the contract (StreamConfig).
func Declared(in contracts.Ingress, replicas int) []jsapi.Declared {
	out := make([]jsapi.Declared, in.StreamCount())
	for i := range out {
		out[i] = jsapi.Declared{Stream: StreamConfig(in, i, replicas)}
	}
	return out
}

// Create creates the ingress streams a contract describes, when a user
// asks weir to (the runtime's -create-ingress); an existing stream is left
// as it is. A process the server does not let create streams is told that
// weir provision makes them.
func Create(ctx context.Context, js jetstream.JetStream, in contracts.Ingress, replicas int) ([]jetstream.Stream, error) {
	out := make([]jetstream.Stream, in.StreamCount())
	for i := range out {
		name := in.StreamOf(i)
		err := jsapi.Retry(ctx, "create ingress "+name, func(ctx context.Context) (err error) {
			out[i], err = js.CreateStream(ctx, StreamConfig(in, i, replicas))
			if err == jetstream.ErrStreamNameAlreadyInUse {
				out[i], err = js.Stream(ctx, name)
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("ingress: create stream %s (weir provision, run with the pipeline administrator's credentials, creates it): %w", name, err)
		}
	}
	return out, nil
}

// Missing explains a missing ingress stream to whoever starts an operator
// that reads it: which stream, which subjects, and the two ways to get it.
func Missing(c *contracts.Contract, stream, operator string) error {
	in := c.Ingress
	i := slices.Index(in.StreamNames(), stream)
	subjects := in.SubjectPrefix + ".*"
	if in.StreamCount() > 1 {
		var ss []string
		for _, p := range in.PartitionsIn(i) {
			ss = append(ss, in.Subject(p))
		}
		subjects = strings.Join(ss, ",")
	}
	return fmt.Errorf("the ingress stream %s does not exist: operator %s reads %s from it (contract %s, section ingress). "+
		"Create it — nats stream add %s --subjects '%s' --storage file --max-age %s --allow-batch --defaults — "+
		"or start the service with -create-ingress (WEIR_CREATE_INGRESS=true) and weir creates it from the contract",
		stream, operator, subjectRange(in, i), c.File, stream, subjects, in.Retention.D())
}

// subjectRange names the subjects of the i-th ingress stream.
func subjectRange(in contracts.Ingress, i int) string {
	ps := in.PartitionsIn(max(i, 0))
	if len(ps) == 1 {
		return in.Subject(ps[0])
	}
	if in.StreamCount() > 1 {
		return fmt.Sprintf("partitions %v of %s.*", ps, in.SubjectPrefix)
	}
	return fmt.Sprintf("%s … %s", in.Subject(0), in.Subject(in.Partitions-1))
}

// ConfigOf is how the contract's identity and time sections say to decode
// its ingress.
func ConfigOf(c *contracts.Contract) Config {
	field := func(f contracts.Field) Field {
		return Field{From: f.From, Path: f.Field, Header: f.Header, Format: f.Format, Optional: f.Optional}
	}
	onFuture := c.Time.OnFuture
	if onFuture == "reject" {
		onFuture = FutureDeadLetter
	}
	return Config{
		Stream:       c.Ingress.Stream,
		ID:           field(c.Identity.ID),
		Key:          field(c.Identity.Key),
		Producer:     field(c.Identity.Producer),
		EventTime:    field(c.Identity.EventTime),
		Tenant:       field(c.Identity.Tenant),
		TenantScoped: c.State.TenantScoped,
		Domain:       c.Time.Domain,
		FutureSkew:   c.Time.FutureSkew.D(),
		OnFuture:     onFuture,
		MaxBytes:     c.Ingress.MaxMessageBytes,
		Schema:       schemaOf(c.Identity.Schema, field),
	}
}

func schemaOf(s contracts.Schema, field func(contracts.Field) Field) Schema {
	out := Schema{Version: field(s.Version), Current: s.Current, Unnamed: s.Unnamed}
	for _, o := range s.Older {
		out.Older = append(out.Older, OlderSchema{Version: o.Version, ID: field(o.ID), Key: field(o.Key),
			Producer: field(o.Producer), EventTime: field(o.EventTime), Dropped: o.Dropped})
	}
	return out
}
