package recall

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
)

// Unit is what Read's offset and limit count.
type Unit string

// Read units. A message is read by lines unless it is a single line longer
// than DefaultReadBytes, or has a line longer than MaxPageBytes: then by
// bytes, so that any payload,
// a one-line JSON document included, can be paged through and reassembled
// exactly.
const (
	Lines Unit = "lines"
	Bytes Unit = "bytes"
)

// Read limits.
const (
	DefaultReadLines = 200
	MaxReadLines     = 2000
	DefaultReadBytes = 8000
	// MinReadBytes: a smaller byte limit (such as a line count given for a
	// message read by bytes) is raised to it.
	MinReadBytes = 1000
	// MaxPageBytes bounds one page's text, lines or bytes.
	MaxPageBytes = 32000
)

// MessagePage is one page of a message read by ref.
type MessagePage struct {
	Ref    string       `json:"ref"`
	Thread string       `json:"thread"`
	Seq    int64        `json:"seq"`
	Role   message.Role `json:"role"`
	Tool   string       `json:"tool,omitempty"`
	Unit   Unit         `json:"unit"`
	// Offset is the first line (from 1) or the first byte (from 0) of Text;
	// End the last line (inclusive) or the byte after Text.
	Offset int `json:"offset"`
	End    int `json:"end"`
	// Total is the message's size in Unit; Size in bytes.
	Total int `json:"total"`
	Size  int `json:"size"`
	// Text is the page: lines joined by "\n", or a run of bytes cut on
	// character boundaries. Concatenating the pages (with "\n" between
	// line pages) gives back the message's text exactly.
	Text string `json:"text"`
	// Next is the offset of the next page, 0 after the last one.
	Next int `json:"next,omitempty"`
}

// Read returns one page of the message named by ref. thread "" allows any
// thread of the tenant; otherwise a ref of another thread is
// store.ErrNotFound, as is one of another tenant (I8). offset <= 0 and
// limit <= 0 mean the start and the default page size. An offset past the
// end gives an empty page with Total set.
func Read(ctx context.Context, log store.Log, tenant, thread, ref string, offset, limit int) (MessagePage, error) {
	if ref == "" || len(ref) > 256 {
		return MessagePage{}, store.ErrNotFound
	}
	th, ev, err := log.EventByRef(ctx, tenant, ref)
	if err != nil {
		return MessagePage{}, err
	}
	if (thread != "" && th != thread) || ev.Message == nil {
		return MessagePage{}, store.ErrNotFound
	}
	text := ev.Message.PlainText()
	p := MessagePage{Ref: ref, Thread: th, Seq: ev.Seq, Role: ev.Message.Role, Tool: backend.ToolOf(*ev.Message, nil), Size: len(text)}
	if unitOf(text) == Bytes {
		readBytes(&p, text, offset, limit)
	} else {
		readLines(&p, text, offset, limit)
	}
	return p, nil
}

func unitOf(text string) Unit {
	if !strings.Contains(text, "\n") {
		// A short one-liner is one line: offset 1 reads it whole, as a
		// model that thinks in lines expects.
		if len(text) <= DefaultReadBytes {
			return Lines
		}
		return Bytes
	}
	for line := range strings.SplitSeq(text, "\n") {
		if len(line) > MaxPageBytes {
			return Bytes
		}
	}
	return Lines
}

func readLines(p *MessagePage, text string, offset, limit int) {
	lines := strings.Split(text, "\n")
	p.Unit, p.Total = Lines, len(lines)
	offset = max(offset, 1)
	if limit <= 0 {
		limit = DefaultReadLines
	}
	limit = min(limit, MaxReadLines)
	p.Offset = offset
	if offset > len(lines) {
		p.End = offset - 1
		return
	}
	end, size := offset-1, 0
	for end < len(lines) && end-offset+1 < limit {
		if end >= offset && size+1+len(lines[end]) > MaxPageBytes {
			break
		}
		size += len(lines[end]) + 1
		end++
	}
	p.End = end
	p.Text = strings.Join(lines[offset-1:end], "\n")
	if end < len(lines) {
		p.Next = end + 1
	}
}

func readBytes(p *MessagePage, text string, offset, limit int) {
	p.Unit, p.Total = Bytes, len(text)
	offset = max(offset, 0)
	if limit <= 0 {
		limit = DefaultReadBytes
	}
	limit = min(max(limit, MinReadBytes), MaxPageBytes)
	if offset >= len(text) {
		p.Offset, p.End = offset, offset
		return
	}
	for offset > 0 && !utf8.RuneStart(text[offset]) {
		offset--
	}
	end := min(len(text), offset+limit)
	for end < len(text) && end > offset && !utf8.RuneStart(text[end]) {
		end--
	}
	p.Offset, p.End, p.Text = offset, end, text[offset:end]
	if end < len(text) {
		p.Next = end
	}
}

// Render formats the page as a tool result: one header line saying what
// this is and how to read on, then the text exactly.
func (p MessagePage) Render() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[mneme_read ref %s (seq %d, %s", p.Ref, p.Seq, p.Role)
	if p.Tool != "" {
		fmt.Fprintf(&b, ", tool %s", p.Tool)
	}
	b.WriteString("): ")
	switch {
	case p.Unit == Lines && p.Offset > p.Total:
		fmt.Fprintf(&b, "offset %d is past the end: %d lines in total", p.Offset, p.Total)
	case p.Unit == Bytes && p.Offset >= p.Total:
		fmt.Fprintf(&b, "offset %d is past the end: %d bytes in total", p.Offset, p.Total)
	case p.Unit == Lines:
		fmt.Fprintf(&b, "lines %d-%d of %d (%d bytes)", p.Offset, p.End, p.Total, p.Size)
	default:
		fmt.Fprintf(&b, "bytes %d-%d of %d (one line, read by bytes)", p.Offset, p.End, p.Total)
	}
	if p.Next > 0 {
		fmt.Fprintf(&b, "; next page: mneme_read(ref=%q, offset=%d)]", p.Ref, p.Next)
	} else {
		b.WriteString("; end]")
	}
	if p.Text != "" {
		b.WriteByte('\n')
		b.WriteString(p.Text)
	}
	return b.String()
}
