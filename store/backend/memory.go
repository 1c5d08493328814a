package backend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mnemehq/mneme/store"
)

// Helpers for the long-term memory store shared by every backend.

// NamespaceSep terminates each element of a joined namespace. Namespace
// elements may not contain control characters, so the joined form is
// unambiguous, and a namespace P is a prefix of N (element-wise) exactly when
// JoinNamespace(P) is a byte prefix of JoinNamespace(N): ["a","b"] is under
// ["a"], ["ab"] is not.
const NamespaceSep = "\x1f"

// CheckNamespace validates a namespace: at least one element unless
// allowEmpty (a search prefix may be empty: everything), each element
// non-empty, valid UTF-8 without control characters, at most 256 bytes.
func CheckNamespace(ns []string, allowEmpty bool) error {
	if len(ns) == 0 && !allowEmpty {
		return fmt.Errorf("%w: empty namespace", store.ErrInvalid)
	}
	if len(ns) > 32 {
		return fmt.Errorf("%w: namespace deeper than 32", store.ErrInvalid)
	}
	for _, e := range ns {
		if e == "" || len(e) > 256 || !utf8.ValidString(e) || strings.ContainsFunc(e, unicode.IsControl) {
			return fmt.Errorf("%w: namespace element %q: empty, too long or with control characters", store.ErrInvalid, e)
		}
	}
	return nil
}

// JoinNamespace returns the namespace's storage form (see NamespaceSep).
func JoinNamespace(ns []string) string {
	var b strings.Builder
	for _, e := range ns {
		b.WriteString(e)
		b.WriteString(NamespaceSep)
	}
	return b.String()
}

// NamespaceRange returns the byte range [lo, hi) that holds the joined
// form of every namespace under prefix, for a range scan over a sorted
// column: hi is lo with its final separator incremented. Both are "" for
// the empty prefix (everything).
func NamespaceRange(prefix []string) (lo, hi string) {
	lo = JoinNamespace(prefix)
	if lo == "" {
		return "", ""
	}
	return lo, lo[:len(lo)-1] + string(rune(NamespaceSep[0]+1))
}

// SplitNamespace inverts JoinNamespace.
func SplitNamespace(s string) []string {
	return strings.Split(strings.TrimSuffix(s, NamespaceSep), NamespaceSep)
}

// CheckItem validates an item for PutMemory.
func CheckItem(tenant string, it store.Memory) error {
	if tenant == "" || len(tenant) > 256 {
		return fmt.Errorf("%w: empty or oversized tenant", store.ErrInvalid)
	}
	if err := CheckNamespace(it.Namespace, false); err != nil {
		return err
	}
	if err := CheckText("tenant", tenant); err != nil {
		return err
	}
	for _, seg := range it.Namespace {
		if err := CheckText("namespace", seg); err != nil {
			return err
		}
	}
	if err := CheckText("key", it.Key); err != nil {
		return err
	}
	if err := CheckJSONText("value", it.Value); err != nil {
		return err
	}
	return CheckKey(it.Key, it.Value)
}

// CheckItemRef validates the tenant, namespace and key that name one item,
// for GetMemory and DeleteMemory.
func CheckItemRef(tenant string, namespace []string, key string) error {
	if err := CheckScope(tenant, "-"); err != nil {
		return err
	}
	if err := CheckNamespace(namespace, false); err != nil {
		return err
	}
	return CheckKey(key, nil)
}

// CheckMemoryQuery validates a memory search's tenant, prefix and offset,
// and compiles its filter.
func CheckMemoryQuery(tenant string, q store.MemoryQuery) (Filter, error) {
	if err := CheckScope(tenant, "-"); err != nil {
		return Filter{}, err
	}
	if err := CheckNamespace(q.Prefix, true); err != nil {
		return Filter{}, err
	}
	if q.Offset < 0 {
		return Filter{}, fmt.Errorf("%w: negative offset", store.ErrInvalid)
	}
	return CompileFilter(q.Filter)
}

// CheckKey validates an item key and, when value is not nil, its value.
func CheckKey(key string, value json.RawMessage) error {
	if key == "" || len(key) > 1024 || !utf8.ValidString(key) {
		return fmt.Errorf("%w: empty, oversized or non-UTF-8 memory key", store.ErrInvalid)
	}
	if value != nil && !json.Valid(value) {
		return fmt.Errorf("%w: memory value is not valid JSON", store.ErrInvalid)
	}
	return nil
}

// MemoryText returns what memory search indexes for an item: its key and
// every string and number in its value (not the object keys, which every
// item of a schema shares).
func MemoryText(key string, value json.RawMessage) string {
	var b strings.Builder
	b.WriteString(key)
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) == nil {
		writeLeaves(&b, v)
	}
	return b.String()
}

func writeLeaves(b *strings.Builder, v any) {
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case json.Number:
		s = v.String()
	case []any:
		for _, e := range v {
			writeLeaves(b, e)
		}
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			writeLeaves(b, v[k])
		}
	}
	if s != "" {
		b.WriteByte('\n')
		b.WriteString(s)
	}
}

// Filter is a compiled MemoryQuery.Filter: equality on top-level fields of
// an object value, numbers compared by value (1 equals 1.0).
type Filter struct {
	keys []string
	want map[string]any
}

// CompileFilter normalises a filter; ErrInvalid if a value is not JSON.
func CompileFilter(f map[string]any) (Filter, error) {
	c := Filter{want: map[string]any{}}
	for k, v := range f {
		raw, err := json.Marshal(v)
		if err != nil {
			return Filter{}, fmt.Errorf("%w: filter %q: %v", store.ErrInvalid, k, err)
		}
		var n any
		if err := json.Unmarshal(raw, &n); err != nil {
			return Filter{}, fmt.Errorf("%w: filter %q: %v", store.ErrInvalid, k, err)
		}
		c.keys = append(c.keys, k)
		c.want[k] = n
	}
	sort.Strings(c.keys)
	return c, nil
}

// Match reports whether value, a JSON object, has every filtered field.
func (f Filter) Match(value json.RawMessage) bool {
	if len(f.keys) == 0 {
		return true
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(value, &obj) != nil {
		return false
	}
	for _, k := range f.keys {
		raw, ok := obj[k]
		if !ok {
			return false
		}
		var got any
		if json.Unmarshal(raw, &got) != nil || !reflect.DeepEqual(got, f.want[k]) {
			return false
		}
	}
	return true
}

// Expired reports whether an item with this expiry is gone at now.
func Expired(expires, now time.Time) bool {
	return !expires.IsZero() && !now.Before(expires)
}

// EncodeCursor and DecodeCursor make the opaque Threads cursor: the last
// row's updated time and id (keyset paging, newest first).
func EncodeCursor(updated time.Time, id string) string {
	return strconv.FormatInt(updated.UnixNano(), 36) + "." + id
}

// DecodeCursor parses a cursor from EncodeCursor; ErrInvalid if malformed.
func DecodeCursor(c string) (updated time.Time, id string, err error) {
	ts, id, ok := strings.Cut(c, ".")
	n, perr := strconv.ParseInt(ts, 36, 64)
	if !ok || perr != nil || id == "" {
		return time.Time{}, "", fmt.Errorf("%w: bad cursor", store.ErrInvalid)
	}
	return time.Unix(0, n).UTC(), id, nil
}
