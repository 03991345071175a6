package erasure

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/keygroup"
	"github.com/weirflow/weir/pkg/record"
)

// A record of an erased key was written before the erasure when its
// source coordinate is at or below the mark of its stream; a record
// without a coordinate the request marks — a pane, a record of a stream
// not marked — is judged by where it was read.
func TestBefore(t *testing.T) {
	req := Request{Marks: map[string]uint64{"NEXMARK": 100, "WEIR_P_BIDS": 40}}
	for _, c := range []struct {
		name   string
		at     record.Coordinate
		stream string
		seq    uint64
		want   bool
	}{
		{"ingress record before", record.Coordinate{Stream: "NEXMARK", Seq: 100}, "WEIR_P_BIDS", 90, true},
		{"ingress record after, read from an edge below its mark", record.Coordinate{Stream: "NEXMARK", Seq: 101}, "WEIR_P_BIDS", 10, false},
		{"no coordinate, read below the mark", record.Coordinate{}, "WEIR_P_BIDS", 40, true},
		{"no coordinate, read past the mark", record.Coordinate{}, "WEIR_P_BIDS", 41, false},
		{"a stream the request does not mark", record.Coordinate{Stream: "OTHER", Seq: 1}, "WEIR_P_OTHER", 1, false},
	} {
		if got := req.Before(c.at, c.stream, c.seq); got != c.want {
			t.Errorf("%s: Before = %v, want %v", c.name, got, c.want)
		}
	}
}

// The digest names a key without revealing it, and tells keys apart.
func TestDigest(t *testing.T) {
	a, b := Digest([]byte("alice")), Digest([]byte("bob"))
	if len(a) != 64 || a == b || a == Digest([]byte("alice ")) {
		t.Errorf("digests %s, %s", a, b)
	}
}

// Under tenant-scoped keys a tenant's key is erased as the qualified key
// state holds, and its digest names that; a key alone is refused, a
// tenant alone is the whole tenant. Elsewhere a tenant is refused.
func TestTarget(t *testing.T) {
	scoped := &contracts.Contract{File: "scoped.yaml", State: contracts.State{TenantScoped: true}}
	plain := &contracts.Contract{File: "plain.yaml"}
	req, err := Target(scoped, "acme", "k7")
	if err != nil || string(req.Key) != string(keygroup.Scoped("acme", []byte("k7"))) || req.Tenant != "" {
		t.Errorf("a tenant's key: %+v, %v", req, err)
	}
	if req.Name() != "key."+Digest(keygroup.Scoped("acme", []byte("k7"))) || req.Name() == (Request{Key: []byte("k7")}).Name() {
		t.Errorf("the registry files a tenant's key as %s", req.Name())
	}
	if _, err := Target(scoped, "", "k7"); !errors.Is(err, ErrTenantNeeded) || !strings.Contains(err.Error(), "-tenant") {
		t.Errorf("a key alone under tenant-scoped keys: %v", err)
	}
	if req, err := Target(scoped, "acme", ""); err != nil || req.Tenant != "acme" || req.Key != nil {
		t.Errorf("a tenant alone: %+v, %v", req, err)
	}
	if _, err := Target(scoped, "ac\x1eme", "k7"); err == nil {
		t.Error("a tenant holding the separator was taken")
	}
	if _, err := Target(plain, "acme", "k7"); !errors.Is(err, ErrNotTenantScoped) {
		t.Errorf("a tenant on a contract without tenant-scoped keys: %v", err)
	}
	if req, err := Target(plain, "", "k7"); err != nil || string(req.Key) != "k7" {
		t.Errorf("a key: %+v, %v", req, err)
	}
	if _, err := Target(plain, "", ""); !errors.Is(err, ErrNoTarget) {
		t.Errorf("nothing named: %v", err)
	}
}

// TestReportRoundTrip: a report reads back as encoded on its instance's
// subject; one that is not a report, or speaks for another instance, is
// refused.
func TestReportRoundTrip(t *testing.T) {
	want := Report{Operator: "dedup", Instance: "0", Rev: 4, GroupLo: 0, GroupHi: 127, Families: []string{"seen"}, Keys: 1, Timers: 2, ViewKeys: 3, Held: 1}
	b, err := EncodeReport(want)
	if err != nil {
		t.Fatal(err)
	}
	subject := ReportSubject("p", "dedup", "0")
	if got, err := ParseReport("p", subject, b); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseReport: %+v %v, want %+v", got, err, want)
	}
	for _, bad := range []struct{ subject, data string }{
		{ReportSubject("p", "dedup", "1"), string(b)},
		{subject, `{"operator":"dedup","instance":"0","colour":1}`},
		{subject, string(b) + ` {}`},
		{subject, `not json`},
	} {
		if r, err := ParseReport("p", bad.subject, []byte(bad.data)); err == nil {
			t.Errorf("ParseReport(%s, %q) = %+v, want an error", bad.subject, bad.data, r)
		}
	}
}
