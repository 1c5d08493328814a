// Command mneme is the CLI of Mneme, the context and memory layer for LLM
// agents: a proxy server, long-session evals and benchmarks, and tools to
// look into, export and import thread logs.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot()
	if err := root.ExecuteContext(ctx); err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "mneme:", err)
		os.Exit(1)
	}
}

// exitError ends the command with a status and no extra message (the
// command has already printed what went wrong).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "mneme",
		Short: "The context and memory layer for LLM agents",
		Long: `Mneme keeps every thread of an agent durably and builds, for every model call,
a window that fits the budget, keeps its prefix stable for provider caches,
repairs tool-call pairs and loses nothing: what leaves the window stays
searchable and readable back.

Stores are named by DSN: sqlite:PATH (default sqlite:./mneme.db), memory:,
or postgres://USER:PASS@HOST/DB.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(threadsCmd(), exportCmd(), importCmd())
	for _, add := range extraCommands {
		root.AddCommand(add())
	}
	return root
}

// extraCommands lets each command file register itself, so that adding a
// subcommand touches only its own file.
var extraCommands []func() *cobra.Command
