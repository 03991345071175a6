// Package erasure records legal erasures of keys (the contract's deletion
// section) and carries what the instances report having erased.
//
// `weir erase` puts a Request in the pipeline's registry, a KV bucket
// whose entries expire after deletion.within — by then every place weir
// keeps a key's records has aged them out (lint D2, D3), and the registry,
// which must name the key to find it, is the last to forget it. Every
// instance keeping keyed state or a view watches the registry: it erases
// the key from its state (every family, every timer, every salt of a
// split key) and its view in a step of its own, and publishes a Report.
// At every start an instance erases again every key the registry holds,
// so that a restore from a checkpoint taken before the erasure brings
// nothing back. Under deletion.replay erasure-wins it also drops the
// records of an erased key that were written before the erasure — Marks
// says where each stream stood — when a restore or replay reads them.
//
// A request erases a key, or every key of a tenant; under tenant-scoped
// keys (state.tenant_scoped) a tenant's key is the key qualified by its
// tenant, as state, views and records hold it, and a key alone, which
// names none of them, is refused (Target).
//
// An outbox's intents are keyed by their idempotency keys, not by the key
// whose state caused them: each carries that key's erasure names (Names,
// the header edge.HeaderErasable), and so do the dispatcher's dead letters
// and outcomes of it, which dispatcher.Erase finds by them. An instance
// reports the intents of the key it still holds for a checkpoint
// (Report.Held): they are performed, and erased only once settled.
//
// # How an erasure runs
//
// Erasure (deletion in the contract, weir erase): stream.startErasures
// opens the registry (internal/erasure) before the reader and applies every
// request the state does not record as applied (meta erased/<digest>),
// then watches it; the loop applies each new request (run.erase): one
// step in which state.Batch.EraseKey clears the key in every family and
// deletes its timers, for each of keygroup.Forms the instance owns;
// state.Store.Purge compacts those key groups so that no table file — and
// no later snapshot — holds the values; the flight in progress lands and
// view.Erase purges the key's windows; a last commit records the erasure
// applied, and an erasure.Report goes out. A tenant's erasure
// (Request.Tenant) erases every key state.Store.KeysOf finds scoped by
// the tenant in the instance's key groups, and view.EraseTenant every
// view entry of it. view.Watch passes each purge on as an entry marked
// Erased, so that a copy kept from a watch drops the key too.
// Under erasure-wins step.data drops a record of an erased key written
// before the request (erasure.Request.Before: the record's ingress
// coordinate, or the delivery's stream and sequence), or written in a frame
// whose writer had not applied it yet: output.stampErased has the writer
// stamp each message with the last erasure the run applied
// (edge.Writer.SetErased, header Weir-Erased, staged with the frame),
// so that what a timer emitted from a key's old state after the marks
// stays out. A replay or shadow
// generation reads its origin's registry (plan.origin). With an outbox,
// each intent carries Weir-Erasable (the erasure names of the key whose
// state caused it), run.heldIntents counts the key's intents held for a
// checkpoint (erasure.Report.Held), and weir erase then runs
// dispatcher.Erase: outcomes stripped over the revision read, then
// settled intents and dead letters deleted, pending ones listed.
package erasure

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/internal/strictjson"
	"github.com/weirflow/weir/pkg/record"
)

// Bucket is the KV bucket of a pipeline's erasures: WEIR_<P>_ERASURES.
func Bucket(pipeline string) string {
	return "WEIR_" + strings.ToUpper(strings.ReplaceAll(pipeline, "-", "_")) + "_ERASURES"
}

// ReportSubject is where the instance of operator reports what it erased:
// weir.ctl.<pipeline>.erase.done.<operator>.<instance>. The subject names
// the instance, so that the server's permissions let a service report
// only for its own operators, and weir erase counts a report only when it
// says what its subject does (Report.From).
func ReportSubject(pipeline, operator, instance string) string {
	return reports(pipeline) + "." + operator + "." + instance
}

// OperatorReportsSubject is where every instance of operator reports: what
// the operator's service may publish to.
func OperatorReportsSubject(pipeline, operator string) string {
	return reports(pipeline) + "." + operator + ".*"
}

// ReportsSubject is where every instance of the pipeline reports: what
// weir erase subscribes to.
func ReportsSubject(pipeline string) string { return reports(pipeline) + ".>" }

func reports(pipeline string) string { return "weir.ctl." + pipeline + ".erase.done" }

// Digest names a key without revealing it: the hex SHA-256 of its bytes.
// Registry entries are filed under it, and the audit trail, which keeps
// everything for ever, records only it.
func Digest(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:])
}

// Request is one erasure: of a key, or — under tenant-scoped keys — of
// every key of a tenant.
type Request struct {
	Key    []byte    `json:"key,omitempty"`
	Tenant string    `json:"tenant,omitempty"`
	At     time.Time `json:"at"`
	// Actor and Identity are who asked (audit.Actor, natsconn.Identity).
	Actor    string `json:"actor"`
	Identity string `json:"identity,omitempty"`
	// Marks is, per stream the pipeline reads (its ingress and edges),
	// the stream's last sequence when the erasure was asked: the key's
	// records at or below it were written before the erasure.
	Marks map[string]uint64 `json:"marks"`
	// Rev is the registry revision of the request, set when read.
	Rev uint64 `json:"-"`
}

// Name is what the registry files the request under: the digest of its
// key, or of its tenant.
func (r Request) Name() string {
	if r.Tenant != "" {
		return "tenant." + Digest([]byte(r.Tenant))
	}
	return "key." + Digest(r.Key)
}

// Before reports whether a record of the erased key read from stream at
// seq was written before the erasure: by its source coordinate when it
// has one the request marks, else by where it was read.
func (r Request) Before(at record.Coordinate, stream string, seq uint64) bool {
	if m, ok := r.Marks[at.Stream]; ok && at.Seq > 0 {
		return at.Seq <= m
	}
	m, ok := r.Marks[stream]
	return ok && seq <= m
}

// Names are the registry names (Request.Name) of the erasures that reach
// what the state of key caused — an outbox's intent, the dispatcher's
// outcome of it: the key's and, when tenant is given (under tenant-scoped
// keys, where key is the qualified key), the tenant's. A record carrying
// them (edge.HeaderErasable) is found by an erasure of either without
// naming the key: they are digests.
func Names(key []byte, tenant string) []string {
	names := []string{Request{Key: key}.Name()}
	if tenant != "" {
		names = append(names, Request{Tenant: tenant}.Name())
	}
	return names
}

// Reaches reports whether the request erases what carries names (Names).
func (r Request) Reaches(names []string) bool { return slices.Contains(names, r.Name()) }

// Registry is a pipeline's erasure registry.
type Registry struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
}

// Declared is the registry as weir declares it, with entries kept for
// within.
func Declared(pipeline string, within time.Duration, replicas int) jsapi.Declared {
	return jsapi.Declared{Kind: jsapi.KindKeyValue, KV: jetstream.KeyValueConfig{
		Bucket:      Bucket(pipeline),
		Description: "weir erasures of pipeline " + pipeline + ": each erased key, until every copy of it has aged out",
		History:     1,
		TTL:         within,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}}
}

// Ensure opens the registry after checking that it is as declared
// (jsapi.Check): one that differs is refused, never updated; a missing one
// is created when the server allows.
func Ensure(ctx context.Context, js jetstream.JetStream, pipeline string, within time.Duration, replicas int) (*Registry, error) {
	if err := jsapi.Check(ctx, js, Declared(pipeline, within, replicas)); err != nil {
		return nil, fmt.Errorf("erasure: %w", err)
	}
	var kv jetstream.KeyValue
	err := jsapi.Settled(ctx, "open "+Bucket(pipeline), func(ctx context.Context) (err error) {
		kv, err = js.KeyValue(ctx, Bucket(pipeline))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("erasure: %w", err)
	}
	return &Registry{js: js, kv: kv}, nil
}

// Open opens the registry as it is deployed — its replicas left alone —
// and creates it, with one replica and entries kept for within, only when
// it is missing: the way a command uses it.
func Open(ctx context.Context, js jetstream.JetStream, pipeline string, within time.Duration) (*Registry, error) {
	kv, err := js.KeyValue(ctx, Bucket(pipeline))
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return Ensure(ctx, js, pipeline, within, 1)
	}
	if err != nil {
		return nil, fmt.Errorf("erasure: %w", err)
	}
	return &Registry{js: js, kv: kv}, nil
}

// Put records a request and returns its revision.
func (r *Registry) Put(ctx context.Context, req Request) (uint64, error) {
	raw, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	if (req.Tenant == "") == (len(req.Key) == 0) {
		return 0, errors.New("erasure: a request names a key or a tenant, and not both")
	}
	rev, err := r.kv.Put(ctx, req.Name(), raw)
	if err != nil {
		return 0, fmt.Errorf("erasure: record the request: %w", err)
	}
	return rev, nil
}

// Watch calls fn with every request the registry holds, then with each
// new one as it is put, until ctx ends or fn fails. current is called
// once, after the requests held at the start: a runtime erases those
// before it reads input.
func (r *Registry) Watch(ctx context.Context, fn func(Request) error, current func() error) error {
	w, err := jsapi.WatchKV(ctx, r.js, r.kv.Bucket(), ">", jsapi.WatchOptions{IgnoreDeletes: true})
	if err != nil {
		return fmt.Errorf("erasure: watch: %w", err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("erasure: the registry's watch ended")
			}
			if e == nil {
				if err := current(); err != nil {
					return err
				}
				continue
			}
			var req Request
			if err := json.Unmarshal(e.Value(), &req); err != nil {
				return fmt.Errorf("erasure: entry %s: %w", e.Key(), err)
			}
			req.Rev = e.Revision()
			if err := fn(req); err != nil {
				return err
			}
		}
	}
}

// Report is what one instance erased for one request.
type Report struct {
	Operator string `json:"operator"`
	Instance string `json:"instance"`
	Rev      uint64 `json:"rev"`
	// GroupLo and GroupHi are the key groups the instance owned.
	GroupLo int `json:"group_lo"`
	GroupHi int `json:"group_hi"`
	// Families are the state families that held the key, Timers its
	// timers deleted, ViewKeys the view's entries of it purged.
	Families []string `json:"families,omitempty"`
	// Keys is how many keys it erased: one, or a tenant's.
	Keys     int `json:"keys"`
	Timers   int `json:"timers"`
	ViewKeys int `json:"view_keys"`
	// Held counts the outbox intents of the key the instance holds for a
	// checkpoint not complete when it erased: they are stored in the
	// outbox once it completes, and performed — an erasure cancels no
	// effect — so weir erase lists them instead of erasing them.
	Held int    `json:"held,omitempty"`
	Err  string `json:"error,omitempty"`
}

// EncodeReport encodes a report as an instance publishes it on
// ReportSubject, and as ParseReport reads it.
func EncodeReport(r Report) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("erasure: encode report of %s/%s: %w", r.Operator, r.Instance, err)
	}
	return b, nil
}

// ParseReport decodes a report that arrived on subject, refusing one that
// speaks for another instance than the subject names: the server lets a
// service publish only on its own operators' subjects, and the body must
// agree.
func ParseReport(pipeline, subject string, data []byte) (Report, error) {
	var r Report
	if err := strictjson.Decode(data, &r); err != nil {
		return Report{}, fmt.Errorf("erasure: report on %s: %w", subject, err)
	}
	if want := ReportSubject(pipeline, r.Operator, r.Instance); subject != want || r.Operator == "" || r.Instance == "" ||
		strings.ContainsAny(r.Operator+r.Instance, ".*> ") {
		return Report{}, fmt.Errorf("erasure: a report on %s in the name of %s/%s", subject, r.Operator, r.Instance)
	}
	return r, nil
}
