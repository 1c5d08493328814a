// Package token counts tokens: exact BPE counts for OpenAI's encodings
// (o200k_base, cl100k_base, compiled into the binary), calibrated
// conservative estimators for model families whose tokenizer is not public
// (Claude, Gemini, and others), the chat-format overhead of messages and tool
// schemas, the model table (context window, output limit and tokenizer per
// model name) and a per-message count cache.
//
// Its one job is to answer "how many tokens is this?" without ever answering
// too few, so that a window built from its counts fits the budget
// (invariant I3 in docs/design.md).
//
// It imports only the message package and the BPE library; it must not
// import store, window, compact, proxy or anything that does I/O beyond
// reading a model-table config the caller hands it.
package token
