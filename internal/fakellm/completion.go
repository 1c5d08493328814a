package fakellm

import (
	"net/http"
	"strings"
)

// answer is a reply resolved for one API: ids filled, stop reason and usage
// decided.
type answer struct {
	text  string
	calls []ToolCall
	stop  string
	in    int
	out   int
}

// resolve turns a scripted reply into the answer api sends. A text reply
// longer than the request's max_tokens (roughly counted) is cut to it and
// stops with "length"/"max_tokens", as a real model would, unless StopReason
// is set or the reply makes tool calls.
func resolve(api string, req Request, rep Reply) answer {
	a := answer{text: rep.Text}
	prefix := "call_"
	if api == APIAnthropic {
		prefix = "toolu_"
	}
	for _, c := range rep.ToolCalls {
		if c.ID == "" {
			c.ID = newID(prefix)
		}
		if strings.TrimSpace(c.Arguments) == "" {
			c.Arguments = "{}"
		}
		a.calls = append(a.calls, c)
	}
	switch {
	case rep.StopReason != "":
		a.stop = mapStopReason(api, rep.StopReason)
	case len(a.calls) > 0:
		a.stop = mapStopReason(api, "tool_calls")
	case req.MaxTokens > 0 && roughTokens(a.text) > req.MaxTokens:
		a.text = cutBytes(a.text, req.MaxTokens*4)
		a.stop = mapStopReason(api, "length")
	default:
		a.stop = mapStopReason(api, "stop")
	}
	if rep.Usage != nil {
		a.in, a.out = rep.Usage.InputTokens, rep.Usage.OutputTokens
		return a
	}
	a.in = promptTokens(req)
	a.out = roughTokens(a.text)
	for _, c := range a.calls {
		a.out += roughTokens(c.Name) + roughTokens(c.Arguments)
	}
	a.out = max(a.out, 1)
	return a
}

// cutBytes cuts s to at most n bytes on a rune boundary.
func cutBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// promptTokens roughly counts a request's input: system prompt, tool
// schemas, and each message's content plus four tokens of framing.
func promptTokens(req Request) int {
	n := roughTokens(req.System) + req.toolTokens
	for _, m := range req.Messages {
		n += 4 + roughTokens(contentText(m["content"]))
		if calls, ok := m["tool_calls"].([]any); ok {
			n += roughTokens(contentText(calls))
		}
	}
	return max(n, 1)
}

// replyFor reads a completion request's reply and applies what happens
// before any answer: the delay, a scripted error, a malformed body. It
// reports whether the caller should go on and send the answer.
func (s *Server) replyFor(w http.ResponseWriter, r *http.Request, req Request) (Reply, bool) {
	rep := s.next(req)
	if !wait(r.Context(), rep.Delay) {
		return rep, false
	}
	if rep.Status != 0 && rep.Status != http.StatusOK {
		writeScriptedError(w, req.API, rep)
		return rep, false
	}
	if rep.Malformed && !req.Stream {
		writeMalformed(w)
		return rep, false
	}
	return rep, true
}
