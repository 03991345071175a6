package stream

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/restore"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/state"
)

// meaning is what the operator's state means under plan p, for schema
// version schema (0: unknown), reading partitions input partitions in all.
func (p plan) meaning(schema, partitions int) checkpoint.Meaning {
	c := p.contract
	m := checkpoint.Meaning{SchemaVersion: schema, KeyGroups: p.keyGroups, Partitions: partitions, Input: p.inputName}
	if len(p.before) > 0 {
		m.Input += " through " + strings.Join(p.before, ", ")
	}
	id, key, eventTime := anchorIdentity(c)
	if len(p.families) > 0 {
		// Only kept state is keyed: a stateless operator has none to
		// redistribute.
		m.Key = "key " + key
		if p.keyByID {
			m.Key = "id " + id
		}
		if p.split > 0 {
			m.Key += fmt.Sprintf(", split %d", p.split)
		}
		if p.tenantScoped {
			m.Key += ", tenant-scoped"
		}
	}
	for _, f := range c.State.Families {
		for _, sf := range p.families {
			if sf.Name == f.Name {
				m.Families = append(m.Families, checkpoint.FamilyMeaning{Name: f.Name, Kind: f.Kind, TTL: f.TTL.D(), Bound: f.Bound, MaxKeys: int64(f.MaxKeys)})
			}
		}
	}
	if sc := c.Identity.Schema; p.decoder != nil && sc.Declared() {
		// Each schema with the fields its records are read by: a
		// restore compares the schemas both sides know.
		i := c.Identity
		m.Schemas = append(m.Schemas, schemaMeaning(sc.Current, i.ID, i.Key, i.EventTime, false))
		for _, o := range sc.Older {
			m.Schemas = append(m.Schemas, schemaMeaning(o.Version, o.ID, o.Key, o.EventTime, o.Dropped))
		}
	}
	if p.windowed {
		// Only windows are held by the watermark: it decides what is late
		// and when they close.
		m.Time = c.Time.Domain + ", event time " + eventTime
		if c.Time.Domain == contracts.DomainEvent {
			m.Time += fmt.Sprintf(", trust %s, future_skew %s %s, watermark %s, out_of_orderness %s",
				c.Time.Trust, c.Time.FutureSkew, c.Time.OnFuture, c.Progress.Watermark, c.Progress.OutOfOrderness)
		}
		e := c.Emission
		var t []string
		if e.Triggers.Early.Every.D() > 0 || e.Triggers.Early.Count > 0 {
			t = append(t, fmt.Sprintf("early every %s/%d", e.Triggers.Early.Every, e.Triggers.Early.Count))
		}
		if e.Triggers.OnTime {
			t = append(t, "on-time")
		}
		if e.Triggers.Late.Each || e.Triggers.Late.Every.D() > 0 {
			t = append(t, fmt.Sprintf("late each %t every %s", e.Triggers.Late.Each, e.Triggers.Late.Every))
		}
		m.Emission = fmt.Sprintf("mode %s, accumulation %s, triggers [%s], allowed_lateness %s", e.Mode, e.Accumulation, strings.Join(t, ", "), e.AllowedLateness)
		if e.Window.Kind != "" {
			m.Window = e.Window.String()
		}
	}
	return m
}

// MeaningOf is the meaning of operator's state under contract c, for a
// build whose operator is op (nil: its schema version unknown) — what
// `weir migrate check` holds a savepoint against.
func MeaningOf(c *contracts.Contract, operatorID string, op operator.Operator) (checkpoint.Meaning, error) {
	p, err := makePlan(c, operatorID)
	if err != nil {
		return checkpoint.Meaning{}, err
	}
	schema := 0
	if op != nil {
		schema = 1
		if v, ok := op.(operator.Versioned); ok {
			schema = v.SchemaVersion()
		}
	}
	return p.meaning(schema, len(p.inputs)), nil
}

// meaning is what this instance's state means.
func (rn *run) meaning() checkpoint.Meaning { return rn.restorer().meaning() }

// meaning is what the instance's state means.
func (rs *restorer) meaning() checkpoint.Meaning {
	return rs.plan.meaning(rs.schema, len(rs.base.inputs))
}

// CheckRestore validates snapshot m against a build on a copy, before
// anything changes: it downloads the snapshot into a temporary directory
// (checking every file's digest), opens it as the build's state under
// contract c would, and returns how what the state means differs
// (checkpoint.Meaning.Changes). op is the build's operator, nil when its
// state schema version is unknown.
func CheckRestore(ctx context.Context, st *checkpoint.Store, m checkpoint.Manifest, c *contracts.Contract, op operator.Operator) ([]checkpoint.Change, error) {
	p, err := makePlan(c, m.Operator)
	if err != nil {
		return nil, err
	}
	want, err := MeaningOf(c, m.Operator, op)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "weir-check-"+m.Operator+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "state")
	if err := st.Download(ctx, m, dir); err != nil {
		return nil, err
	}
	s, err := state.Open(dir, state.Options{Families: p.families, KeyGroups: p.keyGroups})
	if err != nil {
		return nil, fmt.Errorf("stream: the snapshot of %s/%s does not open as this build's state: %w", m.Operator, m.Instance, err)
	}
	if err := s.Close(); err != nil {
		return nil, err
	}
	if m.Meaning == nil {
		return nil, nil
	}
	return m.Meaning.Changes(want), nil
}

// fieldSpec names where an identity field comes from.
// anchorIdentity is how the records that name no schema are read — by the
// identity's own fields, or, where the contract declares versioned
// decoders, by those of identity.schema.unnamed ("by schema" without it):
// what stays the same when schemas are added and the current one moves
// under older, which the schemas' own meanings follow.
func anchorIdentity(c *contracts.Contract) (id, key, eventTime string) {
	i := c.Identity
	f := [3]contracts.Field{i.ID, i.Key, i.EventTime}
	if sc := i.Schema; sc.Declared() {
		if sc.Unnamed == "" {
			return "by schema", "by schema", "by schema"
		}
		for _, o := range sc.Older {
			if o.Version == sc.Unnamed {
				f = [3]contracts.Field{o.ID, o.Key, o.EventTime}
			}
		}
	}
	return fieldSpec(f[0]), fieldSpec(f[1]), fieldSpec(f[2]) + " " + f[2].Format
}

// schemaMeaning is one schema version with its identity fields:
// "<version>: id …, key …, event_time …", and " (dropped)".
func schemaMeaning(version string, id, key, eventTime contracts.Field, dropped bool) string {
	m := fmt.Sprintf("%s: id %s, key %s, event_time %s %s", version, fieldSpec(id), fieldSpec(key), fieldSpec(eventTime), eventTime.Format)
	if dropped {
		m += " (dropped)"
	}
	return m
}

func fieldSpec(f contracts.Field) string {
	if f.From == "header" {
		return "header " + f.Header
	}
	return f.From + " " + f.Field
}

// checkLocalMeaning judges local state the instance starts on — an
// upgrade in place — by the meaning it was last written with, unless a
// restore just judged it, and records this build's. A record that cannot
// be read refuses the start (restore.LocalMeaning).
func (rs *restorer) checkLocalMeaning(ctx context.Context, restored bool) error {
	was, v, ok, err := restore.LocalMeaning(rs.store)
	if err != nil {
		return err
	}
	if ok && !restored {
		what := "the local state in " + stateDir(rs.cfg.DataDir)
		migration, notes, err := restore.Judge(was, rs.meaning(), what, rs.cfg.SemanticMigration)
		if err != nil {
			return err
		}
		if len(notes) > 0 {
			rs.log.Info("restoring state with compatible differences", "state", what, "changes", notes)
		}
		if migration != "" {
			rs.log.Warn("restoring state as a declared semantic migration", "state", what)
			if err := restore.AuditMigration(ctx, rs.conn.js, rs.restoreInstance(), []string{migration}); err != nil {
				return err
			}
		}
	}
	b := rs.store.NewBatch()
	now, err := restore.PutMeaning(b, rs.meaning())
	if err != nil || string(now) == string(v) {
		b.Close()
		return err
	}
	return b.Commit()
}
