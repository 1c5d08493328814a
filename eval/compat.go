package eval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// CMFixture is a fixture of the Python context-manager library, as its
// suites write them. ImportContextManager maps it to a native Fixture.
type CMFixture struct {
	Name        string        `json:"name"`
	Description string        `json:"description,omitempty"`
	Config      CMConfig      `json:"config"`
	Turns       [][]CMMsg     `json:"turns"`
	Assertions  []CMAssertion `json:"assertions"`
}

// CMConfig is context-manager's trimming configuration.
type CMConfig struct {
	// TrimMode is "head_tail" (keep the first HeadMessages and the last
	// TailMessages) or "last_n" (keep the last KeepLastN).
	TrimMode          string `json:"trim_mode"`
	HeadMessages      int    `json:"head_messages,omitempty"`
	TailMessages      int    `json:"tail_messages,omitempty"`
	KeepLastN         int    `json:"keep_last_n,omitempty"`
	ToolPolicyEnabled bool   `json:"tool_policy_enabled,omitempty"`
	PreviewChars      int    `json:"preview_chars,omitempty"`
}

// CMMsg is one context-manager message.
type CMMsg struct {
	Role       string `json:"role"`
	Content    string `json:"content"`
	Name       string `json:"name,omitempty"`
	ToolCallID string `json:"tool_call_id,omitempty"`
}

// CMAssertion is one context-manager assertion; Value is a string or a
// number depending on Kind.
type CMAssertion struct {
	AfterTurn   int             `json:"after_turn"`
	Kind        string          `json:"kind"`
	Value       json.RawMessage `json:"value"`
	Description string          `json:"description,omitempty"`
}

// isContextManager recognises the context-manager format by its own keys.
func isContextManager(top map[string]json.RawMessage) bool {
	_, a := top["assertions"]
	_, c := top["config"]
	return a || c
}

// cmKinds maps context-manager assertion kinds to native check kinds.
var cmKinds = map[string]string{
	"content_in_hot":          KindWindowContains,
	"content_not_in_hot":      KindWindowExcludes,
	"content_recallable":      KindRecallable,
	"hot_chars_under":         KindWindowCharsAtMost,
	"archived_count_at_least": KindArchivedAtLeast,
}

// ImportContextManager maps a context-manager fixture to the native format.
// The mapping (documented in docs/fixtures.md):
//
//   - trim_mode head_tail: the head is pinned and compaction starts when the
//     window passes head_messages + tail_messages messages; last_n: the head
//     is not pinned and the trigger is keep_last_n messages. Mneme compacts
//     in steps on turn boundaries, so its window may keep a few messages more
//     than context-manager's did, never fewer than the tail it asked for.
//   - tool_policy_enabled: strategy mask (old tool results become one-line
//     placeholders with refs), else archive; preview_chars sets the preview
//     lines an evicted result keeps (80 characters a line).
//   - a turn's messages become one native turn. The Python format has no
//     tool calls: each tool message becomes a call (on the assistant message
//     before it, or a new one) and its result, paired by the message's
//     tool_call_id, or by an id made from its position when it has none
//     (the library's own fixtures carry only the tool's name).
//   - auto-recall is off: context-manager shows nothing of what left its
//     window until the agent searches.
//   - content_in_hot → window_contains, content_not_in_hot → window_excludes,
//     content_recallable → recallable (top 5, the value as query and
//     expectation), hot_chars_under → window_chars_at_most,
//     archived_count_at_least → archived_at_least.
func ImportContextManager(data []byte) (*Fixture, error) {
	var cf CMFixture
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cf); err != nil {
		return nil, fmt.Errorf("context-manager fixture: %w", err)
	}
	pol := map[string]any{}
	switch cf.Config.TrimMode {
	case "head_tail":
		if cf.Config.TailMessages < 1 {
			return nil, fmt.Errorf("context-manager fixture: head_tail needs tail_messages >= 1")
		}
		pol["pin_head"] = cf.Config.HeadMessages > 0
		pol["trigger"] = fmt.Sprintf("%d messages", cf.Config.HeadMessages+cf.Config.TailMessages+1)
		pol["target"] = fmt.Sprintf("%d messages", cf.Config.HeadMessages+cf.Config.TailMessages)
	case "last_n":
		if cf.Config.KeepLastN < 1 {
			return nil, fmt.Errorf("context-manager fixture: last_n needs keep_last_n >= 1")
		}
		pol["pin_head"] = false
		pol["trigger"] = fmt.Sprintf("%d messages", cf.Config.KeepLastN+1)
		pol["target"] = fmt.Sprintf("%d messages", cf.Config.KeepLastN)
	default:
		return nil, fmt.Errorf("context-manager fixture: unknown trim_mode %q (head_tail or last_n)", cf.Config.TrimMode)
	}
	// context-manager has no recalled block: what leaves its window is out
	// of it until searched, which its content_not_in_hot checks.
	pol["auto_recall"] = false
	pol["min_tail_turns"] = 1
	pol["min_tail_tokens"] = 0
	if cf.Config.ToolPolicyEnabled {
		pol["strategy"] = "mask"
		pol["mask_keep_per_tool"] = 1
	} else {
		pol["strategy"] = "archive"
	}
	if cf.Config.PreviewChars > 0 {
		pol["preview_lines"] = max(1, cf.Config.PreviewChars/80)
	}
	pj, err := json.Marshal(pol)
	if err != nil {
		return nil, err
	}
	f := &Fixture{Name: cf.Name, Description: cf.Description, Policy: pj, Source: "context-manager"}
	for i, turn := range cf.Turns {
		var out []map[string]any
		for j, m := range turn {
			if strings.EqualFold(m.Role, "tool") && m.ToolCallID == "" {
				// The library's own fixtures name the tool and give no
				// call id: one is made from the position, stable across runs.
				m.ToolCallID = fmt.Sprintf("cm_%d_%d", i+1, j+1)
			}
			o, err := cmMessage(m)
			if err != nil {
				return nil, fmt.Errorf("context-manager fixture: turn %d message %d: %w", i+1, j+1, err)
			}
			if o["role"] == "tool" {
				out = withCall(out, m)
			}
			out = append(out, o)
		}
		var t Turn
		for _, o := range out {
			raw, err := json.Marshal(o)
			if err != nil {
				return nil, err
			}
			t.Messages = append(t.Messages, raw)
		}
		f.Turns = append(f.Turns, t)
	}
	for i, a := range cf.Assertions {
		kind, ok := cmKinds[a.Kind]
		if !ok {
			return nil, fmt.Errorf("context-manager fixture: assertion %d: unknown kind %q", i+1, a.Kind)
		}
		arg := a.Value
		if kind == KindRecallable {
			var v string
			if err := json.Unmarshal(a.Value, &v); err != nil {
				return nil, fmt.Errorf("context-manager fixture: assertion %d: value: %w", i+1, err)
			}
			arg, _ = json.Marshal(Recall{Query: v, TopK: 5, Expect: v})
		}
		f.Checks = append(f.Checks, Check{AfterTurn: a.AfterTurn, Description: a.Description, Kind: kind, Arg: arg})
	}
	return f, nil
}

// cmMessage writes a context-manager message as an OpenAI chat message.
func cmMessage(m CMMsg) (map[string]any, error) {
	role := strings.ToLower(m.Role)
	switch role {
	case "system", "user", "assistant", "tool":
	default:
		return nil, fmt.Errorf("unknown role %q", m.Role)
	}
	o := map[string]any{"role": role, "content": m.Content}
	if m.Name != "" && role != "tool" {
		o["name"] = m.Name
	}
	if role == "tool" {
		if m.ToolCallID == "" {
			return nil, fmt.Errorf("a tool message needs tool_call_id")
		}
		o["tool_call_id"] = m.ToolCallID
	}
	return o, nil
}

// withCall makes sure the tool result m answers a call: context-manager's
// format has no tool calls, so the assistant message just before the result
// (or a new one, when the result follows another role) gets a call with
// the result's id and tool name.
func withCall(out []map[string]any, m CMMsg) []map[string]any {
	name := m.Name
	if name == "" {
		name = "tool"
	}
	call := map[string]any{"id": m.ToolCallID, "type": "function", "function": map[string]any{"name": name, "arguments": "{}"}}
	i := len(out) - 1
	for i >= 0 && out[i]["role"] == "tool" {
		i--
	}
	if i >= 0 && out[i]["role"] == "assistant" {
		calls, _ := out[i]["tool_calls"].([]any)
		out[i]["tool_calls"] = append(calls, call)
		return out
	}
	return append(out, map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{call}})
}
