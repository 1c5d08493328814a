package store

import "context"

// TenantLister is an optional interface of a Store that can enumerate its
// tenants, for administrative tools that work on a whole store (`mneme
// migrate --all-tenants`). It is deliberately not part of Store: nothing a
// tenant's request does may depend on other tenants existing (I8).
type TenantLister interface {
	// Tenants returns every tenant that has a thread or a memory item, in
	// byte order.
	Tenants(ctx context.Context) ([]string, error)
}
