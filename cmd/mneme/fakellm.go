package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/mnemehq/mneme/internal/fakellm"
	"github.com/spf13/cobra"
)

func init() { extraCommands = append(extraCommands, fakellmCmd) }

// fakellmCmd serves the scripted model server of the tests, so that
// anyone can run Mneme (or an agent) against a model without a model API.
func fakellmCmd() *cobra.Command {
	var addr string
	var latency time.Duration
	var agent bool
	c := &cobra.Command{
		Use:   "fakellm",
		Short: "Serve a fake OpenAI- and Anthropic-compatible model for tests and demos",
		Long: `fakellm answers POST /v1/chat/completions and POST /v1/messages (streaming
or not) with deterministic replies: "ok: " and the start of the last user
message, or, for a summarization request (the marker mneme:observer or
mneme:reflector in the system prompt), an extractive summary of the lines
with digits, identifiers or paths. Use it as a summarizer:

  mneme fakellm --addr 127.0.0.1:8089 &
  mneme serve --summarizer-url http://127.0.0.1:8089 --summarizer-model gpt-4o-mini

It rejects what the real APIs reject (unpaired tool calls, orphan results,
unknown roles, more than 4 cache_control blocks, thinking blocks it did not
issue). With --agent, a request holding "mneme-steps=N" drives N steps of
tool calls against the tools it offers (see fakellm.AgentReply): what the
real-client test harness (tests/node) runs agents against. GET
/fakellm/requests lists the requests received (api, path, headers, body),
for tests to check what went upstream.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			handler := fakellm.DefaultReply
			if agent {
				handler = func(r fakellm.Request) fakellm.Reply {
					if rep, ok := fakellm.AgentReply(r); ok {
						return rep
					}
					return fakellm.DefaultReply(r)
				}
			}
			h := handler
			if latency > 0 {
				h = func(r fakellm.Request) fakellm.Reply {
					rep := handler(r)
					rep.Delay = latency
					return rep
				}
			}
			s := fakellm.New(fakellm.WithHandler(h))
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("fakellm: listen %s: %w", addr, err)
			}
			mux := http.NewServeMux()
			mux.HandleFunc("GET /fakellm/requests", func(w http.ResponseWriter, _ *http.Request) {
				type rec struct {
					API    string          `json:"api"`
					Method string          `json:"method"`
					Path   string          `json:"path"`
					Header http.Header     `json:"header"`
					Body   json.RawMessage `json:"body"`
				}
				out := []rec{}
				for _, r := range s.Requests() {
					body := json.RawMessage(r.Body)
					if !json.Valid(body) {
						body, _ = json.Marshal(string(r.Body))
					}
					out = append(out, rec{r.API, r.Method, r.Path, r.Header, body})
				}
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(out)
			})
			mux.Handle("/", s.Handler())
			srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			fmt.Fprintf(cmd.ErrOrStderr(), "fakellm listening on http://%s\n", ln.Addr())
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve(ln) }()
			select {
			case err := <-errc:
				return fmt.Errorf("fakellm: serve: %w", err)
			case <-cmd.Context().Done():
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil {
				_ = srv.Close()
			}
			if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("fakellm: serve: %w", err)
			}
			return nil
		},
	}
	c.Flags().StringVar(&addr, "addr", "127.0.0.1:8089", "address to listen on (port 0: any free port, printed)")
	c.Flags().DurationVar(&latency, "latency", 0, "delay every answer by this much (e.g. 2s)")
	c.Flags().BoolVar(&agent, "agent", false, `drive "mneme-steps=N" requests through N steps of tool calls`)
	return c
}
