package store

import (
	"encoding/json"
	"fmt"
)

// CheckEvent validates an event for Append, the same way on every backend:
// a known kind, a message exactly on message events with a valid role, data
// that is JSON, a ref of at most 256 bytes.
func CheckEvent(ev Event) error {
	if !ev.Kind.Valid() {
		return fmt.Errorf("%w: unknown kind %q", ErrInvalid, ev.Kind)
	}
	if (ev.Kind == KindMessage) != (ev.Message != nil) {
		return fmt.Errorf("%w: a message event needs a message, other kinds none", ErrInvalid)
	}
	if ev.Message != nil && !ev.Message.Role.Valid() {
		return fmt.Errorf("%w: unknown role %q", ErrInvalid, ev.Message.Role)
	}
	if len(ev.Data) > 0 && !json.Valid(ev.Data) {
		return fmt.Errorf("%w: event data is not valid JSON", ErrInvalid)
	}
	if len(ev.Ref) > 256 {
		return fmt.Errorf("%w: ref longer than 256 bytes", ErrInvalid)
	}
	return nil
}

// CheckSearch validates an archive query's tenant and filters.
func CheckSearch(tenant string, q SearchQuery) error {
	if err := CheckScope(tenant, "-"); err != nil {
		return err
	}
	if len(q.Thread) > 256 || len(q.Tool) > 256 {
		return fmt.Errorf("%w: thread or tool filter too long", ErrInvalid)
	}
	if q.Role != "" && !q.Role.Valid() {
		return fmt.Errorf("%w: unknown role %q", ErrInvalid, q.Role)
	}
	if q.FromSeq < 0 || q.ToSeq < 0 {
		return fmt.Errorf("%w: negative seq bound", ErrInvalid)
	}
	return nil
}
