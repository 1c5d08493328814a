package fakellm_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/mnemehq/mneme/internal/fakellm"
)

// The Responses upstream refuses what the real API refuses.
func TestResponsesRejects(t *testing.T) {
	s := fakellm.Start()
	defer s.Close()
	call := `{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}`
	out := `{"type":"function_call_output","call_id":"c1","output":"ok"}`
	for _, tc := range []struct {
		name, body string
		status     int
		msg        string
	}{
		{"call without output", `{"model":"m","input":[{"role":"user","content":"x"},` + call + `]}`, 400, "No tool output found for function call c1."},
		{"output without call", `{"model":"m","input":[{"role":"user","content":"x"},` + out + `]}`, 400, "No tool call found for function call output with call_id c1."},
		{"output before call", `{"model":"m","input":[` + out + `,` + call + `]}`, 400, "No tool call found for function call output with call_id c1."},
		{"unknown previous", `{"model":"m","input":"x","previous_response_id":"resp_nope"}`, 404, "Previous response with id 'resp_nope' not found."},
		{"unknown item reference", `{"model":"m","input":[{"type":"item_reference","id":"msg_nope"}]}`, 404, "Item with id 'msg_nope' not found."},
		{"no model", `{"input":"x"}`, 400, "Missing required parameter: 'model'."},
		{"no input", `{"model":"m"}`, 400, "Missing required parameter: 'input'."},
		{"bad role", `{"model":"m","input":[{"role":"robot","content":"x"}]}`, 400, "Invalid value: 'robot'."},
		{"bad part", `{"model":"m","input":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`, 400, "Invalid value: 'text'."},
		{"call without call_id", `{"model":"m","input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, 400, "Missing required parameter: 'input[0].call_id'."},
		{"reasoning without summary", `{"model":"m","input":[{"type":"reasoning","encrypted_content":"e"}]}`, 400, "Missing required parameter: 'input[0].summary'."},
		{"unknown item", `{"model":"m","input":[{"type":"teleport"}]}`, 400, "Invalid value: 'teleport'."},
		{"not JSON", `{"model":`, 400, "We could not parse the JSON body"},
		{"paired", `{"model":"m","input":[{"role":"user","content":"x"},` + call + `,` + out + `]}`, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(s.URL()+"/v1/responses", "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			if tc.msg == "" {
				return
			}
			var e struct {
				Error struct{ Message, Type string }
			}
			if err := json.Unmarshal(b, &e); err != nil || !strings.HasPrefix(e.Error.Message, strings.TrimSuffix(tc.msg, ".")) || e.Error.Type != "invalid_request_error" {
				t.Fatalf("error %s, want %q", b, tc.msg)
			}
		})
	}
}

// With store (the default) a response can be continued and referenced;
// with store: false it cannot: nothing depends on state the client turned
// off.
func TestResponsesStore(t *testing.T) {
	s := fakellm.Start()
	defer s.Close()
	c := newOpenAI(s)
	ctx := context.Background()
	s.Enqueue(fakellm.Reply{ToolCalls: []fakellm.ToolCall{{Name: "get_weather", Arguments: `{"city":"Paris"}`}}}, fakellm.Reply{Text: "Sunny."})
	r1, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4o-mini", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather?")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r1.Output) != 1 || r1.Output[0].Type != "function_call" || !strings.HasPrefix(r1.Output[0].CallID, "call_") {
		t.Fatalf("output %s", r1.RawJSON())
	}
	in := responses.ResponseInputParam{responses.ResponseInputItemParamOfFunctionCallOutput("21C")}
	in[0].OfFunctionCallOutput.CallID = openai.String(r1.Output[0].CallID)
	// The output alone, without the stored call, is an orphan.
	if _, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4o-mini", Input: responses.ResponseNewParamsInputUnion{OfInputItemList: in}}); err == nil {
		t.Fatal("an orphan output was accepted")
	}
	r2, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4o-mini", PreviousResponseID: openai.String(r1.ID), Input: responses.ResponseNewParamsInputUnion{OfInputItemList: in}})
	if err != nil {
		t.Fatal(err)
	}
	if r2.OutputText() != "Sunny." || r2.PreviousResponseID != r1.ID {
		t.Fatalf("r2 %s", r2.RawJSON())
	}
	r3, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4o-mini", Store: openai.Bool(false), Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4o-mini", PreviousResponseID: openai.String(r3.ID), Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("y")}}); err == nil {
		t.Fatal("a response made with store: false was continued")
	}
}

// The stream is the API's event sequence, and the SDK reads it.
func TestResponsesStream(t *testing.T) {
	s := fakellm.Start()
	defer s.Close()
	c := newOpenAI(s)
	s.Enqueue(fakellm.Reply{Text: "Let me look it up for you.", ToolCalls: []fakellm.ToolCall{{ID: "call_7", Name: "get_weather", Arguments: `{"city":"Paris"}`}}})
	st := c.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: "gpt-4o-mini", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather?")}})
	var types []string
	var text, args strings.Builder
	var final responses.Response
	for st.Next() {
		ev := st.Current()
		if len(types) == 0 || types[len(types)-1] != ev.Type {
			types = append(types, ev.Type)
		}
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.function_call_arguments.delta":
			args.WriteString(ev.Delta)
		case "response.completed":
			final = ev.Response
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	want := "response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta response.output_text.done response.content_part.done response.output_item.done response.output_item.added response.function_call_arguments.delta response.function_call_arguments.done response.output_item.done response.completed"
	if got := strings.Join(types, " "); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	if text.String() != "Let me look it up for you." || args.String() != `{"city":"Paris"}` || len(final.Output) != 2 || final.Output[1].CallID != "call_7" {
		t.Fatalf("text %q args %q final %s", text.String(), args.String(), final.RawJSON())
	}
}
