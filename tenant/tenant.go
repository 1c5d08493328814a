// Package tenant carries the tenant a request acts for through its
// context: the server's auth puts it there, and the proxy, the JSON API and
// MCP read it from there. It is the one place tenant identity lives, so
// that none of those packages depends on another for it.
package tenant

import "context"

// Default owns everything when the server runs without auth.
const Default = "default"

type key struct{}

// With returns ctx carrying tenant.
func With(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, key{}, tenant)
}

// Of returns the tenant ctx carries, Default when none.
func Of(ctx context.Context) string {
	if t, ok := ctx.Value(key{}).(string); ok && t != "" {
		return t
	}
	return Default
}
