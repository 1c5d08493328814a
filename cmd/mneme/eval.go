package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mnemehq/mneme/eval"
	"github.com/mnemehq/mneme/store/dsn"
)

func init() { extraCommands = append(extraCommands, evalCmd) }

func evalCmd() *cobra.Command {
	var storeDSN, tenant string
	var asJSON bool
	c := &cobra.Command{
		Use:   "eval PATH...",
		Short: "Replay long-session fixtures and check what the window keeps",
		Long: `Replay fixtures (JSON files, or folders of them) turn by turn through the
library and evaluate their checks: what the window contains and excludes, what
the archive search recalls, what is readable back by ref, the budget, tool
pairs, compactions, observations and prefix stability. The format is in
docs/fixtures.md; fixtures of the Python context-manager library are detected
and run as they are.

Each fixture runs on a fresh in-memory store, or on --store (each on a thread
of its own). Prints a table (fixture, checks passed, window tokens, full
history tokens, ratio, compactions, time) and every failure with what was
found; exits 1 when any check fails or any fixture is invalid (a check past
the last turn, an unknown kind, no checks).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			opts := eval.Options{Tenant: tenant}
			if storeDSN != "" {
				st, err := dsn.Open(ctx, storeDSN)
				if err != nil {
					return err
				}
				defer st.Close()
				opts.Store = st
			}
			results := runFixtures(cmd, opts, args)
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(results); err != nil {
					return err
				}
			} else {
				eval.WriteTable(out, results)
			}
			for _, r := range results {
				if !r.OK() {
					return exitError{1}
				}
			}
			return nil
		},
	}
	c.Flags().StringVar(&storeDSN, "store", "", "store DSN to run on (default: a fresh in-memory store per fixture)")
	c.Flags().StringVar(&tenant, "tenant", "eval", "tenant the fixtures' threads belong to")
	c.Flags().BoolVar(&asJSON, "json", false, "print the results as JSON")
	return c
}

// runFixtures loads and runs every fixture; a file that cannot be loaded
// is a failed result, not a skipped one.
func runFixtures(cmd *cobra.Command, opts eval.Options, paths []string) []eval.Result {
	fixtures, errs := eval.Load(paths...)
	var results []eval.Result
	for _, err := range errs {
		r := eval.Result{Fixture: "(load)", Error: err.Error()}
		var le *eval.LoadError
		if errors.As(err, &le) {
			r.Fixture, r.Path, r.Error = le.Path, le.Path, le.Err.Error()
		}
		results = append(results, r)
	}
	for _, f := range fixtures {
		results = append(results, eval.Run(cmd.Context(), f, opts))
	}
	if len(results) == 0 {
		results = append(results, eval.Result{Fixture: "(none)", Error: fmt.Sprintf("no fixtures under %v", paths)})
	}
	return results
}
