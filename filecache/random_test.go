package filecache

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRandomOperations drives the store with random reads, writes,
// corruptions and reopens under a small cap and checks the invariants
// after every step, plus a model: a block is present only if it was
// written and not since evicted, corrupted or dropped.
func TestRandomOperations(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 99))
			dir := t.TempDir()
			cfg := Config{Dir: dir, MaxSize: 24 * testBS, Splice: true}
			h := hooks{maxOpen: 3}
			s := openT(t, cfg, h)
			var objs []Key
			for i := 0; i < 8; i++ {
				objs = append(objs, obj(fmt.Sprintf("o%d", i), uint64(r.IntN(10*testBS)+1)))
			}
			// written[o][i]: written since the last loss we know of.
			written := map[Key]map[int64]bool{}
			for _, o := range objs {
				written[o] = map[int64]bool{}
			}
			handedOut := 0
			for step := 0; step < 500; step++ {
				o := objs[r.IntN(len(objs))]
				nb := numBlocks(o.Size, testBS)
				switch op := r.IntN(11); {
				case op < 4:
					first := r.Int64N(nb)
					count := r.Int64N(min(4, nb-first)) + 1
					n := s.WriteBlocks(o, first, blocksData(o, first, count, testBS))
					require.LessOrEqual(t, int64(n), count)
					for i := first; i < first+int64(n); i++ {
						written[o][i] = true
					}
				case op < 7:
					idx := r.Int64N(nb)
					if readOK(t, s, o, idx) {
						require.True(t, written[o][idx], "a block never written was served")
						// Now checked: part of it may be spliced.
						off := idx*testBS + r.Int64N(min(testBS, int64(o.Size)-idx*testBS))
						n := min(r.Int64N(testBS)+1, int64(o.Size)-off, (idx+1)*testBS-off)
						if spliceOK(t, s, o, off, n) {
							handedOut++
						}
					}
				case op < 8:
					// A range handed out to splice holds the object's
					// bytes, of blocks written.
					// Mostly within a block, as most reads are.
					off := r.Int64N(int64(o.Size))
					n := min(r.Int64N(testBS)+1, int64(o.Size)-off)
					if r.IntN(4) == 0 {
						n = r.Int64N(int64(o.Size)-off) + 1
					}
					if spliceOK(t, s, o, off, n) {
						handedOut++
						for i := off / testBS; i <= (off+n-1)/testBS; i++ {
							require.True(t, written[o][i], "a block never written was handed out")
						}
					}
				case op < 9:
					// Corrupt one present block on disk.
					s.mu.Lock()
					e := s.entries[s.keyFor(o)]
					var path string
					var idx int64 = -1
					if e != nil {
						path = e.path
						for i := int64(0); i < e.nblocks; i++ {
							if e.present.get(i) {
								idx = i
							}
						}
					}
					s.mu.Unlock()
					if idx >= 0 {
						f, err := os.OpenFile(path, os.O_RDWR, 0)
						require.NoError(t, err)
						_, err = f.WriteAt([]byte{byte(r.Uint32()) | 1, 0xff}, idx*testBS)
						require.NoError(t, err)
						f.Close()
						assert.False(t, readOK(t, s, o, idx))
						assert.False(t, s.HasBlock(o, idx))
						written[o][idx] = false
					}
				case op < 10:
					// Ask reads to check it; if they have, its bytes
					// are the object's.
					if w, ok := s.Whole(o); ok {
						if w.Checked() {
							got, err := io.ReadAll(io.NewSectionReader(w.File(), 0, int64(o.Size)))
							require.NoError(t, err)
							require.Equal(t, blocksData(o, 0, nb, testBS), got, "Checked, with other bytes")
						}
						w.CheckAsRead()
						w.Release()
					}
				case r.IntN(3) == 0:
					// Reopen (every 33 steps or so: what reads check
					// is forgotten with it).
					require.NoError(t, s.Close())
					s = openT(t, cfg, h)
				}
				s.checkInvariants(t)
				require.LessOrEqual(t, s.Stats().UsedBytes, cfg.MaxSize)
				// Present implies written.
				for _, o := range objs {
					for i := int64(0); i < numBlocks(o.Size, testBS); i++ {
						if s.HasBlock(o, i) {
							require.True(t, written[o][i], "%s block %d present but not written", o.Name, i)
						}
					}
				}
			}
			t.Logf("ranges handed out to splice: %d", handedOut)
		})
	}
}

// TestConcurrentReadWriteEvict races readers and writers on a cache far
// too small for the working set, with few file descriptors, under -race.
// Every hit must be byte-correct.
func TestConcurrentReadWriteEvict(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Config{Dir: dir, MaxSize: 16 * testBS}, hooks{maxOpen: 2})
	var objs []Key
	for i := 0; i < 6; i++ {
		objs = append(objs, obj(fmt.Sprintf("o%d", i), 8*testBS-100))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	hits, wholes := 0, 0
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 7))
			for i := 0; i < 300; i++ {
				o := objs[r.IntN(len(objs))]
				idx := r.Int64N(8)
				if r.IntN(2) == 0 {
					s.WriteBlocks(o, idx, blocksData(o, idx, 2, testBS))
					continue
				}
				if r.IntN(8) == 0 {
					// The whole file, as passthrough reads it.
					w, ok := s.Whole(o)
					if !ok {
						continue
					}
					if r.IntN(2) == 0 && !w.Checked() {
						w.CheckAsRead()
						w.Release()
						continue
					}
					if w.Checked() || w.Check() {
						got := make([]byte, o.Size)
						_, err := w.File().ReadAt(got, 0)
						if !assert.NoError(t, err) || !assert.Equal(t, blocksData(o, 0, 8, testBS), got) {
							w.Release()
							return
						}
						mu.Lock()
						wholes++
						mu.Unlock()
					}
					w.Release()
					continue
				}
				want := blockData(o, idx, testBS)
				p := make([]byte, len(want))
				if s.ReadBlock(o, idx, p) {
					if !assert.Equal(t, want, p) {
						return
					}
					mu.Lock()
					hits++
					mu.Unlock()
				}
			}
		}(uint64(g))
	}
	wg.Wait()
	t.Logf("hits: %d, whole files: %d, stats: %+v", hits, wholes, s.Stats())
	assert.Positive(t, hits)
	assert.Positive(t, s.Stats().Evictions)
	s.checkInvariants(t)
	assert.LessOrEqual(t, s.Stats().UsedBytes, int64(16*testBS))
}
