package window

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/weirflow/weir/pkg/record"
)

// Timing says when, relative to the watermark, a pane was emitted.
type Timing uint8

const (
	// Early panes are emitted before the watermark reaches the window's
	// maximum timestamp.
	Early Timing = iota
	// OnTime is the one pane emitted when the watermark reaches it.
	OnTime
	// Late panes are emitted after that, for late elements.
	Late
)

var timingNames = [...]string{Early: "EARLY", OnTime: "ON_TIME", Late: "LATE"}

func (t Timing) String() string {
	if t <= Late {
		return timingNames[t]
	}
	return fmt.Sprintf("Timing(%d)", uint8(t))
}

// MarshalText implements encoding.TextMarshaler.
func (t Timing) MarshalText() ([]byte, error) {
	if t > Late {
		return nil, fmt.Errorf("window: invalid timing %d", uint8(t))
	}
	return []byte(t.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (t *Timing) UnmarshalText(b []byte) error {
	for i, n := range timingNames {
		if n == string(b) {
			*t = Timing(i)
			return nil
		}
	}
	return fmt.Errorf("window: unknown pane timing %q", b)
}

// PaneKind says whether an emission adds a value or takes one back.
type PaneKind uint8

const (
	// Insert is a pane's value.
	Insert PaneKind = iota
	// Retract takes back the value the window emitted before, verbatim.
	Retract
)

func (k PaneKind) String() string {
	switch k {
	case Insert:
		return "insert"
	case Retract:
		return "retract"
	}
	return fmt.Sprintf("PaneKind(%d)", uint8(k))
}

// MarshalText implements encoding.TextMarshaler.
func (k PaneKind) MarshalText() ([]byte, error) {
	if k > Retract {
		return nil, fmt.Errorf("window: invalid pane kind %d", uint8(k))
	}
	return []byte(k.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *PaneKind) UnmarshalText(b []byte) error {
	switch string(b) {
	case "insert":
		*k = Insert
	case "retract":
		*k = Retract
	default:
		return fmt.Errorf("window: unknown pane kind %q", b)
	}
	return nil
}

// PaneInfo describes one firing of a window's trigger.
type PaneInfo struct {
	// Index counts the window's firings, from 0.
	Index uint64 `json:"index"`
	// Timing is the firing's timing.
	Timing Timing `json:"timing"`
	// Final is set on the window's last firing: its state is cleared with it.
	Final bool `json:"final"`
}

// Pane is one emission of a window: its value, or in retracting mode the
// retraction of a value emitted before. It is the JSON value of every record
// the operator emits.
type Pane struct {
	Window Window   `json:"window"`
	Key    string   `json:"key"`
	Info   PaneInfo `json:"pane"`
	// Version counts the window's emissions, from 1: a retraction and the
	// insert that follows it have consecutive versions.
	Version uint64          `json:"version"`
	Kind    PaneKind        `json:"kind"`
	Value   json.RawMessage `json:"value"`
}

// ID is the deterministic identity of the emission:
// "<key>|<start>|<end>|v<version>|<kind>", bounds in RFC 3339 milliseconds.
func (p Pane) ID() string {
	return p.Key + "|" + p.Window.Start.UTC().Format(timeLayout) + "|" + p.Window.End.UTC().Format(timeLayout) +
		"|v" + strconv.FormatUint(p.Version, 10) + "|" + p.Kind.String()
}

// Encode renders the pane as JSON.
func (p Pane) Encode() ([]byte, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("window: encode pane %s: %w", p.ID(), err)
	}
	return b, nil
}

// DecodePane parses a pane encoded by Encode.
func DecodePane(b []byte) (Pane, error) {
	var p Pane
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&p); err != nil {
		return Pane{}, fmt.Errorf("window: decode pane: %w", err)
	}
	return p, nil
}

// Record is the data record carrying the pane: ID from ID, the window's key,
// event time the window's maximum timestamp, and the encoded pane as value.
func (p Pane) Record() (record.Record, error) {
	v, err := p.Encode()
	if err != nil {
		return record.Record{}, err
	}
	return record.Record{
		Kind:  record.Data,
		ID:    p.ID(),
		Key:   []byte(p.Key),
		Time:  p.Window.MaxTimestamp(),
		Value: v,
	}, nil
}

type windowJSON struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

// MarshalJSON renders the bounds in RFC 3339 with milliseconds, UTC.
func (w Window) MarshalJSON() ([]byte, error) {
	return json.Marshal(windowJSON{Start: w.Start.UTC().Format(timeLayout), End: w.End.UTC().Format(timeLayout)})
}

// UnmarshalJSON parses bounds written by MarshalJSON.
func (w *Window) UnmarshalJSON(b []byte) error {
	var j windowJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	start, err := time.Parse(time.RFC3339Nano, j.Start)
	if err != nil {
		return fmt.Errorf("window: start: %w", err)
	}
	end, err := time.Parse(time.RFC3339Nano, j.End)
	if err != nil {
		return fmt.Errorf("window: end: %w", err)
	}
	*w = Window{Start: start.UTC(), End: end.UTC()}
	return nil
}
