package stream

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/pkg/audit"
	"github.com/weirflow/weir/pkg/checkpoint"
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/state"
)

// meaning is what the operator's state means under plan p, for schema
// version schema (0: unknown), reading partitions input partitions in all.
func (p plan) meaning(schema, partitions int) checkpoint.Meaning {
	c := p.contract
	m := checkpoint.Meaning{SchemaVersion: schema, KeyGroups: p.keyGroups, Partitions: partitions}
	if len(p.families) > 0 {
		// Only kept state is keyed: a stateless operator has none to
		// redistribute.
		m.Key = "key " + fieldSpec(c.Identity.Key)
		if p.keyByID {
			m.Key = "id " + fieldSpec(c.Identity.ID)
		}
		if p.split > 0 {
			m.Key += fmt.Sprintf(", split %d", p.split)
		}
	}
	for _, f := range c.State.Families {
		for _, sf := range p.families {
			if sf.Name == f.Name {
				m.Families = append(m.Families, checkpoint.FamilyMeaning{Name: f.Name, Kind: f.Kind, TTL: f.TTL.D(), Bound: f.Bound, MaxKeys: int64(f.MaxKeys)})
			}
		}
	}
	m.Time = c.Time.Domain
	if c.Time.Domain == contracts.DomainEvent {
		m.Time += fmt.Sprintf(", watermark %s, out_of_orderness %s", c.Progress.Watermark, c.Progress.OutOfOrderness)
	}
	if p.windowed {
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
func (rn *run) meaning() checkpoint.Meaning {
	return rn.plan.meaning(rn.schemaVersion(), len(rn.base.inputs))
}

// checkMeaning holds a snapshot about to be restored against what this
// build's state means: a semantic change is refused unless the instance
// runs as a declared semantic migration (Config.SemanticMigration), which
// is then recorded in the audit stream.
func (rn *run) checkMeaning(m *checkpoint.Manifest, key string) error {
	if m.Meaning == nil {
		return nil // taken by a build that did not record it
	}
	changes := m.Meaning.Changes(rn.meaning())
	if len(changes) == 0 {
		return nil
	}
	var lines []string
	for _, c := range changes {
		lines = append(lines, c.String())
	}
	if !checkpoint.Semantic(changes) {
		rn.log.Info("restoring a snapshot taken with compatible differences", "snapshot", key, "changes", lines)
		return nil
	}
	if !rn.cfg.SemanticMigration {
		return fmt.Errorf("stream: refusing to restore %s: this build's state means something else than the snapshot's: %s; run the change as a shadow generation (weir replay -contract NEW, then weir compare), or declare a semantic migration (-semantic-migration, WEIR_SEMANTIC_MIGRATION)",
			key, strings.Join(lines, "; "))
	}
	rn.log.Warn("restoring a snapshot as a declared semantic migration", "snapshot", key, "changes", lines)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := audit.Append(ctx, rn.js, rn.plan.pipeline, audit.Record{Actor: "weir/" + rn.cfg.Operator + "/" + rn.cfg.Instance,
		Action: audit.ActionMigrate, Target: rn.cfg.Operator + "/" + rn.cfg.Instance, From: key, To: "semantic migration",
		Reason: "declared by -semantic-migration", Detail: map[string]any{"changes": lines}})
	return err
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
func fieldSpec(f contracts.Field) string {
	if f.From == "header" {
		return "header " + f.Header
	}
	return f.From + " " + f.Field
}
