// Package view materializes a window query's results into a NATS KV bucket
// — a versioned, idempotent view that readers query by key instead of
// reading a stream (sink.effect: versioned-upsert).
//
// Each pane a window emits carries its window's version, which grows with
// every revision (pkg/window). The view keeps, per key and window, the pane
// with the highest version: a pane is applied only when the stored pane's
// version is older, with a compare-and-set on the KV revision, so two
// writers or a retry cannot interleave an older pane over a newer one. A
// pane applied again — a replay after a crash, however long after, or a
// restore to an older checkpoint — is older or equal and is rejected and
// counted, never applied twice. A retraction is stored as the window's
// newest pane, a tombstone that keeps its version, so a replayed insert
// older than it stays out; readers skip it.
//
// # What sink.effect versioned-upsert guarantees
//
// versioned-upsert (pkg/view). The results of a window operator go to a
// NATS KV bucket, WEIR_<PIPELINE>_<EDGE> (history 1; a key is kept for the
// edge's retention after its last update, which lint S5 holds to at least
// ingress.retention, so no replay can reach a forgotten window), instead of
// a stream:
// per key and window (view key: the pane's key escaped to KV key characters,
// then the window's bounds in Unix milliseconds), the pane of the highest
// version. A step's panes are staged and applied after its commit as any
// output is (run.publish); a pane is stored only when the stored pane's
// version is older, by a compare-and-set on the KV revision (create when the
// key is new), so an older pane arriving after a newer one — a re-publish
// after a crash, a replay, however late — is rejected and counted
// (stale_versions in the instance's status) and a duplicate is never
// applied twice. A retraction is stored as the window's newest pane, a
// tombstone keeping its version. Lint allows it for emission.mode and
// sink.accepts both upsert or both retract (S1), from an operator that
// keeps window state (S4), kept as long as a replay reaches (S5). weir view get|list|watch reads it. Scope: the
// view equals, per key and window, the newest revision the pipeline computed,
// whatever crashes and replays happened; a restore to an older checkpoint
// cannot move it back. A reader sees each window's revisions as they are
// applied, at least its newest.
package view

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/jsapi"
	"github.com/weirflow/weir/pkg/window"
)

// Bucket is the KV bucket of a pipeline's view of a result edge:
// WEIR_<PIPELINE>_<EDGE>, the name the edge's stream would have.
func Bucket(pipeline, edgeName string) string { return edge.StreamName(pipeline, edgeName) }

// Key is the view key of a pane: its key, escaped to the characters a KV
// key may hold ('=' and two hex digits for any other byte, '=' itself
// included), then its window's bounds in Unix milliseconds.
func Key(p window.Pane) string {
	return keyToken([]byte(p.Key)) + "." + strconv.FormatInt(p.Window.Start.UnixMilli(), 10) + "_" + strconv.FormatInt(p.Window.End.UnixMilli(), 10)
}

// keyToken is a key escaped for a view key: one token, no dot.
func keyToken(key []byte) string {
	var b strings.Builder
	for _, c := range key {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "=%02X", c)
	}
	if len(key) == 0 {
		b.WriteString("=")
	}
	return b.String()
}

// A View is the KV bucket of one result edge.
type View struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
}

// Declared is the view's bucket as weir declares it: History 1 — a key's
// newest pane is all the view keeps — for retention after its last update
// (the edge's retention in the contract, which lint holds to the replay
// horizon; 0 keeps it for ever).
func Declared(pipeline, edge string, retention time.Duration, replicas int) jsapi.Declared {
	return jsapi.Declared{Kind: jsapi.KindKeyValue, KV: jetstream.KeyValueConfig{
		Bucket:      Bucket(pipeline, edge),
		Description: fmt.Sprintf("weir view of %s of pipeline %s: each key and window's newest pane", edge, pipeline),
		History:     1,
		TTL:         retention,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}}
}

// Ensure opens the view's bucket after checking that it is as declared
// (jsapi.Check): one that differs is refused, never updated; a missing
// one is created when the server allows.
func Ensure(ctx context.Context, js jetstream.JetStream, pipeline, edge string, retention time.Duration, replicas int) (*View, error) {
	if err := jsapi.Check(ctx, js, Declared(pipeline, edge, retention, replicas)); err != nil {
		return nil, fmt.Errorf("view: %w", err)
	}
	var v *View
	err := jsapi.Settled(ctx, "open "+Bucket(pipeline, edge), func(ctx context.Context) (err error) {
		v, err = Open(ctx, js, pipeline, edge)
		return err
	})
	return v, err
}

// Open opens an existing view.
func Open(ctx context.Context, js jetstream.JetStream, pipeline, edge string) (*View, error) {
	kv, err := js.KeyValue(ctx, Bucket(pipeline, edge))
	if err != nil {
		return nil, fmt.Errorf("view: open %s: %w", Bucket(pipeline, edge), err)
	}
	return &View{js: js, kv: kv}, nil
}

// Apply stores the encoded pane raw unless the view holds a pane of the
// same key and window at the same or a newer version; it reports whether
// it stored it.
func (v *View) Apply(ctx context.Context, raw []byte) (applied bool, err error) {
	p, err := window.DecodePane(raw)
	if err != nil {
		return false, fmt.Errorf("view: a versioned view stores window panes: %w", err)
	}
	key := Key(p)
	for attempt := 0; attempt < 100; attempt++ {
		e, err := v.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			_, err = v.kv.Create(ctx, key, raw)
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue // another writer came first: compare with its pane
			}
			if err != nil {
				return false, fmt.Errorf("view: create %s: %w", key, err)
			}
			return true, nil
		case err != nil:
			return false, fmt.Errorf("view: read %s: %w", key, err)
		}
		stored, err := window.DecodePane(e.Value())
		if err != nil {
			return false, fmt.Errorf("view: stored %s revision %d: %w", key, e.Revision(), err)
		}
		if stored.Version >= p.Version {
			return false, nil
		}
		_, err = v.kv.Update(ctx, key, raw, e.Revision())
		var api *jetstream.APIError
		if errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			continue // changed since read: compare again
		}
		if err != nil {
			return false, fmt.Errorf("view: update %s: %w", key, err)
		}
		return true, nil
	}
	return false, fmt.Errorf("view: %s changed under every one of 100 attempts to apply version %d", key, p.Version)
}

// Entry is a key's newest pane in the view.
type Entry struct {
	Key      string `json:"key"`
	Revision uint64 `json:"revision"`
	// Erased is set, by Watch, on a view key whose pane was erased
	// (weir erase): Pane is then zero, and a copy of the view drops the
	// key's pane.
	Erased bool        `json:"erased,omitempty"`
	Pane   window.Pane `json:"pane"`
}

// MarshalJSON writes an erased entry without the zero pane.
func (e Entry) MarshalJSON() ([]byte, error) {
	type plain Entry
	if e.Erased {
		return json.Marshal(struct {
			Key      string `json:"key"`
			Revision uint64 `json:"revision"`
			Erased   bool   `json:"erased"`
		}{e.Key, e.Revision, true})
	}
	return json.Marshal(plain(e))
}

// Retracted reports whether the window's newest pane takes its value back.
func (e Entry) Retracted() bool { return e.Pane.Kind == window.Retract }

func entry(e jetstream.KeyValueEntry) (Entry, error) {
	p, err := window.DecodePane(e.Value())
	if err != nil {
		return Entry{}, fmt.Errorf("view: %s revision %d: %w", e.Key(), e.Revision(), err)
	}
	return Entry{Key: e.Key(), Revision: e.Revision(), Pane: p}, nil
}

// Get returns key's newest pane, retracted or not.
func (v *View) Get(ctx context.Context, key string) (Entry, error) {
	e, err := v.kv.Get(ctx, key)
	if err != nil {
		return Entry{}, fmt.Errorf("view: get %s: %w", key, err)
	}
	return entry(e)
}

// List returns every key's newest pane, retractions left out, in key order.
func (v *View) List(ctx context.Context) ([]Entry, error) {
	keys, err := jsapi.ListKeys(ctx, v.js, v.kv.Bucket(), ">")
	if err != nil {
		return nil, fmt.Errorf("view: list: %w", err)
	}
	var out []Entry
	for _, k := range keys {
		e, err := v.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if !e.Retracted() {
			out = append(out, e)
		}
	}
	return out, nil
}

// Watch calls fn with every pane the view holds and then with each one
// applied, retractions included, until ctx ends or fn returns an error.
// A view key erased (weir erase purges its windows) comes as an entry
// marked Erased, at first for those already erased and then as each is:
// whoever keeps a copy of the view learns to drop it.
func (v *View) Watch(ctx context.Context, fn func(Entry) error) error {
	w, err := jsapi.WatchKV(ctx, v.js, v.kv.Bucket(), ">", jsapi.WatchOptions{})
	if err != nil {
		return fmt.Errorf("view: watch: %w", err)
	}
	defer func() { _ = w.Stop() }() // stopping only unsubscribes: what Watch returns is decided
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return nil
			}
			if e == nil {
				continue // the end of the initial values
			}
			en := Entry{Key: e.Key(), Revision: e.Revision(), Erased: true}
			if e.Operation() == jetstream.KeyValuePut {
				var err error
				if en, err = entry(e); err != nil {
					return err
				}
			}
			if err := fn(en); err != nil {
				return err
			}
		}
	}
}

// EraseTenant purges every pane of every key of tenant, under
// tenant-scoped keys (keygroup.Scoped), and returns how many it purged.
func (v *View) EraseTenant(ctx context.Context, tenant string) (int, error) {
	all, err := jsapi.ListKeys(ctx, v.js, v.kv.Bucket(), ">")
	if err != nil {
		return 0, fmt.Errorf("view: erase a tenant: %w", err)
	}
	prefix := keyToken([]byte(tenant + "\x1e"))
	var keys []string
	for _, k := range all {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	return len(keys), v.purge(ctx, keys)
}

// Erase purges every window's pane of key from the view, so that the
// bucket keeps no value of it (a purge leaves a marker without the
// value), and returns how many it purged. The writer of the view calls
// it between steps: no pane of the key is in flight then.
func (v *View) Erase(ctx context.Context, key []byte) (int, error) {
	keys, err := jsapi.ListKeys(ctx, v.js, v.kv.Bucket(), keyToken(key)+".*")
	if err != nil {
		return 0, fmt.Errorf("view: erase: %w", err)
	}
	return len(keys), v.purge(ctx, keys)
}

func (v *View) purge(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if err := v.kv.Purge(ctx, k); err != nil {
			// The key is not named: errors reach logs.
			return fmt.Errorf("view: erase an erased key's windows: %w", err)
		}
	}
	return nil
}
