package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Serving says which result generation readers of a pipeline's results
// read (weir cutover): the pipeline's own, or a shadow generation that
// replaced it. The generation it replaced — and the savepoint to roll back
// to — are kept until KeepUntil, the declared observation window.
type Serving struct {
	// Generation is the pipeline whose results are served, e.g.
	// "nexmark-shadow"; the pipeline itself when no cutover happened.
	Generation string    `json:"generation"`
	Since      time.Time `json:"since"`
	// Previous is the generation served before, what a rollback returns
	// to; Rollback the savepoint to restore it from, if one was named.
	Previous  string    `json:"previous,omitempty"`
	Rollback  string    `json:"rollback_savepoint,omitempty"`
	KeepUntil time.Time `json:"keep_until,omitzero"`
}

const servingKey = "serving"

// Serving reads which generation serves the pipeline's results; the
// pipeline itself when none was cut over to.
func (s *Store) Serving(ctx context.Context) (Serving, uint64, error) {
	var sv Serving
	rev, err := getJSON(ctx, s.kv, servingKey, "serving generation", &sv)
	switch {
	case errors.Is(err, ErrNotFound):
		return Serving{Generation: s.pipeline}, 0, nil
	case err != nil:
		return Serving{}, 0, err
	}
	return sv, rev, nil
}

// PutServing switches readers to sv.Generation if the record is still at
// revision rev (0: absent); otherwise ErrConflict.
func (s *Store) PutServing(ctx context.Context, sv Serving, rev uint64) error {
	b, err := json.Marshal(sv)
	if err != nil {
		return err
	}
	if rev == 0 {
		_, err = s.kv.Create(ctx, servingKey, b)
	} else {
		_, err = s.kv.Update(ctx, servingKey, b, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err) {
		return ErrConflict
	}
	if err != nil {
		return fmt.Errorf("checkpoint: switch the serving generation: %w", err)
	}
	return nil
}

// ServingOf resolves the generation whose results readers of pipeline
// read: the pipeline itself unless a cutover named another.
func ServingOf(ctx context.Context, js jetstream.JetStream, pipeline string) (string, error) {
	st, err := Existing(ctx, js, pipeline)
	if errors.Is(err, ErrNotFound) {
		return pipeline, nil
	}
	if err != nil {
		return "", err
	}
	sv, _, err := st.Serving(ctx)
	return sv.Generation, err
}
