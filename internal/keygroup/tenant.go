package keygroup

import "bytes"

// tenantMark separates a tenant from the key in a tenant-scoped key.
const tenantMark = 0x1e

// Scoped is the key of a record of tenant under a contract whose keys are
// tenant-scoped (state.tenant_scoped): the tenant, the byte 0x1e, the
// key. Two tenants' equal keys are two keys — two states, two windows,
// perhaps two key groups — however often the records are re-keyed, and a
// split key keeps its tenant (the salt goes after the key).
func Scoped(tenant string, key []byte) []byte {
	out := make([]byte, 0, len(tenant)+1+len(key))
	return append(append(append(out, tenant...), tenantMark), key...)
}

// TenantOf is the tenant of a scoped key, and whether key is scoped.
func TenantOf(key []byte) (string, bool) {
	i := bytes.IndexByte(key, tenantMark)
	if i < 0 {
		return "", false
	}
	return string(key[:i]), true
}

// ValidTenant reports whether a tenant or a key can be part of a scoped
// key: without the byte 0x1e, which would make it ambiguous.
func ValidTenant(s []byte) bool { return bytes.IndexByte(s, tenantMark) < 0 }
