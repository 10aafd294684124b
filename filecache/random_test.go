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
			m := newRandomModel(t, seed)
			for step := 0; step < 500; step++ {
				o := m.objs[m.r.IntN(len(m.objs))]
				switch op := m.r.IntN(11); {
				case op < 4:
					m.write(o)
				case op < 7:
					m.readThenSplice(o)
				case op < 8:
					m.splice(o)
				case op < 9:
					m.corrupt(o)
				case op < 10:
					m.checkAsRead(o)
				case m.r.IntN(3) == 0:
					// Reopen (every 33 steps or so: what reads check
					// is forgotten with it).
					require.NoError(t, m.s.Close())
					m.s = openT(t, m.cfg, m.h)
				}
				m.check()
			}
			t.Logf("ranges handed out to splice: %d", m.handedOut)
		})
	}
}

// randomModel is TestRandomOperations' store, and what it knows of it.
type randomModel struct {
	t    *testing.T
	r    *rand.Rand
	cfg  Config
	h    hooks
	s    *Store
	objs []Key
	// written[o][i]: written since the last loss we know of.
	written   map[Key]map[int64]bool
	handedOut int // ranges Spliceable handed out
}

func newRandomModel(t *testing.T, seed uint64) *randomModel {
	r := rand.New(rand.NewPCG(seed, 99))
	cfg := Config{Dir: t.TempDir(), MaxSize: 24 * testBS, Splice: true}
	h := hooks{maxOpen: 3}
	m := &randomModel{t: t, r: r, cfg: cfg, h: h, s: openT(t, cfg, h), written: map[Key]map[int64]bool{}}
	for i := 0; i < 8; i++ {
		m.objs = append(m.objs, obj(fmt.Sprintf("o%d", i), uint64(r.IntN(10*testBS)+1)))
	}
	for _, o := range m.objs {
		m.written[o] = map[int64]bool{}
	}
	return m
}

// write writes up to 4 blocks of o, from a random one.
func (m *randomModel) write(o Key) {
	nb := numBlocks(o.Size, testBS)
	first := m.r.Int64N(nb)
	count := m.r.Int64N(min(4, nb-first)) + 1
	n := m.s.WriteBlocks(o, first, blocksData(o, first, count, testBS))
	require.LessOrEqual(m.t, int64(n), count)
	for i := first; i < first+int64(n); i++ {
		m.written[o][i] = true
	}
}

// readThenSplice reads a random block of o and, if it was a hit, asks to
// splice part of it.
func (m *randomModel) readThenSplice(o Key) {
	idx := m.r.Int64N(numBlocks(o.Size, testBS))
	if !readOK(m.t, m.s, o, idx) {
		return
	}
	require.True(m.t, m.written[o][idx], "a block never written was served")
	// Now checked: part of it may be spliced.
	off := idx*testBS + m.r.Int64N(min(testBS, int64(o.Size)-idx*testBS))
	n := min(m.r.Int64N(testBS)+1, int64(o.Size)-off, (idx+1)*testBS-off)
	if spliceOK(m.t, m.s, o, off, n) {
		m.handedOut++
	}
}

// splice asks to splice a random range of o: one handed out holds the
// object's bytes, of blocks written.
func (m *randomModel) splice(o Key) {
	// Mostly within a block, as most reads are.
	off := m.r.Int64N(int64(o.Size))
	n := min(m.r.Int64N(testBS)+1, int64(o.Size)-off)
	if m.r.IntN(4) == 0 {
		n = m.r.Int64N(int64(o.Size)-off) + 1
	}
	if !spliceOK(m.t, m.s, o, off, n) {
		return
	}
	m.handedOut++
	for i := off / testBS; i <= (off+n-1)/testBS; i++ {
		require.True(m.t, m.written[o][i], "a block never written was handed out")
	}
}

// corrupt damages the last present block of o on disk: reads must then
// miss it, and it is no longer present.
func (m *randomModel) corrupt(o Key) {
	s := m.s
	s.mu.Lock()
	e := s.entries[s.keyFor(o)]
	var path string
	var idx int64 = -1
	if e != nil {
		path = s.pathFor(e.key)
		for i := int64(0); i < e.nblocks; i++ {
			if e.present.get(i) {
				idx = i
			}
		}
	}
	s.mu.Unlock()
	if idx < 0 {
		return
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(m.t, err)
	_, err = f.WriteAt([]byte{byte(m.r.Uint32()) | 1, 0xff}, idx*testBS)
	require.NoError(m.t, err)
	f.Close()
	assert.False(m.t, readOK(m.t, s, o, idx))
	assert.False(m.t, s.HasBlock(o, idx))
	m.written[o][idx] = false
}

// checkAsRead asks reads to check o, if it is whole; if they have, its
// bytes are the object's.
func (m *randomModel) checkAsRead(o Key) {
	w, ok := m.s.Whole(o)
	if !ok {
		return
	}
	if w.Checked() {
		got, err := io.ReadAll(io.NewSectionReader(w.File(), 0, int64(o.Size)))
		require.NoError(m.t, err)
		require.Equal(m.t, blocksData(o, 0, numBlocks(o.Size, testBS), testBS), got, "Checked, with other bytes")
	}
	w.CheckAsRead()
	w.Release()
}

// check checks the store's invariants, its limit, and that every block
// present was written.
func (m *randomModel) check() {
	m.s.checkInvariants(m.t)
	require.LessOrEqual(m.t, m.s.Stats().UsedBytes, m.cfg.MaxSize)
	for _, o := range m.objs {
		for i := int64(0); i < numBlocks(o.Size, testBS); i++ {
			if m.s.HasBlock(o, i) {
				require.True(m.t, m.written[o][i], "%s block %d present but not written", o.Name, i)
			}
		}
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
