package store

// Size is the page size every backend serves for p: Limit, DefaultPageSize
// when it is unset, never more than MaxPageSize.
func (p Page) Size() int {
	if p.Limit <= 0 {
		return DefaultPageSize
	}
	return min(p.Limit, MaxPageSize)
}

// Page sizes of Threads.
const (
	DefaultPageSize = 50
	MaxPageSize     = 1000
)
