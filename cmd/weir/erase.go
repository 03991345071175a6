package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/dispatcher"
	"github.com/weirflow/weir/internal/audit"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/internal/cli"
	"github.com/weirflow/weir/internal/deadletter"
	"github.com/weirflow/weir/internal/edge"
	"github.com/weirflow/weir/internal/erasure"
)

// eraseReport is what `weir erase` found and did: where the key was
// erased, and where it is still held and until when.
type eraseReport struct {
	Pipeline string `json:"pipeline"`
	Digest   string `json:"digest"`
	// Tenant: a tenant was erased, every key of it.
	Tenant bool      `json:"tenant,omitempty"`
	At     time.Time `json:"at"`
	Rev    uint64    `json:"rev"`
	Replay string    `json:"replay"`
	// Erased are the instances' reports; Missing the operators whose key
	// groups were not all reported within the timeout.
	Erased  []erasure.Report `json:"erased"`
	Missing []string         `json:"missing,omitempty"`
	// Found is whether any instance found the key (or a key of the
	// tenant) in its state or its view. An erasure that finds nothing is
	// registered all the same — it drops the key's earlier records a
	// restore or replay reads, and the key may be misspelt — and says so.
	Found bool `json:"found"`
	// Outbox is what the erasure did to the outbox, on a contract with
	// sink.effect outbox: the key's settled intents erased, the pending
	// ones left (dispatcher.Erase).
	Outbox *dispatcher.Erasure `json:"outbox,omitempty"`
	// Held are the places that still hold the key's records or state.
	Held []held `json:"held"`
}

// held is one place still holding an erased key, and when it stops.
type held struct {
	Kind string `json:"kind"` // log, intent, outcome, checkpoint, savepoint, registry
	What string `json:"what"`
	// Until is when it ages out; zero when it never does by itself.
	Until time.Time `json:"until,omitzero"`
	How   string    `json:"how"`
}

// eraseCmd is `weir erase`: a legal erasure of a key.
func eraseCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, srv, pipeline := ctlFlags("weir erase", getenv)
	var key, tenant string
	var timeout time.Duration
	var asJSON bool
	contract := newContractFlag(fs, pipeline, contractUsage)
	fs.String(&key, "key", "WEIR_ERASE_KEY", "", "the key to erase, as records carry it (identity.key); under tenant-scoped keys (state.tenant_scoped) give its -tenant too")
	fs.String(&tenant, "tenant", "WEIR_ERASE_TENANT", "", "the tenant (identity.tenant) whose -key to erase, or alone every key of it; the contract's keys must be tenant-scoped")
	fs.Duration(&timeout, "timeout", "WEIR_TIMEOUT", time.Minute, "how long to wait for the instances keeping state or a view to report, and for the dispatcher to settle the key's pending intents")
	fs.Bool(&asJSON, "json", "WEIR_JSON", false, "print the report as JSON")
	actor := actorFlag(fs)
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if key == "" && tenant == "" {
		return errors.New("weir erase: give -key, -tenant, or both")
	}
	c, err := contract.load()
	if err != nil {
		return err
	}
	req, err := erasure.Target(c, tenant, key)
	if err != nil {
		return fmt.Errorf("weir erase: %w", err)
	}
	d := c.Deletion
	if !d.Declared() {
		return fmt.Errorf("weir erase: contract %s declares no deletion policy: add a `deletion:` section (within, replay; contracts/README.md) and restart the pipeline's services with it", c.File)
	}
	nc, js, err := srv.connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	reg, err := erasure.Open(ctx, js, c.Pipeline, d.Within.D())
	if err != nil {
		return err
	}
	streams := retainedStreams(c)
	req.At, req.Actor, req.Marks = time.Now().UTC(), *actor, map[string]uint64{}
	// The digest is of what the registry files and state holds: a
	// tenant's key qualified by its tenant.
	digest, what := erasure.Digest([]byte(tenant)), "tenant"
	if req.Key != nil {
		digest, what = erasure.Digest(req.Key), "key"
	}
	infos := map[string]*jetstream.StreamInfo{}
	for _, s := range streams {
		st, err := js.Stream(ctx, s)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("weir erase: %s: %w", s, err)
		}
		info := st.CachedInfo()
		if info.Mirror != nil {
			// A mirror of the ingress (the pipeline in an account of its
			// own) may not hold yet what was stored before this erasure:
			// mark it once it has caught up, or a record of the key
			// stored just before would pass as one stored after.
			if info, err = mirrorCaughtUp(ctx, st); err != nil {
				return fmt.Errorf("weir erase: %s: %w", s, err)
			}
		}
		infos[s] = info
		req.Marks[s] = info.State.LastSeq
	}
	reports := make(chan erasure.Report, 256)
	sub, err := nc.Subscribe(erasure.ReportsSubject(c.Pipeline), func(m *nats.Msg) {
		r, err := erasure.ParseReport(c.Pipeline, m.Subject, m.Data)
		if err != nil {
			fmt.Fprintf(stderr, "weir erase: ignoring %v\n", err)
			return
		}
		select {
		case reports <- r:
		default:
			fmt.Fprintf(stderr, "weir erase: ignoring a report of %s/%s: more arrived than the instances send\n", r.Operator, r.Instance)
		}
	})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		return err
	}
	if req.Rev, err = reg.Put(ctx, req); err != nil {
		return err
	}
	rep := eraseReport{Pipeline: c.Pipeline, Digest: digest, At: req.At, Rev: req.Rev, Replay: d.Replay, Tenant: req.Tenant != ""}
	deadline := time.Now().Add(timeout)
	rep.Erased, rep.Missing = awaitErasure(ctx, c, req.Rev, reports, timeout)
	if c.Sink.Effect == contracts.EffectOutbox {
		if rep.Outbox, err = eraseOutbox(ctx, js, c, req, deadline); err != nil {
			return err
		}
	}
	rep.Found = found(rep)
	if rep.Held, err = stillHeld(ctx, js, c, req, infos, rep); err != nil {
		return err
	}
	if err := recordAct(ctx, js, c.Pipeline, audit.Record{Actor: *actor, Action: audit.ActionErase, Target: rep.Digest,
		To: fmt.Sprintf("registry revision %d", req.Rev), Reason: "erasure of the " + what + " with this SHA-256 digest",
		Detail: auditDetail(rep)}, io.Discard); err != nil {
		return err
	}
	if asJSON {
		if err := json.NewEncoder(stdout).Encode(rep); err != nil {
			return err
		}
	} else {
		printErasure(stdout, targetName(tenant, key), rep, d)
	}
	if len(rep.Missing) > 0 {
		return fmt.Errorf("weir erase: no report within %s from %s: the erasure is registered, and each instance applies it when it next starts", timeout, strings.Join(rep.Missing, ", "))
	}
	return nil
}

// found reports whether an instance's report of rep, or the outbox,
// erased or held anything of the key.
func found(rep eraseReport) bool {
	for _, r := range rep.Erased {
		if r.Keys > 0 || r.Timers > 0 || r.ViewKeys > 0 || len(r.Families) > 0 || r.Held > 0 {
			return true
		}
	}
	if o := rep.Outbox; o != nil {
		return len(o.Intents)+len(o.DeadLetters)+len(o.Pending)+o.Outcomes > 0
	}
	return false
}

// auditDetail is what the audit record of an erasure says it did.
func auditDetail(rep eraseReport) map[string]any {
	detail := map[string]any{"replay": rep.Replay, "instances": len(rep.Erased), "missing": rep.Missing, "found": rep.Found}
	if o := rep.Outbox; o != nil {
		detail["outbox"] = map[string]int{"intents": len(o.Intents), "dead_letters": len(o.DeadLetters), "outcomes": o.Outcomes, "pending": len(o.Pending)}
	}
	return detail
}

// eraseOutbox erases what the dispatcher of c's outbox keeps of the key
// (dispatcher.Erase), once the instances have erased it from their state,
// so that no intent of it is caused after; then, until the deadline, it
// waits for the dispatcher to settle the intents it found pending, and
// erases them as they are.
func eraseOutbox(ctx context.Context, js jetstream.JetStream, c *contracts.Contract, req erasure.Request, deadline time.Time) (*dispatcher.Erasure, error) {
	cfg, err := dispatcher.ForContract(c, "")
	if err != nil {
		return nil, err
	}
	e, err := dispatcher.Erase(ctx, js, cfg, req)
	if err != nil {
		return nil, fmt.Errorf("weir erase: %w", err)
	}
	for len(e.Pending) > 0 && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return e, nil
		case <-time.After(500 * time.Millisecond):
		}
		if err := e.Again(ctx, js, cfg); err != nil {
			return nil, fmt.Errorf("weir erase: %w", err)
		}
	}
	return e, nil
}

// targetName is how the report names what it erased.
func targetName(tenant, key string) string {
	switch {
	case key == "":
		return fmt.Sprintf("tenant %q", tenant)
	case tenant == "":
		return fmt.Sprintf("key %q", key)
	}
	return fmt.Sprintf("key %q of tenant %q", key, tenant)
}

// retainedStreams are the streams that retain a pipeline's records: its
// ingress, its dead letters and every edge.
func retainedStreams(c *contracts.Contract) []string {
	out := append(c.Ingress.StreamNames(), deadletter.StreamName(c.Pipeline))
	for _, e := range c.Edges {
		out = append(out, edge.StreamName(c.Pipeline, e.Name))
	}
	return out
}

// erases reports whether operator op keeps what an erasure removes —
// state keyed by key, or a view — or writes an outbox's intents by key,
// whose held ones it reports.
func erases(c *contracts.Contract, op contracts.Operator) bool {
	if len(op.State) > 0 && op.Keying == contracts.KeyingKey {
		return true
	}
	e, ok := c.Edge(op.Output)
	return ok && e.JSON() && (c.Sink.Effect == contracts.EffectVersionedUpsert || c.Sink.Effect == contracts.EffectOutbox && op.Keying == contracts.KeyingKey)
}

// awaitErasure collects the instances' reports of revision rev until,
// for every operator that erases, they cover all its key groups, or the
// timeout passes: then it names the operators not fully heard from.
func awaitErasure(ctx context.Context, c *contracts.Contract, rev uint64, reports <-chan erasure.Report, timeout time.Duration) ([]erasure.Report, []string) {
	want := map[string][]bool{}
	for _, op := range c.Operators {
		if erases(c, op) {
			want[op.ID] = make([]bool, c.State.KeyGroups)
		}
	}
	covered := func() []string {
		var missing []string
		for _, id := range slices.Sorted(maps.Keys(want)) {
			if slices.Contains(want[id], false) {
				missing = append(missing, id)
			}
		}
		return missing
	}
	var got []erasure.Report
	deadline := time.After(timeout)
	for len(covered()) > 0 {
		select {
		case r := <-reports:
			groups, ok := want[r.Operator]
			if r.Rev != rev || !ok {
				continue
			}
			got = append(got, r)
			for g := max(r.GroupLo, 0); g < min(r.GroupHi, len(groups)); g++ {
				groups[g] = true
			}
		case <-deadline:
			return got, covered()
		case <-ctx.Done():
			return got, covered()
		}
	}
	slices.SortFunc(got, func(a, b erasure.Report) int {
		return strings.Compare(a.Operator+"/"+a.Instance, b.Operator+"/"+b.Instance)
	})
	return got, nil
}

// stillHeld lists what still holds the key after the erasure: the
// retained log up to the marks, the outbox's intents left pending and
// those still held for their checkpoint, the checkpoints completed before
// it, every savepoint, and the registry itself.
func stillHeld(ctx context.Context, js jetstream.JetStream, c *contracts.Contract, req erasure.Request, infos map[string]*jetstream.StreamInfo, rep eraseReport) ([]held, error) {
	var out []held
	outboxStream := ""
	if o := rep.Outbox; o != nil {
		cfg, err := dispatcher.ForContract(c, "")
		if err != nil {
			return nil, err
		}
		outboxStream = cfg.Stream
		out = append(out, heldOfOutbox(cfg, o, rep.Erased)...)
	}
	for _, s := range retainedStreams(c) {
		info, ok := infos[s]
		if !ok || info.State.Msgs == 0 {
			continue
		}
		if s == outboxStream && rep.Outbox.Unnamed.Intents == 0 {
			// Every intent on it was told whose it is: the key's are
			// erased, or listed above.
			continue
		}
		h := held{Kind: "log", What: fmt.Sprintf("%s sequences %d to %d", s, info.State.FirstSeq, req.Marks[s])}
		if info.Config.MaxAge > 0 {
			h.Until = info.State.LastTime.Add(info.Config.MaxAge).UTC()
			h.How = "ages out (max_age " + info.Config.MaxAge.String() + ")"
		} else {
			h.How = "kept until the stream's limits remove it: it has no max age"
		}
		out = append(out, h)
	}
	store, err := checkpoint.Existing(ctx, js, c.Pipeline)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	keep := c.Recovery.RetainedCheckpoints
	if keep == 0 {
		keep = contracts.DefaultRetainedCheckpoints
	}
	recent, err := store.Recent(ctx, 3*keep+10)
	if err != nil {
		return nil, err
	}
	newer := 0                 // completed checkpoints newer than the one looked at
	for _, r := range recent { // newest first
		if r.Status != checkpoint.Complete || r.Collected {
			continue
		}
		if r.Completed.After(req.At) {
			newer++
			continue
		}
		left := max(keep-newer, 1)
		out = append(out, held{Kind: "checkpoint", What: fmt.Sprintf("checkpoint %d, completed %s", r.Checkpoint, r.Completed.UTC().Format(time.RFC3339)),
			Until: req.At.Add(time.Duration(left) * c.Recovery.CheckpointInterval.D()),
			How:   fmt.Sprintf("collected once %d newer checkpoints have completed (recovery.retained_checkpoints %d)", left, keep)})
		newer++
	}
	sps, err := store.Savepoints(ctx)
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(sps)) {
		out = append(out, held{Kind: "savepoint", What: "savepoint " + name,
			How: "kept until deleted: savepoints are retained on purpose. A restore of it erases the key again while the registry holds the erasure; after that, it brings the key back: delete it"})
	}
	out = append(out, held{Kind: "registry", What: erasure.Bucket(c.Pipeline), Until: req.At.Add(c.Deletion.Within.D()),
		How: "names the key so that every start erases it again; expires after deletion.within"})
	return out, nil
}

// heldOfOutbox lists what of the key the erasure o of outbox cfg had to
// leave: each intent pending, the intents instances hold for a checkpoint
// not yet complete, and what carries no erasure names.
func heldOfOutbox(cfg dispatcher.Config, o *dispatcher.Erasure, reports []erasure.Report) []held {
	var out []held
	again := "; its outcome, once recorded, is kept without a max age: run weir erase again once weir effects list shows it settled"
	for _, p := range o.Pending {
		h := held{Kind: "intent", Until: p.Until}
		switch {
		case p.DeadLetter:
			h.What = fmt.Sprintf("dead letter %s, %s sequence %d", p.Key, p.Stream, p.Seq)
			h.How = "its intent is being handed back or filed again, and is not settled" + again
		default:
			h.What = fmt.Sprintf("intent %s, %s sequence %d", p.Key, p.Stream, p.Seq)
			h.How = "not yet performed: erasing it would cancel the effect, so the dispatcher performs it first"
			if !p.Until.IsZero() {
				h.How = "ages out (max age); " + h.How
			}
			h.How += again
		}
		out = append(out, h)
	}
	for _, r := range reports {
		if r.Held > 0 {
			out = append(out, held{Kind: "intent", What: fmt.Sprintf("%d intents held by %s/%s", r.Held, r.Operator, r.Instance),
				How: "recorded before the erasure, held for a checkpoint not complete when it erased: stored in " + cfg.Stream +
					" once it completes (those stored by now are counted above, erased or pending), then performed; run weir erase again once weir effects list shows them settled"})
		}
	}
	if n := o.Unnamed.DeadLetters; n > 0 {
		out = append(out, held{Kind: "intent", What: fmt.Sprintf("%d dead letters of %s without erasure names", n, cfg.DeadLetters),
			How: "filed before intents named the key that caused them: nothing tells whose they are; kept until deleted"})
	}
	if n := o.Unnamed.Outcomes; n > 0 {
		out = append(out, held{Kind: "outcome", What: fmt.Sprintf("%d outcomes of %s without erasure names", n, cfg.Outcomes),
			How: "recorded before intents named the key that caused them: nothing tells whose they are; kept without a max age"})
	}
	return out
}

func printErasure(w io.Writer, name string, rep eraseReport, d contracts.Deletion) {
	fmt.Fprintf(w, "erased %s of pipeline %s (digest %s, registry revision %d)\n\n", name, rep.Pipeline, rep.Digest, rep.Rev)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATOR\tINSTANCE\tKEY GROUPS\tKEYS\tFAMILIES\tTIMERS\tVIEW ENTRIES")
	for _, r := range rep.Erased {
		families := strings.Join(r.Families, ",")
		if families == "" {
			families = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t[%d, %d)\t%d\t%s\t%d\t%d\n", r.Operator, r.Instance, r.GroupLo, r.GroupHi, r.Keys, families, r.Timers, r.ViewKeys)
	}
	tw.Flush()
	if o := rep.Outbox; o != nil {
		done := 0
		for _, i := range o.Intents {
			if i.Done {
				done++
			}
		}
		fmt.Fprintf(w, "\noutbox: %d intents erased (%d performed, %d not), %d dead letters, %d outcomes stripped (kept, so that none is performed again); %d pending\n",
			len(o.Intents), done, len(o.Intents)-done, len(o.DeadLetters), o.Outcomes, len(o.Pending))
	}
	if !rep.Found && len(rep.Missing) == 0 {
		fmt.Fprintf(w, "\nnothing found: no instance kept state or a view entry of %s. Check it against what records carry (identity.key, identity.tenant); the erasure is registered all the same, for the records still held below\n", name)
	}
	fmt.Fprintln(w, "\nstill held:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, h := range rep.Held {
		until := "until deleted"
		if h.Kind == "intent" {
			until = "until erased again"
		}
		if !h.Until.IsZero() {
			until = "until " + h.Until.Local().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", h.Kind, h.What, until, h.How)
	}
	tw.Flush()
	switch d.Replay {
	case contracts.ErasureWins:
		fmt.Fprintf(w, "\nerasure wins (deletion.replay): a restore or replay drops the key's records written before the erasure, and every start erases the key again\n")
	case contracts.ReplayWins:
		fmt.Fprintf(w, "\nreplay wins (deletion.replay): a restore or replay reading the key's records written before the erasure brings the key back from them until they age out; every start erases state restored from a checkpoint\n")
	}
}

// mirrorCaughtUp waits, until ctx ends, for the mirror st to hold all its
// origin held when asked, and returns its information then.
//
// A mirror reports its lag as of the last message or heartbeat it heard
// from its origin: "no lag" heard before the question says nothing of a
// record the origin stored since, so the answer must come from a contact
// after it. And twice: a mirror counts its start as a contact, and the
// lag it starts with is nothing. A data message brings the origin's
// count of what it has still to send, and the origin's consumer sends an
// idle heartbeat (every second) only when it has sent nothing for that
// long, so two contacts after the question with no lag mean the mirror
// holds what the origin held when it was asked.
func mirrorCaughtUp(ctx context.Context, st jetstream.Stream) (*jetstream.StreamInfo, error) {
	since, contacts := time.Now(), 0
	for {
		asked := time.Now()
		info, err := st.Info(ctx)
		if err != nil {
			return nil, err
		}
		m := info.Mirror
		if m == nil {
			return nil, errors.New("the ingress is no longer a mirror")
		}
		// When the mirror last heard its origin, at the latest: the
		// server measured Active after the question was sent.
		heard := asked.Add(-m.Active)
		switch {
		case m.Lag != 0 || m.Active < 0 || m.Error != nil:
			contacts = 0
		case heard.After(since):
			if contacts++; contacts == 2 {
				return info, nil
			}
			since = asked
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the mirror of the ingress has not caught up (%d behind, last heard %s ago): the erasure's mark would miss what the ingress stored last: %w",
				m.Lag, m.Active, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
