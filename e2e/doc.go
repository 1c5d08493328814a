// Package e2e proves Mneme's multi-process guarantees against real
// `mneme serve` processes: it builds the binary once per test run, starts
// servers on loopback ports in front of a scripted model (fakellm), drives
// agent-like clients through them, kills servers with SIGKILL, and then
// checks the logs in the store: every acknowledged message is there exactly
// once, every log is gapless, every window rebuilds, and compactions are
// neither lost nor doubled across replicas.
//
// Everything lives in _test.go files: the package exports nothing and is
// imported by nothing. It may import any package of the module; nothing may
// import it.
//
//	go test ./e2e                                   # CI sizes (5 kills, 10 s of replicas)
//	go test ./e2e -run Crash -crash.kills=50        # the full crash run
//	go test ./e2e -run Replicas -replicas.duration=30s
//	go test ./e2e -run '^$' -bench EngineBackends   # append/window throughput, SQLite beside PostgreSQL
//	MNEME_BIN=/path/to/mneme go test ./e2e -run 'Finding|Fault'  # against another build
//	scripts/old-code-proof                         # issue 17's tests on the code before its fixes, and on today's
//
// PostgreSQL parts need MNEME_TEST_POSTGRES (scripts/test exports it); they
// skip without it, except under CI=true, where they fail.
package e2e
