package recall_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/recall"
	"github.com/mnemehq/mneme/store"
)

// readAll pages through a ref with the given limit and reassembles it.
func readAll(t *testing.T, s store.Store, ref string, limit int) (string, []recall.MessagePage) {
	t.Helper()
	var pages []recall.MessagePage
	offset := 0
	for range 10000 {
		p, err := recall.Read(context.Background(), s, "a", "t", ref, offset, limit)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, p)
		if p.Next == 0 {
			break
		}
		if p.Next <= offset {
			t.Fatalf("no progress: offset %d next %d", offset, p.Next)
		}
		offset = p.Next
	}
	sep := ""
	if pages[0].Unit == recall.Lines {
		sep = "\n"
	}
	var parts []string
	for _, p := range pages {
		parts = append(parts, p.Text)
	}
	return strings.Join(parts, sep), pages
}

func TestReadPagesReassemble(t *testing.T) {
	var multi strings.Builder
	for i := range 1234 {
		fmt.Fprintf(&multi, "line %d: héllo wörld ✓\n", i+1)
	}
	var oneLine strings.Builder
	oneLine.WriteString(`{"items":[`)
	for i := range 3000 {
		if i > 0 {
			oneLine.WriteByte(',')
		}
		fmt.Fprintf(&oneLine, `{"id":"INV-%d","name":"naïve café ☕ %d"}`, i, i)
	}
	oneLine.WriteString(`]}`)
	var longLine strings.Builder
	longLine.WriteString("short first line\n")
	longLine.WriteString(strings.Repeat("é", 40000)) // 80,000 bytes on one line
	longLine.WriteString("\nlast")

	tests := []struct {
		name  string
		body  string
		limit int
		unit  recall.Unit
		pages int // at least
	}{
		{"lines", multi.String(), 100, recall.Lines, 13},
		{"lines default limit", multi.String(), 0, recall.Lines, 7},
		{"one-line JSON by bytes", oneLine.String(), 5000, recall.Bytes, 20},
		{"line count given for a one-line payload", oneLine.String(), 200, recall.Bytes, 100},
		{"a line longer than a page", longLine.String(), 0, recall.Bytes, 10},
		{"short one-liner is one line", "just this", 0, recall.Lines, 1},
		{"empty lines kept", "\n\na\n\n", 2, recall.Lines, 3},
	}
	backends(t, func(t *testing.T, s store.Store) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				evs := appendAll(t, s, "a", "t", msg(message.NewToolResult("c", tc.body)))
				got, pages := readAll(t, s, evs[0].Ref, tc.limit)
				if got != tc.body {
					t.Fatalf("reassembled %d bytes differ from the %d original", len(got), len(tc.body))
				}
				if len(pages) < tc.pages || pages[0].Unit != tc.unit {
					t.Fatalf("%d pages of %s, want at least %d of %s", len(pages), pages[0].Unit, tc.pages, tc.unit)
				}
				for _, p := range pages {
					if p.Size != len(tc.body) || len(p.Text) > recall.MaxPageBytes {
						t.Fatalf("page %+v: size %d, text %d bytes", p.Unit, p.Size, len(p.Text))
					}
				}
			})
		}
	})
}

func TestReadEdges(t *testing.T) {
	backends(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		evs := appendAll(t, s, "a", "t", msg(message.NewToolResult("c", "a\nb\nc")),
			store.Event{Kind: store.KindNote, Data: []byte(`{}`)})
		p, err := recall.Read(ctx, s, "a", "t", evs[0].Ref, 99, 10)
		if err != nil || p.Text != "" || p.Total != 3 || p.Next != 0 {
			t.Errorf("past the end: %+v %v", p, err)
		}
		if !strings.Contains(p.Render(), "past the end: 3 lines") {
			t.Errorf("render: %q", p.Render())
		}
		p, _ = recall.Read(ctx, s, "a", "t", evs[0].Ref, 2, 1)
		if p.Text != "b" || p.Next != 3 || p.Offset != 2 || p.End != 2 {
			t.Errorf("middle line: %+v", p)
		}
		r := p.Render()
		if !strings.HasPrefix(r, "[mneme_read ref "+evs[0].Ref) || !strings.HasSuffix(r, "]\nb") || !strings.Contains(r, "offset=3") {
			t.Errorf("render: %q", r)
		}
		for _, ref := range []string{"", "m_nope", strings.Repeat("x", 300)} {
			if _, err := recall.Read(ctx, s, "a", "t", ref, 0, 0); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("ref %.20q: %v", ref, err)
			}
		}
	})
}
