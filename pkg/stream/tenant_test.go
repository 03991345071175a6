package stream

import (
	"strings"
	"testing"

	"github.com/weirflow/weir/internal/keygroup"
	"github.com/weirflow/weir/pkg/record"
)

// An emitted record keeps the tenant of what the operator handles: a
// re-keyed record is scoped again, a timer's output takes the key's
// tenant, and a record put under another tenant's key (poison: a key that
// holds the separator is ambiguous), or given another tenant, is refused.
func TestEmittedRecordsStayInTheirTenant(t *testing.T) {
	rn := &run{rt: &Runtime{cfg: Config{Operator: "op"}}, plan: plan{tenantScoped: true}}
	handling := func(rec record.Record, key []byte) *env {
		return &env{s: &step{run: rn}, rec: rec, key: key}
	}
	acme := handling(record.Record{Kind: record.Data, Tenant: "acme", Key: keygroup.Scoped("acme", []byte("k"))}, keygroup.Scoped("acme", []byte("k")))
	timer := handling(record.Record{}, keygroup.Scoped("acme", []byte("k")))
	for _, c := range []struct {
		name    string
		c       *env
		r       record.Record
		wantKey string
		wantErr string
	}{
		{"re-keyed", acme, record.Record{Key: []byte("bidder-1")}, "acme\x1ebidder-1", ""},
		{"same key", acme, record.Record{Key: keygroup.Scoped("acme", []byte("k"))}, "acme\x1ek", ""},
		{"from a timer", timer, record.Record{Key: []byte("k2")}, "acme\x1ek2", ""},
		{"another tenant's key", acme, record.Record{Key: keygroup.Scoped("globex", []byte("k"))}, "", `under key "globex\x1ek", which holds the byte 0x1e`},
		{"another tenant", acme, record.Record{Key: []byte("k"), Tenant: "globex"}, "", `record of tenant "globex" while handling tenant "acme"`},
	} {
		r := c.r
		err := c.c.tenanted(&r)
		switch {
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: %v, want an error saying %s", c.name, err, c.wantErr)
		case c.wantErr == "" && (err != nil || string(r.Key) != c.wantKey || r.Tenant != "acme"):
			t.Errorf("%s: key %q tenant %q, %v; want key %q of acme", c.name, r.Key, r.Tenant, err, c.wantKey)
		}
	}
}
