package window

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/go-json-experiment/json/jsontext"

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

// Encode renders the pane as JSON, its members in a fixed order:
//
//	{"window":{"start":…,"end":…},"key":…,"pane":{"index":…,"timing":…,"final":…},"version":…,"kind":…,"value":…}
//
// It appends the members by hand: the reflection of encoding/json, and its
// parse of DecodePane, were a tenth of a counting window's CPU (q5), whose
// next stage reads each pane again. The key is quoted as JSON does, bytes
// that are not UTF-8 replaced by U+FFFD; the value is checked and compacted.
func (p Pane) Encode() ([]byte, error) {
	timing, err := p.Info.Timing.MarshalText()
	if err != nil {
		return nil, fmt.Errorf("window: encode pane %s: %w", p.ID(), err)
	}
	kind, err := p.Kind.MarshalText()
	if err != nil {
		return nil, fmt.Errorf("window: encode pane %s: %w", p.ID(), err)
	}
	b := make([]byte, 0, 160+len(p.Key)+len(p.Value))
	b = append(b, `{"window":`...)
	b = p.Window.appendJSON(b)
	b = append(b, `,"key":`...)
	b, _ = jsontext.AppendQuote(b, p.Key) // invalid UTF-8 is replaced, as encoding/json does
	b = append(b, `,"pane":{"index":`...)
	b = strconv.AppendUint(b, p.Info.Index, 10)
	b = append(b, `,"timing":"`...)
	b = append(b, timing...)
	b = append(b, `","final":`...)
	b = strconv.AppendBool(b, p.Info.Final)
	b = append(b, `},"version":`...)
	b = strconv.AppendUint(b, p.Version, 10)
	b = append(b, `,"kind":"`...)
	b = append(b, kind...)
	b = append(b, `","value":`...)
	if len(p.Value) == 0 {
		b = append(b, "null"...)
	} else if b, err = jsontext.AppendFormat(b, p.Value, lenient...); err != nil {
		return nil, fmt.Errorf("window: encode pane %s: value: %w", p.ID(), err)
	}
	return append(b, '}'), nil
}

// DecodePane parses a pane encoded by Encode, its members in any order. A
// member it does not know, one given twice, a value of the wrong type or
// anything after the object is an error.
func DecodePane(b []byte) (Pane, error) {
	var p Pane
	err := decode(b, func(dec *jsontext.Decoder) error {
		return readObject(dec, "pane", paneMembers, func(i int) error {
			var err error
			switch i {
			case 0:
				err = p.Window.read(dec)
			case 1:
				p.Key, err = readString(dec)
			case 2:
				err = readObject(dec, "pane.pane", infoMembers, func(i int) error {
					switch i {
					case 0:
						p.Info.Index, err = readUint(dec)
					case 1:
						err = readText(dec, &p.Info.Timing)
					case 2:
						p.Info.Final, err = readBool(dec)
					}
					return err
				})
			case 3:
				p.Version, err = readUint(dec)
			case 4:
				err = readText(dec, &p.Kind)
			case 5:
				var v jsontext.Value
				if v, err = dec.ReadValue(); err == nil {
					p.Value = json.RawMessage(bytes.Clone(v)) // v lasts until the next read
				}
			}
			return err
		})
	})
	if err != nil {
		return Pane{}, fmt.Errorf("window: decode pane: %w", err)
	}
	return p, nil
}

// The members of a pane, of its info and of a window, as Encode writes
// them; DecodePane reads them in any order.
var (
	paneMembers   = []string{"window", "key", "pane", "version", "kind", "value"}
	infoMembers   = []string{"index", "timing", "final"}
	windowMembers = []string{"start", "end"}
)

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

// MarshalJSON renders the bounds in RFC 3339 with milliseconds, UTC:
// {"start":…,"end":…}.
func (w Window) MarshalJSON() ([]byte, error) { return w.appendJSON(nil), nil }

func (w Window) appendJSON(b []byte) []byte {
	b = append(b, `{"start":"`...)
	b = w.Start.UTC().AppendFormat(b, timeLayout)
	b = append(b, `","end":"`...)
	b = w.End.UTC().AppendFormat(b, timeLayout)
	return append(b, `"}`...)
}

// UnmarshalJSON parses bounds written by MarshalJSON.
func (w *Window) UnmarshalJSON(b []byte) error {
	return decode(b, w.read)
}

// read reads the object MarshalJSON writes, both bounds required.
func (w *Window) read(dec *jsontext.Decoder) error {
	var start, end string
	err := readObject(dec, "window", windowMembers, func(i int) error {
		var err error
		if i == 0 {
			start, err = readString(dec)
		} else {
			end, err = readString(dec)
		}
		return err
	})
	if err != nil {
		return err
	}
	s, err := time.Parse(time.RFC3339Nano, start)
	if err != nil {
		return fmt.Errorf("window: start: %w", err)
	}
	e, err := time.Parse(time.RFC3339Nano, end)
	if err != nil {
		return fmt.Errorf("window: end: %w", err)
	}
	*w = Window{Start: s.UTC(), End: e.UTC()}
	return nil
}
