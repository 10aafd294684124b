package metadata

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestListerIsCharged: what a Lister holds counts against the memory
// limit while it is read (within a quarter of the heap it holds), and
// when complete: as the cache's listing if the cache keeps it, else as
// the Lister's. Release gives it back.
func TestListerIsCharged(t *testing.T) {
	const n = 50_000
	b := flatBucket(t, n)
	ctx := context.Background()
	heap := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	for _, limit := range []int64{1 << 30, 8 << 20} {
		t.Run(fmt.Sprint(limit>>20, "MiB"), func(t *testing.T) {
			c := newTestCache(t, b, nil, func(cfg *Config) { cfg.PageSize = 1000; cfg.MemoryLimit = limit })
			before, heapBefore := c.Bytes(), heap()
			l := c.NewLister("flat")
			for l.Len() < n-1000 {
				require.NoError(t, c.NextPage(ctx, l))
			}
			held := heap() - heapBefore
			t.Logf("%d names read: %d bytes held, %d charged", l.Len(), held, l.Charged())
			assert.InDelta(t, 1, float64(l.Charged())/float64(held), 0.25, "charged for what it holds")
			assert.Equal(t, before+l.Charged(), c.Bytes(), "in the metadata's bytes")

			for !l.Complete {
				require.NoError(t, c.NextPage(ctx, l))
			}
			done := l.done.bytes()
			_, cached := c.cache.listing("flat")
			require.Equal(t, limit == 1<<30, cached, "kept within a quarter of the limit only")
			if cached {
				assert.Zero(t, l.Charged(), "the cache counts the listing it keeps, once")
			} else {
				assert.Equal(t, done, l.Charged(), "too large for the cache: the Lister's")
			}
			assert.Equal(t, before+done, c.Bytes(), "the complete listing, counted once")
			c.Release(l)
			assert.Zero(t, l.Charged())
			if limit == 8<<20 {
				assert.Equal(t, before, c.Bytes(), "released")
			} else {
				assert.Equal(t, before+done, c.Bytes(), "released; the cache keeps its listing")
			}
			runtime.KeepAlive(l)
		})
	}
}
