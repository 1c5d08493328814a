package sqlite

// IndexBatch is indexBatch, for the tests of the archive index's queue.
var IndexBatch = indexBatch

// Synthetic and Word are synthetic and word, for the benchmarks outside
// the package.
var Synthetic, Word = synthetic, word
