// Package backend is what the store backends (store/inmem, store/sqlite,
// store/postgres, and any other) share beyond the contract of package
// store: the validation of every argument, the same on each backend; the
// stored forms (messages, namespaces, cursors, times, thread rows); memory
// filters; the tool-name lookup of tool results; vector similarity. The
// search semantics are package store/fulltext.
package backend
