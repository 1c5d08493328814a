package fulltext_test

import (
	"sync/atomic"
	"testing"

	"github.com/mnemehq/mneme/store/fulltext"
	"github.com/mnemehq/mneme/store/storetest"
)

// BenchmarkIndexBodyParallel: IndexBody from every core at once over the
// backends' benchmark messages (storetest.Synthetic), what the appends of
// 32 threads prepare beside one another.
func BenchmarkIndexBodyParallel(b *testing.B) {
	evs := storetest.Synthetic(1000)
	texts := make([]string, len(evs))
	for i, ev := range evs {
		texts[i] = ev.Message.TextOf()
	}
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			fulltext.IndexBody(texts[next.Add(1)%int64(len(texts))])
		}
	})
}
