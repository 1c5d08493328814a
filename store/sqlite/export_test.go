package sqlite

// IndexBatch is indexBatch, for the tests of the archive index's queue.
var IndexBatch = indexBatch
