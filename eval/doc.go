// Package eval proves what a window keeps over a long session, and at what
// cost. It has two halves:
//
//   - Fixtures (fixture.go, compat.go, runner.go, checks.go): a JSON file
//     scripts a session turn by turn (OpenAI chat messages, tool calls
//     included) under a policy, and states checks that must hold after given
//     turns: what the window contains or excludes, what the archive search
//     recalls, what is readable back by ref, the budget, tool pairs,
//     compactions, observations and prefix stability. Run replays a fixture
//     against a fresh thread through the library's public API. Files in the
//     format of the Python context-manager library are detected and mapped
//     to the native format (see docs/fixtures.md).
//   - The bench (generate.go, baselines.go, bench.go, report.go): a seeded
//     generator of long sessions in several profiles, with planted facts and
//     probes, replayed against the usual context-management baselines and
//     Mneme's strategies side by side, with the figures that let a user
//     choose a policy: tokens sent, peak window, fact availability, tool-pair
//     violations, prefix stability and time per window.
//
// The package drives the engine only through its public API (mneme, window,
// store, message, token, compact); it must not import the proxy, the server
// or any HTTP code except internal/fakellm, the scripted model that stands in
// for a summarizer.
package eval
