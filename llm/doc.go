// Package llm holds Mneme's thin model clients: one call to an
// OpenAI-compatible /v1/chat/completions endpoint or to the Anthropic
// /v1/messages endpoint, non-streaming, over net/http, with the requests
// and replies encoded by the project's own message codecs. It is what the
// summarizer (package compact) uses to reach a model; it is not a general
// SDK: no retries, no streaming, no tools.
//
// It imports message only; it must not import the engine (mneme, window,
// compact, store).
package llm
