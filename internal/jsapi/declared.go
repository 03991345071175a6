package jsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrDiffers says that a stream or bucket exists with a configuration other
// than the one the contract declares; ErrMissing that it does not exist and
// the process could not create it. Both are weir provision's to mend, run
// with the pipeline administrator's credentials: a runtime process changes
// no configuration (Check).
var (
	ErrDiffers = errors.New("jsapi: not as the contract declares it")
	ErrMissing = errors.New("jsapi: missing")
)

// Kind is what a declaration makes: a stream, or a bucket over one.
type Kind int

// Kinds of declaration.
const (
	KindStream Kind = iota
	KindKeyValue
	KindObjectStore
)

// Declared is one stream or bucket as weir declares it from a contract:
// the configuration weir provision creates or brings it to, and the one a
// runtime process checks it against before it uses it. Each package that
// uses a stream builds its Declared in one place, for both.
type Declared struct {
	Kind Kind
	// Stream, KV or Obj is the configuration, by Kind.
	Stream jetstream.StreamConfig
	KV     jetstream.KeyValueConfig
	Obj    jetstream.ObjectStoreConfig
	// CreateOnly marks a stream provision creates and never updates: the
	// audit trail, whose limits protect its history.
	CreateOnly bool
	// AnyReplicas leaves the replicas as deployed: a tool's look at a
	// pipeline must not refuse, or change, a cluster's scale.
	AnyReplicas bool
	// DenyPurge, for a key-value bucket, sets its stream's deny_purge and
	// clears its allow_rollup_hdrs, which the bucket's configuration
	// cannot: a bucket allows rollups, and a message on any key a user
	// may write carrying Nats-Rollup: all would otherwise purge every
	// key. The server then refuses every rollup and purge
	// (KeyValue.Purge included), so it is for buckets that never purge a
	// key.
	DenyPurge bool
}

// StreamName is the JetStream stream that holds what d declares.
func (d Declared) StreamName() string {
	switch d.Kind {
	case KindKeyValue:
		return "KV_" + d.KV.Bucket
	case KindObjectStore:
		return "OBJ_" + d.Obj.Bucket
	}
	return d.Stream.Name
}

// String names what d declares, as an error or a report says it.
func (d Declared) String() string {
	switch d.Kind {
	case KindKeyValue:
		return "key-value bucket " + d.KV.Bucket
	case KindObjectStore:
		return "object bucket " + d.Obj.Bucket
	}
	return "stream " + d.Stream.Name
}

// Difference is one field in which a stream differs from its declaration,
// named as JetStream's configuration names it.
type Difference struct {
	Field, Have, Want string
}

func (f Difference) String() string {
	return fmt.Sprintf("%s is %s, the contract wants %s", f.Field, f.Have, f.Want)
}

// DiffersError says what differs in an existing stream.
type DiffersError struct {
	What        string
	Differences []Difference
}

func (e *DiffersError) Error() string {
	parts := make([]string, len(e.Differences))
	for i, d := range e.Differences {
		parts[i] = d.String()
	}
	return fmt.Sprintf("%s is not as the contract declares it: %s; a running process changes no configuration: run weir provision with the pipeline administrator's credentials to bring it to the contract",
		e.What, strings.Join(parts, "; "))
}

func (e *DiffersError) Unwrap() error { return ErrDiffers }

// Differences lists the fields of have — the configuration of d's stream
// as the server holds it — that differ from d, among those weir declares:
// the defaults the server fills in are not compared. A stream that
// sources, mirrors or republishes what the contract does not say differs.
func (d Declared) Differences(have jetstream.StreamConfig) []Difference {
	var out []Difference
	diff := func(field string, h, w any) {
		hs, ws := show(h), show(w)
		if hs != ws {
			out = append(out, Difference{Field: field, Have: hs, Want: ws})
		}
	}
	replicas := func(want int) {
		if !d.AnyReplicas {
			diff("num_replicas", have.Replicas, max(want, 1))
		}
	}
	var republish *jetstream.RePublish
	var sources []*jetstream.StreamSource
	var mirror *jetstream.StreamSource
	switch d.Kind {
	case KindKeyValue:
		diff("max_msgs_per_subject", have.MaxMsgsPerSubject, int64(max(d.KV.History, 1)))
		if d.DenyPurge {
			diff("deny_purge", have.DenyPurge, true)
			diff("allow_rollup_hdrs", have.AllowRollup, false)
		}
		diff("max_age", have.MaxAge, d.KV.TTL)
		diff("storage", have.Storage, d.KV.Storage)
		replicas(d.KV.Replicas)
		republish, sources, mirror = d.KV.RePublish, d.KV.Sources, d.KV.Mirror
	case KindObjectStore:
		diff("max_age", have.MaxAge, d.Obj.TTL)
		diff("storage", have.Storage, d.Obj.Storage)
		replicas(d.Obj.Replicas)
	default:
		w := d.Stream
		diff("subjects", sorted(have.Subjects), sorted(w.Subjects))
		diff("retention", have.Retention, w.Retention)
		diff("storage", have.Storage, w.Storage)
		diff("discard", have.Discard, w.Discard)
		diff("max_age", have.MaxAge, w.MaxAge)
		if w.Duplicates > 0 {
			diff("duplicate_window", have.Duplicates, w.Duplicates)
		}
		replicas(w.Replicas)
		diff("max_bytes", unlimited(have.MaxBytes), unlimited(w.MaxBytes))
		diff("max_msgs", unlimited(have.MaxMsgs), unlimited(w.MaxMsgs))
		diff("allow_atomic", have.AllowAtomicPublish, w.AllowAtomicPublish)
		diff("deny_delete", have.DenyDelete, w.DenyDelete)
		diff("deny_purge", have.DenyPurge, w.DenyPurge)
		republish, sources, mirror = w.RePublish, w.Sources, w.Mirror
		diff("subject_transform", have.SubjectTransform, w.SubjectTransform)
	}
	// What a stream copies in or sends on reaches past every user
	// permission: only the contract may say so.
	diff("republish", have.RePublish, republish)
	diff("sources", have.Sources, sources)
	diff("mirror", have.Mirror, mirror)
	return out
}

// unlimited is a limit with every "none" (0 or -1) as -1.
func unlimited(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// show renders a configuration value for a difference's message.
func show(v any) string {
	switch v := v.(type) {
	case time.Duration:
		if v == 0 {
			return "0 (none)"
		}
		return v.String()
	case []string:
		return "[" + strings.Join(v, " ") + "]"
	case int, int64, bool:
		return fmt.Sprint(v)
	case fmt.Stringer:
		return v.String()
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if s := string(b); s != "null" && s != "[]" {
		return s
	}
	return "none"
}

// Check makes sure what d declares is there as declared, the way a
// runtime process does before it uses it: it looks the stream up and
// refuses (*DiffersError) one that differs from d. It creates a missing
// one — a development run on a server without permissions has no
// administrator — and says, wrapping ErrMissing, that weir provision makes
// it when the server does not let it. It never updates a configuration.
// It retries while a cluster leaves the requests unanswered (Retry).
func Check(ctx context.Context, js jetstream.JetStream, d Declared) error {
	return Retry(ctx, "check "+d.String(), func(ctx context.Context) error {
		st, err := js.Stream(ctx, d.StreamName())
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			err = d.create(ctx, js)
			if err == nil {
				return nil
			}
			if !exists(err) {
				if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
					err = fmt.Errorf("%w (%w)", err, cause)
				}
				return fmt.Errorf("%w: %s does not exist and this process could not create it: %w; weir provision, run with the pipeline administrator's credentials, creates it from the contract",
					ErrMissing, d, err)
			}
			// Created meanwhile by another process: compare it.
			st, err = js.Stream(ctx, d.StreamName())
		}
		if err != nil {
			return fmt.Errorf("look up %s: %w", d, err)
		}
		if diffs := d.Differences(st.CachedInfo().Config); len(diffs) > 0 {
			return &DiffersError{What: d.String(), Differences: diffs}
		}
		return nil
	})
}

// exists reports whether a creation failed because the stream exists.
func exists(err error) bool {
	return errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) || errors.Is(err, jetstream.ErrBucketExists)
}

func (d Declared) create(ctx context.Context, js jetstream.JetStream) (err error) {
	switch d.Kind {
	case KindKeyValue:
		if d.DenyPurge {
			// In one request: a process checking the bucket between a
			// create and an update would refuse it.
			_, err = js.CreateStream(ctx, d.kvStream())
			return err
		}
		_, err = js.CreateKeyValue(ctx, d.KV)
	case KindObjectStore:
		_, err = js.CreateObjectStore(ctx, d.Obj)
	default:
		_, err = js.CreateStream(ctx, d.Stream)
	}
	return err
}

func (d Declared) update(ctx context.Context, js jetstream.JetStream) (err error) {
	switch d.Kind {
	case KindKeyValue:
		if d.DenyPurge {
			_, err = js.UpdateStream(ctx, d.kvStream())
			return err
		}
		_, err = js.UpdateKeyValue(ctx, d.KV)
	case KindObjectStore:
		_, err = js.UpdateObjectStore(ctx, d.Obj)
	default:
		_, err = js.UpdateStream(ctx, d.Stream)
	}
	return err
}

// kvStream is the stream of a key-value bucket declared DenyPurge: the
// one jetstream.CreateKeyValue makes of d.KV, without rollups and
// purges.
func (d Declared) kvStream() jetstream.StreamConfig {
	kv := d.KV
	return jetstream.StreamConfig{
		Name: d.StreamName(), Description: kv.Description, Subjects: []string{"$KV." + kv.Bucket + ".>"},
		MaxMsgsPerSubject: int64(max(kv.History, 1)), MaxBytes: -1, MaxMsgs: -1, MaxConsumers: -1, MaxMsgSize: -1,
		MaxAge: kv.TTL, Storage: kv.Storage, Replicas: max(kv.Replicas, 1), Placement: kv.Placement,
		DenyDelete: true, DenyPurge: true, AllowRollup: false, AllowDirect: true,
		Duplicates: 2 * time.Minute, Discard: jetstream.DiscardNew,
	}
}

// Outcome is what Provision did to one declaration.
type Outcome struct {
	What string
	// Action is Created, Updated, AsDeclared or Kept.
	Action      string
	Differences []Difference
}

// Actions of Provision.
const (
	Created    = "created"
	Updated    = "updated"
	AsDeclared = "as declared"
	// Kept: a create-only stream that differs, left as it is.
	Kept = "kept as it is (never updated)"
)

func (o Outcome) String() string {
	s := o.What + ": " + o.Action
	for i, d := range o.Differences {
		sep := ", "
		if i == 0 {
			sep = " — "
		}
		s += sep + fmt.Sprintf("%s %s → %s", d.Field, d.Have, d.Want)
	}
	return s
}

// Provision creates what d declares, or brings an existing one to it — an
// administrator's act (weir provision) — and says which it did. A
// create-only declaration that differs is left as it is. It retries while
// a cluster leaves the requests unanswered (Retry).
func Provision(ctx context.Context, js jetstream.JetStream, d Declared) (Outcome, error) {
	out := Outcome{What: d.String()}
	err := Retry(ctx, "provision "+d.String(), func(ctx context.Context) error {
		st, err := js.Stream(ctx, d.StreamName())
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			if err = d.create(ctx, js); err == nil {
				out.Action = Created
				return nil
			}
			if !exists(err) {
				return err
			}
			st, err = js.Stream(ctx, d.StreamName())
		}
		if err != nil {
			return err
		}
		out.Differences = d.Differences(st.CachedInfo().Config)
		switch {
		case len(out.Differences) == 0:
			out.Action = AsDeclared
		case d.CreateOnly:
			out.Action = Kept
		default:
			if err := d.update(ctx, js); err != nil {
				return err
			}
			out.Action = Updated
		}
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("jsapi: provision %s: %w", d, err)
	}
	return out, nil
}

// Differ is the difference in field between have and want, shown as
// Differences shows them, or nil when they are alike.
func Differ(field string, have, want any) *Difference {
	if h, w := show(have), show(want); h != w {
		return &Difference{Field: field, Have: h, Want: w}
	}
	return nil
}

// Prefix is the JetStream API prefix under which an account imports
// another's API: $JS.<account>.API, as a client names it with
// jetstream.NewWithAPIPrefix and a stream's external source does.
func Prefix(account string) string { return "$JS." + account + ".API" }

// Listed is stream name's information as the account's list of streams
// gives it (STREAM.LIST): its state without any subject's detail — what a
// monitor, which may not ask a stream for its subjects, reads.
func Listed(ctx context.Context, js jetstream.JetStream, name string) (*jetstream.StreamInfo, error) {
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		if info.Config.Name == name {
			return info, nil
		}
	}
	if err := l.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%w: %s", jetstream.ErrStreamNotFound, name)
}
