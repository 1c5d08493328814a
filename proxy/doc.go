// Package proxy is the HTTP face of Mneme for agents that are not written in
// Go: drop-in handlers for the OpenAI Chat Completions API
// (POST /v1/chat/completions) and the Anthropic Messages API
// (POST /v1/messages), streaming and not, plus a pass-through for every other
// /v1/* route (docs/design.md, "The proxy").
//
// Per request it decodes the client's messages with the message codecs,
// finds the thread (X-Mneme-Thread, or an id derived from the tenant and the
// first system and user message), appends only what is new (resend mode
// dedups the resent history against the log; a history that no longer
// matches forks a new thread that copies the common prefix, so the original
// is never corrupted), replaces the history by the engine's window, calls the
// upstream model, records its reply and answers the client in the client's
// own API shape. Unknown request fields pass through untouched. When the
// model calls the recall tools (mneme_search, mneme_read) the proxy answers
// them itself and calls the model again, streaming included.
//
// The tenant comes from the request's context (tenant.With), set by the
// server's auth middleware; the proxy itself does no authentication.
//
// The package knows nothing of SQL or of the HTTP server around it: it
// imports the engine (mneme), message and store (for the Store interface and
// its events). It must not import server, cmd or any store backend.
package proxy
