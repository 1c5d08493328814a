package proxy

import (
	"bytes"
	"encoding/json"
	"slices"

	"github.com/mnemehq/mneme/message"
)

// maxBreakpoints is how many blocks of one Messages request may carry
// cache_control (the API answers 400 beyond).
const maxBreakpoints = 4

// cacheControlKey is the block member that marks an Anthropic breakpoint.
const cacheControlKey = "cache_control"

// ephemeral is the cache_control Mneme's own breakpoint carries.
var ephemeral = json.RawMessage(`{"type":"ephemeral"}`)

// placeBreakpoints makes Mneme the owner of the Anthropic cache breakpoints
// of the window it sends. The log keeps each block's cache_control from
// the request that first carried it, so the window holds the breakpoints
// of every earlier request: they are all dropped. Then at most
// maxBreakpoints (less those the request's tools carry) are set:
//
//   - Mneme's own, on the newest block of the window: between compactions
//     the window only grows at its end, so the next call's prefix holds this
//     one whole and the provider's cache hits;
//   - the client's breakpoints of this request (clientMarks), each on the
//     newest window block that is the same block, newest first; one whose
//     block left the window is dropped.
//
// win is not modified: the parts that change are copies.
func placeBreakpoints(win []message.Message, clientMarks []breakpoint, toolMarks int) []message.Message {
	out := make([]message.Message, len(win))
	copy(out, win)
	owned := make([]bool, len(out)) // out[i] is a copy, free to change
	for i := range out {
		if hasCacheControl(out[i].Parts) {
			out[i], owned[i] = out[i].Clone(), true
			out[i].Parts = stripCacheControl(out[i].Parts)
		}
	}
	room := maxBreakpoints - toolMarks
	type pos struct{ msg, part int }
	marked := map[pos]bool{}
	mark := func(p pos, cc json.RawMessage) {
		if room <= 0 || marked[p] {
			return
		}
		if !owned[p.msg] {
			out[p.msg], owned[p.msg] = out[p.msg].Clone(), true
		}
		out[p.msg].Parts[p.part] = withCacheControl(out[p.msg].Parts[p.part], cc)
		marked[p] = true
		room--
	}
	// Mneme's breakpoint: the last block that can carry one.
	for i := len(out) - 1; i >= 0; i-- {
		if j := lastCacheable(out[i].Parts); j >= 0 {
			mark(pos{i, j}, ephemeral)
			break
		}
	}
	// The client's, newest first, each on the newest block equal to it.
	for k := len(clientMarks) - 1; k >= 0 && room > 0; k-- {
		bp := clientMarks[k]
	find:
		for i := len(out) - 1; i >= 0; i-- {
			if out[i].Role != bp.role {
				continue
			}
			for j := len(out[i].Parts) - 1; j >= 0; j-- {
				if cacheable(out[i].Parts[j]) && bytes.Equal(partKey(out[i].Parts[j]), bp.key) {
					mark(pos{i, j}, bp.cc)
					break find
				}
			}
		}
	}
	return out
}

// breakpoint is a block of the client's request that carries cache_control:
// the role of its message, the block without the marker, and the marker.
type breakpoint struct {
	role message.Role
	key  []byte
	cc   json.RawMessage
}

// clientBreakpoints lists the breakpoints of the request's conversation
// (its system field first), in request order.
func clientBreakpoints(msgs []message.Message) []breakpoint {
	var bps []breakpoint
	for _, m := range msgs {
		for _, p := range m.Parts {
			if cc := cacheControlOf(p); cc != nil {
				bps = append(bps, breakpoint{role: m.Role, key: partKey(p), cc: cc})
			}
		}
	}
	return bps
}

// countToolBreakpoints counts the tool definitions that carry cache_control.
func countToolBreakpoints(tools []json.RawMessage) int {
	n := 0
	for _, t := range tools {
		var v map[string]json.RawMessage
		if json.Unmarshal(t, &v) == nil && v[cacheControlKey] != nil && string(v[cacheControlKey]) != "null" {
			n++
		}
	}
	return n
}

// cacheable reports whether the API takes cache_control on part p: not on
// thinking blocks, nor on an empty text.
func cacheable(p message.Part) bool {
	switch p.Type {
	case message.Text:
		return p.Text != ""
	case message.Image, message.ToolCall, message.ToolResult:
		return true
	case message.Opaque:
		return len(p.Raw) > 0 && p.Raw[0] == '{' && p.Wire.Type != "thinking" && p.Wire.Type != "redacted_thinking"
	}
	return false
}

func lastCacheable(ps []message.Part) int {
	for j := len(ps) - 1; j >= 0; j-- {
		if cacheable(ps[j]) {
			return j
		}
	}
	return -1
}

func hasCacheControl(ps []message.Part) bool {
	for _, p := range ps {
		if cacheControlOf(p) != nil || hasCacheControl(p.Content) {
			return true
		}
	}
	return false
}

// cacheControlOf returns the part's cache_control, nil when it has none.
func cacheControlOf(p message.Part) json.RawMessage {
	if p.Type == message.Opaque {
		var v map[string]json.RawMessage
		if json.Unmarshal(p.Raw, &v) != nil {
			return nil
		}
		return nonNull(v[cacheControlKey])
	}
	return nonNull(p.Wire.Extra[cacheControlKey])
}

func nonNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

// stripCacheControl returns ps without any cache_control, in tool results'
// content too; ps must be a copy the caller owns.
func stripCacheControl(ps []message.Part) []message.Part {
	for i := range ps {
		ps[i] = withCacheControl(ps[i], nil)
		if len(ps[i].Content) > 0 {
			ps[i].Content = stripCacheControl(ps[i].Content)
		}
	}
	return ps
}

// withCacheControl returns p with cache_control set to cc (removed for nil).
func withCacheControl(p message.Part, cc json.RawMessage) message.Part {
	if p.Type == message.Opaque {
		var v map[string]json.RawMessage
		d := json.NewDecoder(bytes.NewReader(p.Raw))
		d.UseNumber()
		if d.Decode(&v) != nil {
			return p
		}
		if _, had := v[cacheControlKey]; !had && cc == nil {
			return p
		}
		if cc == nil {
			delete(v, cacheControlKey)
		} else {
			v[cacheControlKey] = cc
		}
		if b, err := json.Marshal(v); err == nil {
			p.Raw = b
		}
		return p
	}
	if _, had := p.Wire.Extra[cacheControlKey]; !had && cc == nil {
		return p
	}
	extra := make(map[string]json.RawMessage, len(p.Wire.Extra)+1)
	for k, v := range p.Wire.Extra {
		if k != cacheControlKey {
			extra[k] = v
		}
	}
	if cc != nil {
		extra[cacheControlKey] = cc
	}
	if len(extra) == 0 {
		extra = nil
	}
	p.Wire.Extra = extra
	return p
}

// partKey is what identifies a block whatever its breakpoint: the part
// without cache_control, in a deterministic encoding.
func partKey(p message.Part) []byte {
	p = withCacheControl(p, nil)
	if len(p.Content) > 0 {
		p.Content = stripCacheControl(slices.Clone(p.Content))
	}
	b, _ := json.Marshal(p)
	return b
}
