package record

import "testing"

// A coordinate parses back from its string, whatever its subject holds;
// what String cannot have written is refused.
func TestParseCoordinate(t *testing.T) {
	for _, c := range []Coordinate{
		{Stream: "NEXMARK", Subject: "nexmark.events.3", Seq: 42},
		{Stream: "S", Subject: "a/b#c", Seq: 1},
		{Stream: "S", Subject: "", Seq: 0},
	} {
		got, err := ParseCoordinate(c.String())
		if err != nil || got != c {
			t.Errorf("ParseCoordinate(%q) = %+v, %v; want %+v", c.String(), got, err, c)
		}
	}
	for _, s := range []string{"", "NEXMARK", "/subject#1", "S/subject", "S/subject#x", "S#1/subject"} {
		if c, err := ParseCoordinate(s); err == nil {
			t.Errorf("ParseCoordinate(%q) = %+v, want an error", s, c)
		}
	}
}
