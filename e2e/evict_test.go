package e2e

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDatasetLargerThanTheCache: 96 files of 256 KiB read whole, four
// epochs on one mount with the cache at 1/3 and 2/3 of the data, in order
// and shuffled: from epoch 2 on, the store serves at most what does not
// fit plus 10% of the cache (hit ratio at least 0.9 x cache/dataset),
// every epoch, and the cache is in scan-resistant mode. (The cache holds
// 32 and 64 files: with fewer, the slot the newcomers share and the one
// in 32 of them let in take more than a tenth of it.)
func TestDatasetLargerThanTheCache(t *testing.T) {
	s := newStore(t, "gcs")
	const n, size = 96, 256 << 10
	objs := dataset(t, s, "epochs", n, size)
	names := slices.Sorted(maps.Keys(objs))
	for _, shuffle := range []bool{false, true} {
		for _, cache := range []int{n * size / 3, n * size * 2 / 3} {
			t.Run(fmt.Sprintf("cache=%dMiB/shuffle=%v", cache>>20, shuffle), func(t *testing.T) {
				m := mount(t, s, "--cache-dir", t.TempDir(), "--cache-size", fmt.Sprint(cache), "--metadata-ttl", "-1", "--metrics-addr", freeAddr(t))
				rng := rand.New(rand.NewPCG(1, 2))
				for epoch := 1; epoch <= 4; epoch++ {
					// As between real epochs, let the index commit
					// (every second): until an evicted file's
					// deletion is committed it is not written
					// again, which made short epochs look stable
					// under LRU.
					time.Sleep(1500 * time.Millisecond)
					dropCaches(t)
					order := names
					if shuffle {
						order = slices.Clone(names)
						rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
					}
					served := s.bytesServed()
					for _, name := range order {
						got, err := os.ReadFile(filepath.Join(m.dir, name))
						require.NoError(t, err)
						require.True(t, bytes.Equal(objs[name], got), "%s: wrong bytes", name)
					}
					fetched := s.bytesServed() - served
					t.Logf("epoch %d: %.1f MiB from the store, hit ratio %.2f", epoch, float64(fetched)/(1<<20), 1-float64(fetched)/float64(n*size))
					if epoch > 1 {
						assert.LessOrEqual(t, fetched, int64(n*size-cache*9/10), "epoch %d", epoch)
					}
				}
				assert.Equal(t, 1.0, m.metric(t, "ferry_cache_insertion_mode", nil), "scan-resistant mode")
				assert.Positive(t, m.metric(t, "ferry_cache_bip_inserts_total", nil))
			})
		}
	}
}
