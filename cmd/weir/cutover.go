package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/cli"
)

// cutoverCmd is `weir cutover`: readers of a pipeline's results switch to
// another result generation — a shadow that ran a changed pipeline over
// the retained input and compared equal, or as intended — or, with
// -rollback, back to the one served before. weir's readers (weir view,
// weir tail) follow it; other readers resolve it with
// checkpoint.ServingOf. The generation replaced and the rollback
// savepoint are kept for the declared observation window: weir deletes
// neither.
func cutoverCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, srv, pipeline := ctlFlags("weir cutover", getenv)
	var to, rollbackSP, reason string
	var keep time.Duration
	var rollback bool
	fs.String(&to, "to", "WEIR_CUTOVER_TO", "", "the generation to serve, e.g. <pipeline>-shadow of weir replay")
	fs.Bool(&rollback, "rollback", "WEIR_ROLLBACK", false, "serve the generation served before the last cutover again")
	fs.String(&rollbackSP, "rollback-savepoint", "WEIR_ROLLBACK_SAVEPOINT", "", "the savepoint to restore the replaced generation from, should it be needed: recorded with the cutover")
	fs.Duration(&keep, "keep", "WEIR_KEEP", 7*24*time.Hour, "the observation window: how long the replaced generation and the rollback savepoint are kept")
	fs.String(&reason, "reason", "WEIR_REASON", "", "why (required): the audit stream records it")
	actor := actorFlag(fs)
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if (to == "") == !rollback {
		return fmt.Errorf("weir cutover: give -to GENERATION, or -rollback")
	}
	if reason == "" {
		return fmt.Errorf("weir cutover: say why with -reason: the audit stream records it")
	}
	nc, js, err := srv.connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	st, err := checkpoint.Existing(ctx, js, *pipeline)
	if err != nil {
		return err
	}
	cur, rev, err := st.Serving(ctx)
	if err != nil {
		return err
	}
	next := checkpoint.Serving{Generation: to, Since: time.Now().UTC(), Previous: cur.Generation, Rollback: rollbackSP, KeepUntil: time.Now().UTC().Add(keep)}
	if rollback {
		if cur.Previous == "" {
			return fmt.Errorf("weir cutover: pipeline %s serves its own results: there is no cutover to roll back", *pipeline)
		}
		// The rolled-back generation stays for the window the cutover
		// declared, should the rollback itself be undone.
		next = checkpoint.Serving{Generation: cur.Previous, Since: time.Now().UTC(), Previous: cur.Generation, Rollback: cur.Rollback, KeepUntil: cur.KeepUntil}
	} else if to != *pipeline && !strings.HasPrefix(to, *pipeline+"-") {
		return fmt.Errorf("weir cutover: %s is not a generation of pipeline %s (%s or %s-<generation>)", to, *pipeline, *pipeline, *pipeline)
	}
	if next.Generation == cur.Generation {
		return fmt.Errorf("weir cutover: pipeline %s already serves %s", *pipeline, cur.Generation)
	}
	if err := hasResults(ctx, js, next.Generation); err != nil {
		return err
	}
	if rollbackSP != "" {
		if _, err := st.Savepoint(ctx, rollbackSP); err != nil {
			return fmt.Errorf("weir cutover: rollback savepoint: %w", err)
		}
	}
	if err := st.PutServing(ctx, next, rev); err != nil {
		return err
	}
	action := "served"
	if rollback {
		action = "rolled back to"
	}
	fmt.Fprintf(stdout, "pipeline %s: readers now read generation %s (was %s)", *pipeline, next.Generation, cur.Generation)
	if !rollback {
		kept := cur.Generation
		if rollbackSP != "" {
			kept += fmt.Sprintf(" and savepoint %q are", rollbackSP)
		} else {
			kept += " is"
		}
		fmt.Fprintf(stdout, "; %s needed until %s (weir deletes neither; the edges' retention still applies)", kept, next.KeepUntil.Format(time.RFC3339))
	}
	fmt.Fprintln(stdout)
	return recordAct(ctx, js, *pipeline, audit.Record{Actor: *actor, Action: audit.ActionCutover, Target: *pipeline,
		From: cur.Generation, To: next.Generation, Reason: reason,
		Detail: map[string]any{"what": action, "rollback_savepoint": rollbackSP, "keep_until": next.KeepUntil}}, stdout)
}

// hasResults refuses to serve a generation that has never run.
func hasResults(ctx context.Context, js jetstream.JetStream, generation string) error {
	_, err := checkpoint.Existing(ctx, js, generation)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return fmt.Errorf("weir cutover: generation %s has never run (it has no checkpoint bucket): replay into it first", generation)
	}
	return err
}

// servedGeneration is the generation whose results a reader of pipeline
// reads, said on w when a cutover made it another.
func servedGeneration(ctx context.Context, js jetstream.JetStream, pipeline string, w io.Writer) (string, error) {
	gen, err := checkpoint.ServingOf(ctx, js, pipeline)
	if err != nil {
		return "", err
	}
	if gen != pipeline {
		fmt.Fprintf(w, "pipeline %s serves generation %s (weir cutover): reading it\n", pipeline, gen)
	}
	return gen, nil
}

// connectServed connects to srv and resolves pipeline to the generation a
// reader of it reads (servedGeneration). The caller closes the connection.
func connectServed(ctx context.Context, srv *natsServer, pipeline string, w io.Writer) (*nats.Conn, jetstream.JetStream, string, error) {
	nc, js, err := srv.connect(ctx)
	if err != nil {
		return nil, nil, "", err
	}
	gen, err := servedGeneration(ctx, js, pipeline, w)
	if err != nil {
		nc.Close()
		return nil, nil, "", err
	}
	return nc, js, gen, nil
}
