package backend

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/mnemehq/mneme/store"
)

// CheckEvent validates an event for Append, the same way on every backend:
// a known kind, a message exactly on message events with a valid role, data
// that is JSON, a ref of at most 256 bytes, and every string storable as it
// is (CheckText).
func CheckEvent(ev store.Event) error {
	if !ev.Kind.Valid() {
		return fmt.Errorf("%w: unknown kind %q", store.ErrInvalid, ev.Kind)
	}
	if (ev.Kind == store.KindMessage) != (ev.Message != nil) {
		return fmt.Errorf("%w: a message event needs a message, other kinds none", store.ErrInvalid)
	}
	if ev.Message != nil && !ev.Message.Role.Valid() {
		return fmt.Errorf("%w: unknown role %q", store.ErrInvalid, ev.Message.Role)
	}
	if len(ev.Data) > 0 && !json.Valid(ev.Data) {
		return fmt.Errorf("%w: event data is not valid JSON", store.ErrInvalid)
	}
	if len(ev.Ref) > 256 {
		return fmt.Errorf("%w: ref longer than 256 bytes", store.ErrInvalid)
	}
	if err := CheckText("ref", ev.Ref); err != nil {
		return err
	}
	// No control characters: a ref is a name, and SQLite keeps the refs it
	// makes under keys that begin with one (store/sqlite/refs.go).
	if strings.ContainsFunc(ev.Ref, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("%w: ref contains a control character", store.ErrInvalid)
	}
	if err := CheckJSONText("event data", ev.Data); err != nil {
		return err
	}
	if ev.Message != nil {
		return checkMessage(ev.Message)
	}
	return nil
}

// CheckSearch validates an archive query's tenant and filters.
func CheckSearch(tenant string, q store.SearchQuery) error {
	if err := CheckScope(tenant, "-"); err != nil {
		return err
	}
	if len(q.Thread) > 256 || len(q.Tool) > 256 {
		return fmt.Errorf("%w: thread or tool filter too long", store.ErrInvalid)
	}
	if q.Role != "" && !q.Role.Valid() {
		return fmt.Errorf("%w: unknown role %q", store.ErrInvalid, q.Role)
	}
	if q.FromSeq < 0 || q.ToSeq < 0 {
		return fmt.Errorf("%w: negative seq bound", store.ErrInvalid)
	}
	return nil
}

// CheckScope validates the tenant and thread every scoped call takes.
func CheckScope(tenant, thread string) error {
	if tenant == "" {
		return fmt.Errorf("%w: empty tenant", store.ErrInvalid)
	}
	if thread == "" {
		return fmt.Errorf("%w: empty thread id", store.ErrInvalid)
	}
	if len(thread) > 256 || len(tenant) > 256 {
		return fmt.Errorf("%w: tenant or thread id longer than 256 bytes", store.ErrInvalid)
	}
	if err := CheckText("tenant", tenant); err != nil {
		return err
	}
	return CheckText("thread id", thread)
}

// CheckLease validates the scope, name and owner of a lease call.
func CheckLease(tenant, thread, name, owner string) error {
	if err := CheckScope(tenant, thread); err != nil {
		return err
	}
	if name == "" || owner == "" || len(name) > 256 || len(owner) > 256 {
		return fmt.Errorf("%w: lease name and owner must be 1 to 256 bytes", store.ErrInvalid)
	}
	return nil
}

// CheckLeaseTTL validates TryLease's ttl: positive.
func CheckLeaseTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("%w: lease ttl must be positive", store.ErrInvalid)
	}
	return nil
}

// CheckVector validates one vector: a ref and a model name of sane size,
// 1 to MaxVectorDims finite components, not all zero (cosine needs a norm).
func CheckVector(v store.Vector) error {
	if v.Ref == "" || len(v.Ref) > 256 {
		return fmt.Errorf("%w: vector ref empty or longer than 256 bytes", store.ErrInvalid)
	}
	return checkVec(v.Model, v.V)
}

// CheckVectorQuery validates a vector search's tenant, model, vector and
// filters.
func CheckVectorQuery(tenant string, q store.VectorQuery) error {
	if err := CheckSearch(tenant, store.SearchQuery{Thread: q.Thread, Role: q.Role, Tool: q.Tool, FromSeq: q.FromSeq, ToSeq: q.ToSeq}); err != nil {
		return err
	}
	return checkVec(q.Model, q.V)
}

func checkVec(model string, v []float32) error {
	if model == "" || len(model) > maxModelBytes {
		return fmt.Errorf("%w: vector model empty or longer than %d bytes", store.ErrInvalid, maxModelBytes)
	}
	if len(v) == 0 || len(v) > store.MaxVectorDims {
		return fmt.Errorf("%w: vector has %d dimensions, want 1 to %d", store.ErrInvalid, len(v), store.MaxVectorDims)
	}
	var norm float64
	for _, x := range v {
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("%w: vector has a non-finite component", store.ErrInvalid)
		}
		norm += f * f
	}
	if norm == 0 {
		return fmt.Errorf("%w: zero vector", store.ErrInvalid)
	}
	return nil
}

// Cosine returns the cosine similarity of a and b (0 when either is zero
// or their lengths differ). Backends that compute it in Go share this one.
func Cosine(a, b []float32) float64 {
	if len(a) != len(b) {
		return 0
	}
	var dot, na, nb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		dot += x * y
		na += x * x
		nb += y * y
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}

// maxModelBytes bounds a vector model name.
const maxModelBytes = 256
