package erasure

import (
	"errors"
	"fmt"

	"github.com/weirflow/weir/contracts"
	"github.com/weirflow/weir/internal/keygroup"
)

var (
	// ErrTenantNeeded: under tenant-scoped keys a key alone names no
	// state — each tenant's records of it are a key of their own — so an
	// erasure of a key names its tenant too.
	ErrTenantNeeded = errors.New("erasure: the contract scopes keys by tenant, so a key is erased with its tenant")
	// ErrNotTenantScoped: a tenant is named on a contract whose keys do
	// not carry their tenant, so nothing could be found by it.
	ErrNotTenantScoped = errors.New("erasure: the contract does not scope keys by tenant")
	// ErrNoTarget: a request names neither a key nor a tenant.
	ErrNoTarget = errors.New("erasure: a request names a key, a tenant, or both")
)

// Target is the request that erases key, tenant, or tenant's key, as the
// records of contract c carry them: under tenant-scoped keys
// (state.tenant_scoped) a tenant's key is the qualified key
// (keygroup.Scoped) — the one state, views and records hold, and the one
// the registry entry and the audit digest name — and a key alone is
// refused (ErrTenantNeeded), since it names none of them; a tenant alone
// erases every key of it. On any other contract a tenant is refused
// (ErrNotTenantScoped).
func Target(c *contracts.Contract, tenant, key string) (Request, error) {
	switch {
	case tenant == "" && key == "":
		return Request{}, ErrNoTarget
	case tenant != "" && !c.State.TenantScoped:
		return Request{}, fmt.Errorf("%w (state.tenant_scoped in %s): no key names its tenant, so tenant %q finds none; erase by -key alone", ErrNotTenantScoped, c.File, tenant)
	case !c.State.TenantScoped:
		return Request{Key: []byte(key)}, nil
	case tenant == "":
		return Request{}, fmt.Errorf("%w (state.tenant_scoped in %s): every tenant's records of key %q are a key of their own, and a key alone erases none of them; name the tenant: -tenant T -key K (or -tenant T alone for all its keys)", ErrTenantNeeded, c.File, key)
	case !keygroup.ValidTenant([]byte(tenant)) || !keygroup.ValidTenant([]byte(key)):
		return Request{}, fmt.Errorf("erasure: tenant %q or key %q holds the byte 0x1e, which no tenant-scoped key's tenant or key holds", tenant, key)
	case key == "":
		return Request{Tenant: tenant}, nil
	}
	return Request{Key: keygroup.Scoped(tenant, []byte(key))}, nil
}
