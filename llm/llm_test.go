package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/mnemehq/mneme/llm"
	"github.com/mnemehq/mneme/message"
)

func TestComplete(t *testing.T) {
	srv := fakellm.Start()
	defer srv.Close()
	for _, api := range []string{llm.APIOpenAI, llm.APIAnthropic} {
		t.Run(api, func(t *testing.T) {
			srv.Reset()
			c, err := llm.New(llm.Config{API: api, URL: srv.URL(), Model: "gpt-4o-mini", APIKey: "k-123"})
			if err != nil {
				t.Fatal(err)
			}
			srv.Enqueue(fakellm.Reply{Text: "- 10:00 [high] goal [1–2]", Usage: &fakellm.Usage{InputTokens: 40, OutputTokens: 7}})
			resp, err := c.Complete(context.Background(), llm.Request{System: "mneme:observer be brief", Messages: []message.Message{message.NewText(message.User, "hello")}, MaxTokens: 300})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Text != "- 10:00 [high] goal [1–2]" || resp.InputTokens != 40 || resp.OutputTokens != 7 || resp.Model == "" {
				t.Fatalf("response %+v", resp)
			}
			reqs := srv.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests", len(reqs))
			}
			var body map[string]any
			if err := json.Unmarshal(reqs[0].Body, &body); err != nil {
				t.Fatal(err)
			}
			if body["max_tokens"] != float64(300) || body["model"] != "gpt-4o-mini" {
				t.Fatalf("body %s", reqs[0].Body)
			}
			switch api {
			case llm.APIOpenAI:
				if reqs[0].Path != "/v1/chat/completions" || reqs[0].Header.Get("Authorization") != "Bearer k-123" {
					t.Fatalf("path %s header %v", reqs[0].Path, reqs[0].Header)
				}
			case llm.APIAnthropic:
				if reqs[0].Path != "/v1/messages" || reqs[0].Header.Get("x-api-key") != "k-123" || body["system"] != "mneme:observer be brief" {
					t.Fatalf("path %s header %v body %s", reqs[0].Path, reqs[0].Header, reqs[0].Body)
				}
			}
		})
	}
}

func TestCompleteFailures(t *testing.T) {
	srv := fakellm.Start()
	defer srv.Close()
	cases := []struct {
		name  string
		reply fakellm.Reply
		check func(error) bool
	}{
		{"500", fakellm.Reply{Status: 500}, func(err error) bool {
			var se *llm.StatusError
			return errors.As(err, &se) && se.Status == 500
		}},
		{"429", fakellm.Reply{Status: 429}, func(err error) bool {
			var se *llm.StatusError
			return errors.As(err, &se) && se.Status == 429
		}},
		{"malformed", fakellm.Reply{Malformed: true}, func(err error) bool { return errors.Is(err, llm.ErrMalformed) }},
		{"cut", fakellm.Reply{Text: strings.Repeat("word ", 200), CutAfter: 1}, func(err error) bool { return err != nil }},
		{"truncated", fakellm.Reply{Text: strings.Repeat("word ", 400)}, func(err error) bool { return errors.Is(err, llm.ErrTruncated) }},
		{"timeout", fakellm.Reply{Text: "late", Delay: 2 * time.Second}, func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }},
	}
	for _, api := range []string{llm.APIOpenAI, llm.APIAnthropic} {
		c, err := llm.New(llm.Config{API: api, URL: srv.URL() + "/v1", Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range cases {
			t.Run(api+"/"+tc.name, func(t *testing.T) {
				srv.Enqueue(tc.reply)
				// Only the timeout case has a short deadline: on a loaded
				// machine a prompt answer may take longer than it.
				limit := time.Minute
				if tc.name == "timeout" {
					limit = 300 * time.Millisecond
				}
				ctx, cancel := context.WithTimeout(context.Background(), limit)
				defer cancel()
				_, err := c.Complete(ctx, llm.Request{Messages: []message.Message{message.NewText(message.User, "x")}, MaxTokens: 50})
				if !tc.check(err) {
					t.Fatalf("got %v", err)
				}
			})
		}
	}
}

func TestNewConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg llm.Config
		ok  bool
	}{
		{llm.Config{URL: "http://x", Model: "m"}, true},
		{llm.Config{URL: "http://x/v1/messages", Model: "m", API: "anthropic"}, true},
		{llm.Config{URL: "", Model: "m"}, false},
		{llm.Config{URL: "http://x"}, false},
		{llm.Config{URL: "http://x", Model: "m", API: "gemini"}, false},
	} {
		_, err := llm.New(tc.cfg)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, llm.ErrConfig)) {
			t.Errorf("%+v: %v", tc.cfg, err)
		}
	}
}
