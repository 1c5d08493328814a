// Package compact writes what replaces messages leaving the window: the
// Observer turns a range of the log into dated, prioritised observations;
// the Condenser (the design's Reflector) condenses observations once they
// grow too large. Both run a Summarizer (an LLM through package llm, or the
// deterministic Extractive one) and never fail: an error, a timeout, an
// empty, invalid or oversized answer makes the Extractive summarizer run
// instead, and the result says why (invariant I5 in docs/design.md).
//
// The observation format, one fact a line, grouped by date:
//
//	Date: 2026-03-02
//	- 14:05 [high] User: "Fix INV-4401 in src/shop/checkout.go" [12–12]
//	- 14:06 [medium] read_file {"path":"src/shop/checkout.go"} → 212 lines: "package shop" [13–14]
//	- 14:09 [done] Assistant: "Fixed the rounding in total(); tests pass." [15–15]
//
// Priorities: high (explicit user facts, goals, preferences, constraints),
// medium (project details, tool results), low, done (finished work).
//
// The package knows nothing of SQL or of the thread's log: the engine (the
// mneme package) hands it messages and records what it returns as events.
// It must not import mneme, store backends or net/http directly (models are
// reached through llm).
package compact
