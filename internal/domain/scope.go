package domain

import "strings"

// API-key tenants (configured in YAML) share one store. Their jobs and pools
// are kept apart by scoping the caller-chosen names with the tenant's name:
// the stored user_id is "<tenant>\x1f<user_id>" and a pool id
// "<tenant>\x1f<pool_id>". The separator is a control character, which
// caller-supplied names may not contain, so two tenants' names can never
// collide, and idempotency — the unique (user_id, idempotent_key) — is per
// tenant. Without tenants nothing is scoped.
const scopeSep = "\x1f"

// Scope returns name scoped to tenant ("" tenant: name unchanged).
func Scope(tenant, name string) string {
	if tenant == "" {
		return name
	}
	return tenant + scopeSep + name
}

// Unscope splits a stored name into its tenant ("" when unscoped) and the
// name the tenant chose.
func Unscope(stored string) (tenant, name string) {
	if t, n, ok := strings.Cut(stored, scopeSep); ok {
		return t, n
	}
	return "", stored
}

// TenantOfJob returns the API-key tenant a job belongs to ("" without
// tenants).
func TenantOfJob(j *Job) string {
	t, _ := Unscope(j.UserID)
	return t
}

// Display returns j as its tenant sees it: user_id and pool_id without the
// tenant scope. j is not modified.
func (j *Job) Display() *Job {
	_, u := Unscope(j.UserID)
	_, p := Unscope(j.PoolID)
	if u == j.UserID && p == j.PoolID {
		return j
	}
	c := *j
	c.UserID, c.PoolID = u, p
	return &c
}
