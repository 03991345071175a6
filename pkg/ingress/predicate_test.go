package ingress

import "testing"

// TestPredicate matches strings, numbers and booleans at a nested path, and
// nothing when the path is missing, not an object on the way, or repeated.
func TestPredicate(t *testing.T) {
	p := NewPredicate("a.kind", []string{"person", "7", "true"})
	for _, c := range []struct {
		payload string
		want    bool
	}{
		{`{"a":{"kind":"person"}}`, true},
		{`{"a":{"kind":"bid"}}`, false},
		{`{"a":{"kind":7}}`, true},
		{`{"a":{"kind":7.0}}`, false}, // as JSON writes it: 7.0 is not 7
		{`{"a":{"kind":true}}`, true},
		{`{"a":{"kind":"pers\u006fn"}}`, true},
		{`{"kind":"person"}`, false},
		{`{"a":"person"}`, false},
		{`{"a":{"kind":"bid","kind":"person"}}`, false}, // repeated on the path
		{`not json`, false},
	} {
		if got := p.Match([]byte(c.payload)); got != c.want {
			t.Errorf("%s: %v, want %v", c.payload, got, c.want)
		}
	}
}
