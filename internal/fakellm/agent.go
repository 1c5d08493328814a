package fakellm

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The markers that turn on the agent script (see [AgentReply]).
const (
	// AgentStepsMarker, followed by "=N" in a request, asks for N steps of
	// tool calls.
	AgentStepsMarker = "mneme-steps"
	// AgentDirMarker, followed by "=PATH", names the folder the file tools
	// of a coding agent (Write, Read) work in.
	AgentDirMarker = "mneme-dir"
	// AgentStepLabel marks each step's tool call ("mneme-step 7").
	AgentStepLabel = "mneme-step"
	// AgentDone is in the text of the answer after the last step.
	AgentDone = "mneme-done"
)

var (
	stepsRe = regexp.MustCompile(AgentStepsMarker + `=(\d+)`)
	dirRe   = regexp.MustCompile(AgentDirMarker + `=([^\s"\\]+)`)
	stepRe  = regexp.MustCompile(AgentStepLabel + ` (\d+)`)
)

// AgentReply is a scripted tool-using agent, for driving real clients and
// CLI agents through many model calls. A request whose text holds
// "mneme-steps=N" gets, for each step k = 1..N, tool calls labelled
// "mneme-step k" (the step after the highest label the request holds: the
// newest call is always in the window, whatever was compacted before it),
// then a text answer holding "mneme-done". The tools are those the request
// offers: a coding agent's Write, Read and Bash (Claude Code's) in turn,
// with paths under "mneme-dir=PATH"; Codex's exec_command writing and
// printing files there; any other tool gets
// {"step": k, "note": "mneme-step k"}, twice in parallel every fourth step.
// An Anthropic request with thinking enabled gets a signed thinking block
// with each answer. ok is false for a request that does not ask for the
// script (and for summarization requests).
func AgentReply(r Request) (rep Reply, ok bool) {
	if r.IsSummarization() {
		return Reply{}, false
	}
	body := string(r.Body)
	m := stepsRe.FindStringSubmatch(body)
	if m == nil {
		return Reply{}, false
	}
	total, _ := strconv.Atoi(m[1])
	done := 0
	for _, s := range stepRe.FindAllStringSubmatch(body, -1) {
		if n, err := strconv.Atoi(s[1]); err == nil && n > done {
			done = n
		}
	}
	step := done + 1
	if r.Thinking {
		rep.Thinking = fmt.Sprintf("Step %d of %d: choose the next tool.", step, total)
	}
	tools := slices.DeleteFunc(slices.Clone(r.Tools), func(t string) bool { return strings.HasPrefix(t, "mneme_") })
	if step > total || len(tools) == 0 {
		rep.Text = fmt.Sprintf("All %d steps done (%s).", total, AgentDone)
		return rep, true
	}
	label := fmt.Sprintf("%s %d", AgentStepLabel, step)
	dir := "."
	if d := dirRe.FindStringSubmatch(body); d != nil {
		dir = d[1]
	}
	file := fmt.Sprintf("%s/step-%03d.txt", strings.TrimSuffix(dir, "/"), step-step%3)
	args := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	has := func(name string) bool { return slices.Contains(tools, name) }
	rep.Text = "Working on " + label + "."
	switch {
	case has("Bash") && has("Write") && has("Read"):
		switch step % 3 {
		case 0:
			rep.ToolCalls = []ToolCall{{Name: "Write", Arguments: args(map[string]string{
				"file_path": file, "content": agentPayload(label)})}}
		case 1:
			rep.ToolCalls = []ToolCall{{Name: "Read", Arguments: args(map[string]string{"file_path": file})}}
			if step == 1 { // nothing written yet: list the folder instead
				rep.ToolCalls = []ToolCall{{Name: "Bash", Arguments: args(map[string]string{
					"command": "echo '" + label + "'; ls -la " + dir, "description": "List the folder (" + label + ")"})}}
			}
		default:
			rep.ToolCalls = []ToolCall{{Name: "Bash", Arguments: args(map[string]string{
				"command":     "echo '" + label + "'; for i in $(seq 1 60); do echo \"line $i of the build log, nothing failed yet\"; done",
				"description": "Print the build log (" + label + ")"})}}
		}
	case has("exec_command"): // Codex's unified exec tool
		cmd := fmt.Sprintf(`for i in $(seq 1 40); do echo "%s: line $i of the notes the agent keeps"; done > %s/step-%03d.txt && echo '%s' && cat %s/step-%03d.txt`,
			label, dir, step, label, dir, step)
		if step%2 == 0 {
			cmd = fmt.Sprintf(`echo '%s'; for i in $(seq 1 60); do echo "line $i of the build log, nothing failed yet"; done`, label)
		}
		rep.ToolCalls = []ToolCall{{Name: "exec_command", Arguments: args(map[string]any{"cmd": cmd, "login": false})}}
	default:
		call := ToolCall{Name: tools[step%len(tools)], Arguments: args(map[string]any{"step": step, "note": label})}
		rep.ToolCalls = []ToolCall{call}
		if step%4 == 0 {
			rep.ToolCalls = append(rep.ToolCalls, call)
		}
	}
	return rep, true
}

// agentPayload is a file of a few KB that names its step.
func agentPayload(label string) string {
	var b strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&b, "%s: line %d of the notes the agent keeps while it works\n", label, i)
	}
	return b.String()
}
