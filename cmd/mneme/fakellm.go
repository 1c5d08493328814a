package main

import (
	"fmt"
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
	c := &cobra.Command{
		Use:   "fakellm",
		Short: "Serve a fake OpenAI- and Anthropic-compatible model for tests and demos",
		Long: `fakellm answers POST /v1/chat/completions and POST /v1/messages (streaming
or not) with deterministic replies: "ok: " and the start of the last user
message, or, for a summarization request (the marker mneme:observer or
mneme:reflector in the system prompt), an extractive summary of the lines
with digits, identifiers or paths. Use it as a summarizer:

  mneme fakellm --addr 127.0.0.1:8089 &
  mneme serve --summarizer-url http://127.0.0.1:8089 --summarizer-model gpt-4o-mini`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var opts []fakellm.Option
			if latency > 0 {
				opts = append(opts, fakellm.WithHandler(func(r fakellm.Request) fakellm.Reply {
					rep := fakellm.DefaultReply(r)
					rep.Delay = latency
					return rep
				}))
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "fakellm listening on http://%s\n", addr)
			return fakellm.ListenAndServe(cmd.Context(), addr, opts...)
		},
	}
	c.Flags().StringVar(&addr, "addr", "127.0.0.1:8089", "address to listen on")
	c.Flags().DurationVar(&latency, "latency", 0, "delay every answer by this much (e.g. 2s)")
	return c
}
