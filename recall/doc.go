// Package recall brings back what left the window: archive search (BM25
// from the store, fused with vector similarity when an embedder is
// configured), reading any message by ref page by page, the background
// indexer that embeds new messages, and the recall tools (mneme_search,
// mneme_read, mneme_remember, mneme_recall_memory): their schemas in the
// OpenAI, Anthropic and MCP shapes and one handler that answers a call.
//
// Every call is scoped by tenant, and reads and searches by thread unless
// the caller widens them (invariant I8): a ref of another tenant or thread
// is "not found".
//
// It imports store, message, embed and memory; never window, proxy, server
// or a database driver.
package recall
