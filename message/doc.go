// Package message defines Mneme's API-neutral conversation message and the
// codecs that turn it to and from the two wire formats the proxy speaks:
// OpenAI Chat Completions messages and Anthropic Messages.
//
// Its one job is lossless translation: decoding what a client sent and
// encoding it back to the same API gives JSON-equal output, unknown fields
// included, and translating between the APIs keeps text, tool calls, tool
// results and their pairing. The codecs parse each request in a single pass
// with a small validating scanner, because the proxy decodes every request.
//
// The package must import nothing but the standard library: every other
// package of Mneme imports it.
package message
