package stream

import (
	"bytes"
	"fmt"
	"time"

	"github.com/weirflow/weir/internal/erasure"
	"github.com/weirflow/weir/internal/keygroup"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
)

// env is the runtime's operator.Env: what an operator sees while it
// handles one record or timer. It is valid only during that call.
type env struct {
	s     *step
	rec   record.Record
	trace string // trace context of the record's process span
	kg    int
	key   []byte
	scope state.Scope
	// link is i+1 in the env of the i-th operator chained before the
	// operator (operators[].before): what it emits goes on along the
	// chain, and it sets no timers. 0 for the operator's own.
	link int
}

var _ operator.Env = (*env)(nil)

// Now is the processing-time clock, injected by the runtime.
func (c *env) Now() time.Time { return c.s.now }

// Record is the record being handled; zero during OnTimer.
func (c *env) Record() record.Record { return c.rec }

// Key is the key the state is scoped to: the record's ID or key, as the
// operator's keying in the contract says.
func (c *env) Key() []byte { return c.key }

// Watermark is the operator's input watermark: no record still to come has
// an event time at or before it. It is the zero time before the first
// watermark and in pipelines without event time.
func (c *env) Watermark() time.Time { return c.s.wm }

// SideOutput files a record on the pipeline's side output (late data),
// with its source coordinate and the reason.
func (c *env) SideOutput(r record.Record, reason string) error {
	c.s.deadLetter(r, "event_time", reason, true)
	return nil
}

// KeyGroup is the key group of the current state key.
func (c *env) KeyGroup() int { return c.kg }

// Value is the current key's value state of a family.
func (c *env) Value(family string) state.Value { return c.scope.Value(family) }

// Map is the current key's map state of a family.
func (c *env) Map(family string) state.Map { return c.scope.Map(family) }

// List is the current key's list state of a family.
func (c *env) List(family string) state.List { return c.scope.List(family) }

// Emit sends a data record to the operator's output edge, routed by its
// key. Fields left empty are inherited from the record being handled: ID,
// key, producer, time and source coordinate.
func (c *env) Emit(r record.Record) error {
	r = operator.Emitted(r, c.rec)
	if r.Trace == "" {
		r.Trace = c.trace
	}
	if err := c.tenanted(&r); err != nil {
		return err
	}
	if c.link > 0 {
		return c.s.chained(c.link, r)
	}
	return c.s.emit(r, c.erasable())
}

// erasable are the erasure names (erasure.Names) of the key handled, for
// an outbox's intents: its intents are keyed by their own idempotency
// keys, and an erasure of the key finds them, and the dispatcher's
// outcomes of them, by these. A split key is named by the key it was
// split from; under tenant-scoped keys the tenant is named too. State
// keyed by event ID names no key, and nothing.
func (c *env) erasable() []string {
	p := c.s.run.plan
	if !p.outbox || p.keyByID {
		return nil
	}
	key := c.key
	if p.split > 1 {
		key = keygroup.Unsplit(key)
	}
	tenant := ""
	if p.tenantScoped {
		tenant = c.tenant()
	}
	return erasure.Names(key, tenant)
}

// tenant is the tenant of what the operator handles: the record's or,
// during OnTimer, the tenant-scoped key's.
func (c *env) tenant() string {
	if c.rec.Tenant != "" {
		return c.rec.Tenant
	}
	if c.s.run.plan.tenantScoped {
		t, _ := keygroup.TenantOf(c.key)
		return t
	}
	return ""
}

// tenanted gives an emitted record the tenant of what the operator
// handles, and, where keys are tenant-scoped, a key of that tenant: an
// operator re-keying a record keeps it in its tenant. A record put under
// another tenant's key, or given another tenant, would mix tenants: the
// step fails, naming both.
func (c *env) tenanted(r *record.Record) error {
	tenant := c.tenant()
	if r.Tenant == "" {
		r.Tenant = tenant
	}
	if !c.s.run.plan.tenantScoped {
		return nil
	}
	if r.Tenant == "" || tenant != "" && r.Tenant != tenant {
		return fmt.Errorf("stream: operator %s emitted a record of tenant %q while handling tenant %q: keys are tenant-scoped (state.tenant_scoped), and an output never mixes tenants",
			c.s.run.rt.cfg.Operator, r.Tenant, tenant)
	}
	if bytes.HasPrefix(r.Key, []byte(r.Tenant+"\x1e")) {
		return nil // scoped already: the key of the record handled
	}
	if t, ok := keygroup.TenantOf(r.Key); ok {
		// Another tenant's key, or a key of its own holding the byte
		// that separates tenant and key: either way ambiguous.
		return operator.Poison("key", fmt.Errorf("operator %s emitted a record of tenant %q under key %q, which holds the byte 0x1e that separates a tenant (%q) from the key: keys are tenant-scoped (state.tenant_scoped), and an output never mixes tenants",
			c.s.run.rt.cfg.Operator, r.Tenant, r.Key, t))
	}
	r.Key = keygroup.Scoped(r.Tenant, r.Key)
	return nil
}

// timed refuses timers to an operator chained before another: it keeps
// no state, and a timer is state.
func (c *env) timed() error {
	if c.link == 0 {
		return nil
	}
	return fmt.Errorf("stream: operator %s, chained before %s (operators[].before), set a timer: a chained operator keeps no state, timers included",
		c.s.run.rt.beforeNames[c.link-1], c.s.run.rt.cfg.Operator)
}

// SetTimer sets a timer on the current key. Setting the same domain, time
// and name twice sets it once. An event-time timer at or behind the
// watermark fires at the end of the step.
func (c *env) SetTimer(d state.Domain, at time.Time, name string) error {
	if err := c.timed(); err != nil {
		return err
	}
	if d == state.EventTime && !c.s.wm.IsZero() && !at.After(c.s.wm) {
		c.s.pastTimers = true
	}
	return c.s.batch.SetTimer(state.Timer{Domain: d, Time: at, KeyGroup: c.kg, Key: c.key, Name: name})
}

// AddTimer sets a timer the operator knows is not set.
func (c *env) AddTimer(d state.Domain, at time.Time, name string) error {
	if err := c.timed(); err != nil {
		return err
	}
	if d == state.EventTime && !c.s.wm.IsZero() && !at.After(c.s.wm) {
		c.s.pastTimers = true
	}
	return c.s.batch.AddTimer(state.Timer{Domain: d, Time: at, KeyGroup: c.kg, Key: c.key, Name: name})
}

// DeleteTimer deletes a timer of the current key.
func (c *env) DeleteTimer(d state.Domain, at time.Time, name string) error {
	if err := c.timed(); err != nil {
		return err
	}
	return c.s.batch.DeleteTimer(state.Timer{Domain: d, Time: at, KeyGroup: c.kg, Key: c.key, Name: name})
}
