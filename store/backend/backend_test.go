package backend

import (
	"errors"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/store"
)

func TestNamespace(t *testing.T) {
	for _, ns := range [][]string{{"a"}, {"a", "b"}, {"a b", "ü", "🙂"}} {
		if got := SplitNamespace(JoinNamespace(ns)); strings.Join(got, "|") != strings.Join(ns, "|") {
			t.Errorf("round trip %q = %q", ns, got)
		}
	}
	under := func(ns, p []string) bool { return strings.HasPrefix(JoinNamespace(ns), JoinNamespace(p)) }
	if !under([]string{"a", "b"}, []string{"a"}) || under([]string{"ab"}, []string{"a"}) || under([]string{"a"}, []string{"a", "b"}) {
		t.Error("prefix semantics broken")
	}
	for _, bad := range [][]string{nil, {""}, {"a\x1fb"}, {"a\nb"}, {"\xff"}} {
		if err := CheckNamespace(bad, false); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("CheckNamespace(%q) = %v", bad, err)
		}
	}
}

func TestFilter(t *testing.T) {
	v := []byte(`{"kind":"billing","n":2,"ok":true,"tags":["a","b"],"o":{"x":1}}`)
	cases := []struct {
		f    map[string]any
		want bool
	}{
		{nil, true},
		{map[string]any{"kind": "billing"}, true},
		{map[string]any{"kind": "other"}, false},
		{map[string]any{"n": 2}, true},
		{map[string]any{"n": 2.0}, true},
		{map[string]any{"n": "2"}, false},
		{map[string]any{"ok": true}, true},
		{map[string]any{"tags": []string{"a", "b"}}, true},
		{map[string]any{"o": map[string]int{"x": 1}}, true},
		{map[string]any{"missing": nil}, false},
	}
	for _, c := range cases {
		f, err := CompileFilter(c.f)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Match(v); got != c.want {
			t.Errorf("filter %v = %v, want %v", c.f, got, c.want)
		}
	}
	f, _ := CompileFilter(map[string]any{"kind": "billing"})
	if f.Match([]byte(`"billing"`)) {
		t.Error("a non-object value matched a filter")
	}
	if _, err := CompileFilter(map[string]any{"ch": make(chan int)}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("unencodable filter: %v", err)
	}
}
