package restore

import (
	"fmt"
	"strings"

	"github.com/weirflow/weir/internal/checkpoint"
)

// Judge compares what state meant when it was written (what names it)
// with want, what this build's state means. A change that makes the
// state unreadable is refused; a semantic one is refused unless semantic
// (the instance runs as a declared semantic migration), and is then
// returned as migration, for the audit stream (AuditMigration). Other
// differences are returned as notes.
func Judge(was, want checkpoint.Meaning, what string, semantic bool) (migration string, notes []string, err error) {
	changes := was.Changes(want)
	if len(changes) == 0 {
		return "", nil, nil
	}
	lines := describe(changes)
	switch {
	case checkpoint.Incompatible(changes):
		return "", nil, fmt.Errorf("stream: refusing to restore %s: this build cannot read its state: %s; run the change as a shadow generation (weir replay -contract NEW, then weir compare and weir cutover)",
			what, strings.Join(lines, "; "))
	case !checkpoint.Semantic(changes):
		return "", lines, nil
	case !semantic:
		return "", nil, fmt.Errorf("stream: refusing to restore %s: this build's state means something else than it did: %s; run the change as a shadow generation (weir replay -contract NEW, then weir compare), or declare a semantic migration (-semantic-migration, WEIR_SEMANTIC_MIGRATION)",
			what, strings.Join(lines, "; "))
	}
	return what + ": " + strings.Join(lines, "; "), nil, nil
}

func describe(changes []checkpoint.Change) []string {
	lines := make([]string, 0, len(changes))
	for _, c := range changes {
		lines = append(lines, c.String())
	}
	return lines
}

// judge holds a snapshot about to be restored (m, stored under key)
// against the instance: its operator, its state schema version and,
// when it recorded one, what its state means. The refusal says why.
func (in Instance) judge(m checkpoint.Manifest, key string, p *Plan) error {
	if m.Operator != in.Operator {
		return fmt.Errorf("stream: refusing to restore: snapshot %s is of operator %s, not %s", key, m.Operator, in.Operator)
	}
	if err := in.schema(m, key); err != nil {
		return err
	}
	return in.judgeMeaning(m, key, p)
}

func (in Instance) schema(m checkpoint.Manifest, key string) error {
	if m.SchemaVersion != in.SchemaVersion {
		return fmt.Errorf("stream: refusing to restore: snapshot %s has state schema version %d, operator %s reads version %d; restore a compatible savepoint or migrate the state", key, m.SchemaVersion, in.Operator, in.SchemaVersion)
	}
	return nil
}

func (in Instance) judgeMeaning(m checkpoint.Manifest, key string, p *Plan) error {
	if m.Meaning == nil {
		in.log().Info("restoring a snapshot of a build that did not record what its state means: not compared", "snapshot", key)
		return nil
	}
	migration, notes, err := Judge(*m.Meaning, in.Meaning, key, in.SemanticMigration)
	if err != nil {
		return err
	}
	if len(notes) > 0 {
		in.log().Info("restoring state with compatible differences", "state", key, "changes", notes)
	}
	if migration != "" {
		in.log().Warn("restoring state as a declared semantic migration", "state", key)
		p.Migrations = append(p.Migrations, migration)
	}
	return nil
}
