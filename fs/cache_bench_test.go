package fs

import (
	"fmt"
	"testing"
	"time"
)

// benchPut times metadata puts after floors invalidations that no
// request in flight predates (they must cost nothing).
func benchPut(b *testing.B, floors int) {
	clock := newFakeClock()
	c := newMetaCache(time.Minute, time.Minute, clock.Now)
	for i := 0; i < floors; i++ {
		c.invalidate(fmt.Sprintf("datasets/train/shard-%05d/part-%05d.tar", i, i))
	}
	names := make([]string, 4096)
	for i := range names {
		names[i] = fmt.Sprintf("datasets/train/shard-%05d/sample-%07d.jpg", i%50, i)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.put(names[i%len(names)], entry{kind: kindFile, seq: c.begin()})
	}
}

func BenchmarkMetaCachePut(b *testing.B)                   { benchPut(b, 0) }
func BenchmarkMetaCachePutAfterInvalidations(b *testing.B) { benchPut(b, 1000) }
