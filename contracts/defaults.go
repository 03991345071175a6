package contracts

import (
	"bytes"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Default is a field a contract file may leave out, and the value it then
// has: what nearly every pipeline would otherwise repeat. Parse applies
// the defaults, so every reader of a contract — the runtime, Lint, the
// deploy generator, weir auth, the fingerprint and what a checkpoint
// records its state to mean — sees the same effective contract whether a
// file states a value or relies on its default.
type Default struct {
	// Field is the field's dotted path; [] stands for every item of a
	// list: operators[].dead_letter.
	Field string
	// Value is the value as a contract file would write it, or how it
	// follows from other fields.
	Value string
	// derive, when set, computes the value from the contract as read so
	// far (the defaults before it applied); ok false leaves the field out,
	// for Lint to report or its reader to do without.
	derive func(c *Contract) (yaml string, ok bool)
}

// DefaultDuplicateWindow is ingress.duplicate_window when the contract
// does not say (and the retention is not shorter).
const DefaultDuplicateWindow = 2 * time.Minute

// DefaultRetainedCheckpoints is recovery.retained_checkpoints when the
// contract does not say.
const DefaultRetainedCheckpoints = 3

// defaults is every default, in the order Parse applies them: a derived
// default reads fields set before it.
var defaults = []Default{
	{Field: "version", Value: strconv.Itoa(FormatVersion)},

	{Field: "ingress.offsets", Value: OffsetsStreamSequence},
	{Field: "ingress.max_message_bytes", Value: "65536"},
	{Field: "ingress.duplicate_window", Value: "2m, or ingress.retention when shorter",
		derive: func(c *Contract) (string, bool) {
			if !c.has("ingress.retention") || c.Ingress.Retention.Duration <= 0 {
				return "", false
			}
			return Duration{min(DefaultDuplicateWindow, c.Ingress.Retention.Duration)}.String(), true
		}},

	{Field: "identity.producer", Value: "{from: header, header: Weir-Producer, optional: true}"},

	{Field: "time.domain", Value: DomainEvent},
	{Field: "time.trust", Value: "producer in time.domain event, broker otherwise",
		derive: func(c *Contract) (string, bool) {
			if c.Time.Domain == DomainEvent {
				return TrustProducer, true
			}
			return TrustBroker, true
		}},
	{Field: "time.future_skew", Value: "5s"},
	{Field: "time.on_future", Value: OnFutureSideOutput},

	{Field: "progress.watermark", Value: "bounded-out-of-orderness; none in time.domain processing",
		derive: func(c *Contract) (string, bool) {
			if c.Time.Domain == DomainProcessing {
				return WatermarkNone, true
			}
			return WatermarkBounded, true
		}},
	{Field: "progress.out_of_orderness", Value: "0s unless the watermark is bounded-out-of-orderness, which needs it stated",
		derive: func(c *Contract) (string, bool) { return "0s", c.Progress.Watermark != WatermarkBounded }},
	{Field: "progress.idle_timeout", Value: "10s"},
	{Field: "progress.alignment_drift", Value: "30s"},

	{Field: "emission.mode", Value: ModeAppend},
	{Field: "emission.accumulation", Value: AccumulationDiscarding},
	{Field: "emission.triggers.on_time", Value: "true; false for a global emission.window, which never ends",
		derive: func(c *Contract) (string, bool) {
			return strconv.FormatBool(c.Emission.Window.Kind != WindowGlobal), true
		}},
	{Field: "emission.allowed_lateness", Value: "0s"},

	{Field: "state.key_groups", Value: "256"},
	{Field: "state.families", Value: "[]"},
	{Field: "state.families[].on_limit", Value: OnLimitFail},

	{Field: "recovery.checkpoint_interval", Value: "10s"},
	{Field: "recovery.mode", Value: CheckpointAligned},
	{Field: "recovery.max_recovery_time", Value: "5m"},
	{Field: "recovery.retained_checkpoints", Value: "3 while checkpoint_interval is over 0s",
		derive: func(c *Contract) (string, bool) {
			return strconv.Itoa(DefaultRetainedCheckpoints), c.Recovery.CheckpointInterval.Duration > 0
		}},

	{Field: "sink.provider_keys", Value: "honoured for sink.effect outbox",
		derive: func(c *Contract) (string, bool) { return ProviderKeysHonoured, c.Sink.Effect == EffectOutbox }},

	{Field: "overload.policy", Value: PolicyBlock},
	{Field: "overload.fetch_batch", Value: "256"},
	{Field: "overload.max_ack_pending", Value: "1024"},
	{Field: "overload.frame_max_records", Value: "500"},
	{Field: "overload.frame_max_bytes", Value: "1048576"},
	{Field: "overload.frame_linger", Value: "5ms"},
	{Field: "overload.max_buffered_frames", Value: "64"},

	{Field: "edges[].partitions", Value: "ingress.partitions",
		derive: func(c *Contract) (string, bool) {
			return strconv.Itoa(c.Ingress.Partitions), c.has("ingress.partitions")
		}},
	{Field: "edges[].retention", Value: "ingress.retention",
		derive: func(c *Contract) (string, bool) {
			return c.Ingress.Retention.String(), c.has("ingress.retention")
		}},
	{Field: "edges[].format", Value: FormatFrames},

	{Field: "operators[].state", Value: "[]"},
	{Field: "operators[].dead_letter", Value: "true"},

	{Field: "security.keys", Value: RedactClear},
}

// Defaults lists every default, in the order Parse applies them.
func Defaults() []Default { return append([]Default(nil), defaults...) }

// has reports whether field is present with a value, stated in the file
// or defaulted. A contract built in Go has every field.
func (c *Contract) has(field string) bool {
	if c.index == nil {
		return true
	}
	pos, ok := c.index[field]
	return ok && !pos.null
}

// Defaulted reports whether field (a dotted path, as in Problem.Field)
// has its value from a default rather than from the contract's file.
func (c *Contract) Defaulted(field string) bool { return c.index[field].defaulted }

// applyDefaults gives every field the file leaves out (or leaves empty)
// its default, recording it in the index as present and defaulted.
func (d *decoder) applyDefaults(c *Contract) {
	root := reflect.ValueOf(c).Elem()
	for _, def := range defaults {
		for _, path := range expand(root, def.Field) {
			text, ok := def.text(c)
			if c.has(path) || !ok {
				continue
			}
			d.defaulting = true
			d.set(lookup(root, path), path, text)
			d.defaulting = false
			d.index[path] = position{defaulted: true}
			for p := parent(path); p != ""; p = parent(p) {
				if !c.has(p) {
					d.index[p] = position{defaulted: true}
				}
			}
		}
	}
}

// text is the default's value for contract c, as YAML; ok is false when
// it has none (a derived default whose fields are missing).
func (def Default) text(c *Contract) (text string, ok bool) {
	if def.derive == nil {
		return def.Value, true
	}
	return def.derive(c)
}

// set decodes text, a default's YAML, into target, the field at path, as
// if the file said it. A default that does not decode is a bug here.
func (d *decoder) set(target reflect.Value, path, text string) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil || len(doc.Content) != 1 {
		panic(fmt.Sprintf("contracts: default of %s: %q is not a YAML value: %v", path, text, err))
	}
	target.Set(reflect.Zero(target.Type()))
	before := len(d.problems)
	d.value(doc.Content[0], target, path)
	if len(d.problems) > before {
		panic(fmt.Sprintf("contracts: default of %s does not decode: %v", path, d.problems[before:]))
	}
}

// expand turns a default's path into the paths of the fields it sets:
// one per list item for a path with [].
func expand(root reflect.Value, field string) []string {
	list, rest, ok := strings.Cut(field, "[]")
	if !ok {
		return []string{field}
	}
	n := lookup(root, list).Len()
	paths := make([]string, n)
	for i := range paths {
		paths[i] = fmt.Sprintf("%s[%d]%s", list, i, rest)
	}
	return paths
}

// lookup returns the field of root at a dotted path with list indexes
// (edges[1].retention), by the names of the yaml tags.
func lookup(root reflect.Value, path string) reflect.Value {
	v := root
	for _, name := range strings.Split(path, ".") {
		idx := -1
		if open := strings.IndexByte(name, '['); open >= 0 {
			i, err := strconv.Atoi(strings.TrimSuffix(name[open+1:], "]"))
			if err != nil {
				panic(fmt.Sprintf("contracts: bad path %q", path))
			}
			name, idx = name[:open], i
		}
		v = fieldNamed(v, name, path)
		if idx >= 0 {
			v = v.Index(idx)
		}
	}
	return v
}

func fieldNamed(v reflect.Value, name, path string) reflect.Value {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag == name {
			return v.Field(i)
		}
	}
	panic(fmt.Sprintf("contracts: no field %q in %s (path %s)", name, t, path))
}

// Effective returns the whole effective contract as YAML: every field,
// stated or defaulted, in the canonical form (Canonical), each default
// marked with a "# default" comment.
func (c *Contract) Effective() []byte {
	var doc yaml.Node
	if err := doc.Encode(c.canonical()); err != nil {
		panic(fmt.Sprintf("contracts: encode effective contract: %v", err))
	}
	c.markDefaults(&doc, "")
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		panic(fmt.Sprintf("contracts: marshal effective contract: %v", err))
	}
	return b.Bytes()
}

func (c *Contract) markDefaults(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, m := range n.Content {
			c.markDefaults(m, path)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			if c.Defaulted(p) && !c.Defaulted(path) {
				if v.Kind == yaml.ScalarNode || len(v.Content) == 0 {
					v.LineComment = "default"
				} else {
					k.LineComment = "default"
				}
			}
			c.markDefaults(v, p)
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			c.markDefaults(item, fmt.Sprintf("%s[%d]", path, i))
		}
	}
}
