package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/mcpserver"
)

func init() { extraCommands = append(extraCommands, mcpCmd) }

func mcpCmd() *cobra.Command {
	var f storeFlags
	c := &cobra.Command{
		Use:   "mcp",
		Short: "Serve one tenant's archive and long-term memory to an MCP client over stdio",
		Long: `Serve the Model Context Protocol on stdin and stdout for one tenant, with
the tools search, read, remember, recall_memory, list_threads and
thread_summary. Add it to an MCP client (Claude Code, Cursor, ...) as a
command, e.g.:

  {"mcpServers": {"mneme": {"command": "mneme", "args": ["mcp", "--store", "sqlite:/path/mneme.db", "--tenant", "default"]}}}

The same tools are served over streamable HTTP at /mcp by mneme serve.
Logs go to stderr: stdout carries the protocol.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			st, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			m, err := mneme.Open(cmd.Context(), mneme.Config{Store: st, Logger: logger})
			if err != nil {
				return err
			}
			defer m.Close()
			return mcpserver.ServeStdio(cmd.Context(), mcpserver.Config{Engine: m}, f.tenant)
		},
	}
	f.add(c)
	return c
}

// logHandler returns the slog handler --log-format asks for.
func logHandler(w io.Writer, format string, level slog.Level) (slog.Handler, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "", "text":
		return slog.NewTextHandler(w, opts), nil
	case "json":
		return slog.NewJSONHandler(w, opts), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
