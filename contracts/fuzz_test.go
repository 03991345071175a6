package contracts

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: whatever a contract file holds, loading it never panics, and
// either refuses it with problems that each say why (and, read from a file,
// where), or accepts a contract whose canonical form is a fixed point — it
// parses and lints clean again, to the same canonical form, so the
// fingerprint every service checks is stable.
func FuzzParse(f *testing.F) {
	for _, name := range ShippedNames() {
		data, err := shipped.ReadFile(name + ".yaml")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	bad, _ := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	for _, p := range bad {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{"", "---\n---\n", "pipeline: [", "a: &a [*a]", "pipeline: x\nversion: 99999999999999999999999",
		"recovery:\n  checkpoint_interval: 9999999999h\n", "ingress:\n  partitions: -1\n", "overload:\n  fetch_batch: 0\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		var inv *Invalid
		if err == nil {
			if ps := c.Lint(); len(ps) > 0 {
				err = &Invalid{Problems: ps}
			}
		}
		if err != nil {
			if !errors.As(err, &inv) || len(inv.Problems) == 0 {
				t.Fatalf("refused without problems: %v", err)
			}
			for _, p := range inv.Problems {
				if p.Why == "" || p.File != "fuzz.yaml" {
					t.Fatalf("problem without a reason or file: %+v", p)
				}
			}
			return
		}
		canon := c.Canonical()
		again, err := Parse("canonical.yaml", canon)
		if err != nil {
			t.Fatalf("canonical form does not parse: %v\n%s", err, canon)
		}
		if ps := again.Lint(); len(ps) > 0 {
			t.Fatalf("canonical form does not lint clean: %v\n%s", ps, canon)
		}
		if !bytes.Equal(again.Canonical(), canon) || again.Fingerprint() != c.Fingerprint() {
			t.Fatalf("canonical form is not a fixed point:\n%s\n---\n%s", canon, again.Canonical())
		}
	})
}
