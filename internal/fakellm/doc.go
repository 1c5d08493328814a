// Package fakellm is a scripted model server for tests and demos. It speaks the
// OpenAI Chat Completions API and the Anthropic Messages API on the wire,
// streaming included, closely enough that the official Go SDKs
// (openai-go/v3, anthropic-sdk-go/v2) work against it unchanged. It is the only
// stand-in for a model in this project: no model API is reachable.
//
// Routes:
//
//	POST /v1/chat/completions        OpenAI Chat Completions (stream or not)
//	POST /v1/responses               OpenAI Responses (stream or not; stored
//	                                 unless store is false)
//	GET  /v1/responses/{id}          a stored response
//	POST /v1/messages                Anthropic Messages (stream or not)
//	POST /v1/messages/count_tokens   Anthropic token count (a rough estimate)
//	GET  /v1/models                  model list (Anthropic shape when the request
//	                                 carries an anthropic-version header)
//	POST /v1/embeddings              deterministic hashing embeddings
//
// What a completion request gets back is decided, in order, by the FIFO queue
// of scripted replies ([Server.Enqueue]), then by the [WithHandler] function,
// then by the default behaviour:
//
//   - A summarization request, recognised by the marker "mneme:observer" or
//     "mneme:reflector" in the system prompt or the first message, gets an
//     extractive summary (see [Summarize] for the rule).
//   - Any other request gets "ok: " followed by the first 60 characters of the
//     last user text, whitespace collapsed ("ok" when there is none).
//
// Tool calls are only ever returned when scripted. A text answer longer than
// the request's max_tokens (counted roughly, four bytes a token) is cut to it
// and stops with "length" / "max_tokens", as a real model's would. Requests
// are validated like upstream, including tool-call pairing (an unanswered
// tool call or an orphan tool result is a 400), so a test that passes against
// this server would not be rejected by the real API for those reasons. Every
// request is recorded ([Server.Requests]).
//
// The package must not import the project's message package or any other
// Mneme package but embed (standard library only), whose hashing embedder
// it serves: it sees requests only as JSON, as a real provider would.
package fakellm
