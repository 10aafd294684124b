package filecache

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A reader that trails its readahead: files fetched ahead of a reader in
// listing order (--read-ahead-files) reach the cache lead objects before
// the reader comes to them.

// How a leadReader's readahead hands what it fetched ahead to the cache.
type leadMode int

const (
	// storedAhead: stored as it arrives; memory keeps a copy until the
	// reader comes, and the reader reads it there (telling the cache), as
	// readahead does.
	storedAhead leadMode = iota
	// cacheOnly: stored as it arrives, and let go: the reader reads the
	// cache, and fetches again what the cache lost.
	cacheOnly
)

func (m leadMode) String() string {
	return [...]string{"stored ahead", "cache only"}[m]
}

// leadReader reads objects in order, whole, 4 blocks a read, as a mount
// reading lead objects ahead does: when the reader opens object i, the
// blocks of object i+lead that the cache lacks are fetched and stored.
// An object the cache holds whole at the open is read from the cache
// (FUSE passthrough), held while open. The reader tells the cache of the
// bytes it had from elsewhere (Consumed), as readahead does.
type leadReader struct {
	s       *Store
	lead    int
	mode    leadMode
	fetched int64 // blocks fetched from the store
}

// fetchAhead fetches the blocks of o missing from the cache, stores them,
// and returns which it fetched.
func (r *leadReader) fetchAhead(o Key) []bool {
	got := make([]bool, insBlocks)
	for b := int64(0); b < insBlocks; b++ {
		if !r.s.HasBlock(o, b) {
			got[b] = true
			r.fetched++
		}
	}
	r.s.WriteBlocks(o, 0, blocksData(o, 0, insBlocks, testBS))
	return got
}

// pass reads objs once and returns the objects' worth of blocks fetched,
// ending with an index commit as readPass does.
func (r *leadReader) pass(t *testing.T, objs []Key) float64 {
	t.Helper()
	before := r.fetched
	held := make(map[int][]bool) // objects fetched ahead, in memory
	for i, o := range objs {
		mem := held[i]
		delete(held, i)
		w, whole := r.s.Whole(o)
		if whole || r.mode == cacheOnly {
			mem = nil
		}
		// The fetches ahead complete while the reader has o open.
		for j := i + 1; j <= i+r.lead && j < len(objs); j++ {
			if _, ok := held[j]; !ok {
				held[j] = r.fetchAhead(objs[j])
			}
		}
		for b := int64(0); b < insBlocks; b += insChunk {
			if mem != nil && mem[b] {
				r.s.Consumed(o)
				continue
			}
			n := r.s.ReadBlocks(o, b, make([]byte, insChunk*testBS), make([]bool, insChunk))
			if n < insChunk {
				r.fetched += int64(insChunk - n)
				r.s.WriteBlocks(o, b, blocksData(o, b, insChunk, testBS))
				r.s.Consumed(o)
			}
		}
		if whole {
			w.Release()
		}
	}
	require.NoError(t, r.s.flush())
	return float64(r.fetched-before) / insBlocks
}

// A dataset larger than the cache, read in order 4 and 16 objects behind
// its readahead, fetches from epoch 2 what it fetches with no lead (32
// and 128 objects of 96 and 192 would not fit, 64 cached; the slot the
// newcomers share and the one in bipOneIn let in cost a few more), as
// long as a copy of what was fetched ahead waits in memory for the
// reader. (This harness writes one object at a time; for writes in
// flight at once, see TestNewcomerEvictingAWriteInFlight.) If readahead
// let a file go once the cache had it, the cache would evict it before
// its reader came (in scan-resistant mode each new entry enters at the
// least recent end, where the next one evicts it): 65 and 257 objects an
// epoch; ferry_cache_evicted_unread_bytes_total counts such entries.
func TestReaderTrailingItsReadahead(t *testing.T) {
	for _, tc := range []struct {
		ratio float64
		base  float64 // objects fetched an epoch from epoch 2, no lead
		lost  float64 // epoch 2, cache only
	}{{1.5, 34, 60}, {3, 133, 250}} {
		for _, mode := range []leadMode{storedAhead, cacheOnly} {
			for _, lead := range []int{0, 4, 16} {
				if lead == 0 && mode != storedAhead {
					continue
				}
				t.Run(fmt.Sprintf("ratio=%v/lead=%d/%v", tc.ratio, lead, mode), func(t *testing.T) {
					r := &leadReader{s: insStore(t), lead: lead, mode: mode}
					objs := insObjs("o", int(tc.ratio*insCached))
					var got []float64
					for epoch := 1; epoch <= 5; epoch++ {
						got = append(got, r.pass(t, objs))
					}
					unread := r.s.Stats().EvictedUnreadBytes / insSize
					t.Logf("objects fetched per epoch %v; %d evicted unread", got, unread)
					r.s.checkInvariants(t)
					if mode == cacheOnly {
						// (Later epochs depend on whether the
						// shadows see LRU ahead and switch;
						// TestEvictedUnreadBytes counts the
						// entries evicted unread exactly.)
						assert.GreaterOrEqual(t, got[1], tc.lost, "epoch 2")
						assert.Positive(t, unread)
						return
					}
					assert.False(t, r.s.ins.lru, "scan-resistant mode")
					for e := 1; e < len(got); e++ {
						assert.LessOrEqual(t, got[e], tc.base, "epoch %d", e+1)
					}
					if lead == 0 {
						assert.Zero(t, unread)
					}
				})
			}
		}
	}
}

// Evicted entries count as evicted unread unless something read them
// since their last write: a read of the cache, or a reader served from
// elsewhere that the cache was told of (Consumed).
func TestEvictedUnreadBytes(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir(), MaxSize: 3 * insSize}, hooks{})
	read, told, unread := obj("read", insSize), obj("told", insSize), obj("unread", insSize)
	for _, o := range []Key{read, told, unread} {
		require.Equal(t, insBlocks, s.WriteBlocks(o, 0, blocksData(o, 0, insBlocks, testBS)))
	}
	require.Equal(t, 1, s.ReadBlocks(read, 3, make([]byte, testBS), make([]bool, 1)))
	s.Consumed(told)
	s.Consumed(obj("absent", insSize))                // nothing to tell
	n, _ := s.Drop(func(string) bool { return true }) // evicts all three
	require.Equal(t, 3, n)
	st := s.Stats()
	assert.Equal(t, int64(3), st.Evictions)
	assert.Equal(t, int64(insSize), st.EvictedUnreadBytes, "only the entry nobody read")
}

// Two newcomers written at once, the cache full: the second evicts the
// first, whose write is still in flight, and that makes its room: what
// the first writes goes with its file. (Counting the first's reservation
// until its write ended evicted a kept entry too, for every pair of
// files fetched at once: a dataset 3x the cache read in order kept half
// of what it could.)
func TestNewcomerEvictingAWriteInFlight(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var block atomic.Bool
	s := openT(t, Config{Dir: t.TempDir(), MaxSize: insCached * insSize}, hooks{
		writeAt: func(f *os.File, p []byte, off int64) (int, error) {
			if block.CompareAndSwap(true, false) {
				close(entered)
				<-release
			}
			return f.WriteAt(p, off)
		},
	})
	kept := insObjs("kept", insCached)
	for range 2 {
		readPass(t, s, kept)
	}
	require.Equal(t, int64(0), s.Stats().Evictions)
	s.mu.Lock()
	s.ins.seq = 1 // both newcomers enter at the least recent end
	s.mu.Unlock()
	a, b := obj("a", insSize), obj("b", insSize)
	block.Store(true)
	done := make(chan int)
	go func() { done <- s.WriteBlocks(a, 0, blocksData(a, 0, insBlocks, testBS)) }()
	<-entered
	assert.Equal(t, insBlocks, s.WriteBlocks(b, 0, blocksData(b, 0, insBlocks, testBS)))
	close(release)
	assert.Zero(t, <-done, "written into a file evicted meanwhile: nothing stored")
	st := s.Stats()
	assert.Equal(t, int64(2), st.Evictions, "a kept entry for a, and a for b")
	assert.Equal(t, insCached-1, cachedOf(s, kept), "one kept entry went, for a")
	assert.Equal(t, int64(insSize), s.CachedBytes(b))
	assert.Zero(t, s.CachedBytes(a))
	s.checkInvariants(t)
}

// cachedOf counts the objects of objs cached whole.
func cachedOf(s *Store, objs []Key) int {
	n := 0
	for _, o := range objs {
		if s.CachedBytes(o) == int64(o.Size) {
			n++
		}
	}
	return n
}
