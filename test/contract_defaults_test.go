package test

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/checkpoint"
	"github.com/weirflow/weir/pkg/stream"
)

// TestContractDefaultsKeepMeaning: a checkpoint's compatibility check
// gives the same answer for a contract written out in full and the same
// contract relying on its defaults. Every operator's state means the same
// under both (stream.MeaningOf, what a snapshot records and a restore
// compares), so a snapshot taken under one restores under the other with
// no change; and so for every shipped contract and its effective form.
// A contract that does differ — a second more of allowed lateness — still
// shows as a semantic change.
func TestContractDefaultsKeepMeaning(t *testing.T) {
	full, err := contracts.Load(filepath.Join(filepath.Dir(contractPath(t)), "testdata", "nexmark-q7-full.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	short, err := contracts.Shipped("nexmark-q7")
	if err != nil {
		t.Fatal(err)
	}
	same := func(name string, a, b *contracts.Contract) {
		t.Helper()
		if a.Fingerprint() != b.Fingerprint() {
			t.Errorf("%s: fingerprints differ", name)
		}
		for _, op := range a.OperatorIDs() {
			ma, err := stream.MeaningOf(a, op, nil)
			if err != nil {
				t.Fatal(err)
			}
			mb, err := stream.MeaningOf(b, op, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(ma, mb) {
				t.Errorf("%s: operator %s's state means\n%+v\nunder one and\n%+v\nunder the other", name, op, ma, mb)
			}
			if ch := append(ma.Changes(mb), mb.Changes(ma)...); len(ch) > 0 {
				t.Errorf("%s: operator %s: a restore across the two sees changes %v", name, op, ch)
			}
		}
	}
	same("q7 in full and relying on defaults", full, short)
	for _, name := range contracts.ShippedNames() {
		c, err := contracts.Shipped(name)
		if err != nil {
			t.Fatal(err)
		}
		written, err := contracts.Parse(name+"-effective.yaml", c.Effective())
		if err != nil {
			t.Fatal(err)
		}
		same(name+" and its effective form", c, written)
	}

	later, err := contracts.Parse("q7-later.yaml", []byte(strings.Replace(string(short.Effective()), "allowed_lateness: 5s", "allowed_lateness: 6s", 1)))
	if err != nil {
		t.Fatal(err)
	}
	was, err := stream.MeaningOf(short, "q7-max", nil)
	if err != nil {
		t.Fatal(err)
	}
	is, err := stream.MeaningOf(later, "q7-max", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ch := was.Changes(is); !checkpoint.Semantic(ch) {
		t.Errorf("another allowed lateness: changes %v, want a semantic one", ch)
	}
}
