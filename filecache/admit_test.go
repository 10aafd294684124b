package filecache

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Objects of the admission tests: 16 blocks each, read 4 blocks at a time
// as a file reader would, fetching (and writing) what the cache misses.
const (
	admitBlocks = 16
	admitChunk  = 4
	admitSize   = admitBlocks * testBS
)

func admitObjs(prefix string, n int) []Key {
	objs := make([]Key, n)
	for i := range objs {
		objs[i] = obj(fmt.Sprintf("%s%d", prefix, i), admitSize)
	}
	return objs
}

// readAll reads each object whole, in order, writing the chunks that
// missed as readahead would, and returns the share of bytes that hit. It
// ends with an index commit, as a real epoch (longer than the commit
// interval) would: until its deletion is committed, an evicted object is
// not written again, which would hide churn.
func readAll(t *testing.T, s *Store, objs []Key) float64 {
	t.Helper()
	var hit, total int
	for _, o := range objs {
		for b := int64(0); b < admitBlocks; b += admitChunk {
			p := make([]byte, admitChunk*testBS)
			ok := make([]bool, admitChunk)
			n := s.ReadBlocks(o, b, p, ok)
			hit += n * testBS
			total += len(p)
			if n < admitChunk {
				s.WriteBlocks(o, b, blocksData(o, b, admitChunk, testBS))
			}
		}
	}
	require.NoError(t, s.flush())
	return float64(hit) / float64(total)
}

// A dataset larger than the cache, read epoch after epoch (in order, and
// shuffled), keeps a stable subset: from epoch 2 on, at least 90% of
// cache/dataset hits. Plain LRU hits nothing on the ordered scan.
func TestCyclicScanKeepsAStableSubset(t *testing.T) {
	const cached = 64 // objects the cache holds
	for _, tc := range []struct {
		ratio   float64 // dataset / cache
		shuffle bool
	}{{1.5, false}, {3, false}, {1.5, true}, {3, true}} {
		t.Run(fmt.Sprintf("ratio=%v/shuffle=%v", tc.ratio, tc.shuffle), func(t *testing.T) {
			s := openT(t, Config{Dir: t.TempDir(), MaxSize: cached * admitSize}, hooks{})
			objs := admitObjs("o", int(tc.ratio*cached))
			rng := rand.New(rand.NewPCG(1, 2))
			want := 0.9 / tc.ratio
			var refused int64
			for epoch := 1; epoch <= 5; epoch++ {
				order := objs
				if tc.shuffle {
					order = append([]Key(nil), objs...)
					rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
				}
				got := readAll(t, s, order)
				t.Logf("epoch %d: hit ratio %.3f (cache/dataset %.3f)", epoch, got, 1/tc.ratio)
				if epoch == 1 {
					assert.Zero(t, got)
				} else {
					assert.GreaterOrEqual(t, got, want, "epoch %d", epoch)
				}
				st := s.Stats()
				assert.LessOrEqual(t, st.UsedBytes, int64(cached*admitSize))
				// What did not fit is refused, every epoch the same in
				// order; shuffled, a few objects may change places.
				if over := int64(len(objs)-cached) * admitSize; tc.shuffle {
					assert.GreaterOrEqual(t, float64(st.RefusedBytes-refused), 0.9*float64(over), "epoch %d", epoch)
				} else {
					assert.Equal(t, over, st.RefusedBytes-refused, "epoch %d", epoch)
				}
				refused = st.RefusedBytes
			}
			s.checkInvariants(t)
		})
	}
}

// A working set that fits is never evicted: every epoch after the first
// hits every byte.
func TestFittingWorkingSetAlwaysHits(t *testing.T) {
	const cached = 64
	s := openT(t, Config{Dir: t.TempDir(), MaxSize: cached * admitSize}, hooks{})
	objs := admitObjs("o", cached)
	assert.Zero(t, readAll(t, s, objs))
	for epoch := 2; epoch <= 4; epoch++ {
		assert.Equal(t, 1.0, readAll(t, s, objs), "epoch %d", epoch)
	}
	assert.Zero(t, s.Stats().Evictions)
}

// A working set that moves on replaces the old one within a few passes:
// the old set's counts age while the cache misses the new one.
func TestShiftedWorkingSetReplacesTheOld(t *testing.T) {
	const cached = 64
	s := openT(t, Config{Dir: t.TempDir(), MaxSize: cached * admitSize}, hooks{})
	old := admitObjs("old", cached)
	for epoch := 0; epoch < 5; epoch++ {
		readAll(t, s, old)
	}
	require.Equal(t, 1.0, readAll(t, s, old))
	// A new set half the cache's size, read pass after pass.
	cur := admitObjs("new", cached/2)
	pass := 1
	for ; pass <= 8; pass++ {
		got := readAll(t, s, cur)
		t.Logf("pass %d over the new set: hit ratio %.3f", pass, got)
		if got == 1 {
			break
		}
	}
	assert.LessOrEqual(t, pass, 6, "the new set was not cached within 5 passes")
	// Once in, it stays, and what it displaced of the old set is gone.
	assert.Equal(t, 1.0, readAll(t, s, cur))
	assert.Equal(t, int64(cached/2), s.Stats().Evictions)
	s.checkInvariants(t)
}

// Entries left by an earlier run and not read since give way to new data
// at once, as with LRU: the admission test needs references this run.
func TestEntriesFromAnEarlierRunGiveWay(t *testing.T) {
	const cached = 64
	dir := t.TempDir()
	cfg := Config{Dir: dir, MaxSize: cached * admitSize}
	s := openT(t, cfg, hooks{})
	readAll(t, s, admitObjs("old", cached))
	require.NoError(t, s.Close())

	s = openT(t, cfg, hooks{})
	cur := admitObjs("new", cached/2)
	assert.Zero(t, readAll(t, s, cur))
	assert.Equal(t, 1.0, readAll(t, s, cur), "the new set was cached in its first pass")
	s.checkInvariants(t)
}

// A write refused admission still restores the free-space floor when
// another writer took the volume's space: the floor is not the policy's.
func TestRefusedWriteStillKeepsTheFloor(t *testing.T) {
	dir := t.TempDir()
	const volume, minFree = 64 * admitSize, 16 * admitSize
	var other int64
	statfs := func(string) (int64, int64, error) { return volume - other - du(t, dir), volume, nil }
	s := openT(t, Config{Dir: dir, MaxSize: 32 * admitSize, MinFree: minFree}, hooks{statfs: statfs})
	objs := admitObjs("o", 32)
	readAll(t, s, objs)
	require.Equal(t, 1.0, readAll(t, s, objs))

	other = 24 * admitSize // the volume now has 8 objects' room left
	fresh := obj("fresh", admitSize)
	assert.Zero(t, s.WriteBlocks(fresh, 0, blocksData(fresh, 0, admitChunk, testBS)), "a new object is not admitted over ones read twice")
	require.NoError(t, s.flush())
	assert.Equal(t, int64(admitChunk*testBS), s.Stats().RefusedBytes)
	free, _, _ := statfs("")
	assert.Equal(t, int64(minFree), free)
	assert.Equal(t, int64(8), s.Stats().Evictions)
	s.checkInvariants(t)
}

// An object three times the cache's size streams through: its first
// third stays cached, and every later pass hits it.
func TestObjectLargerThanTheCacheStreams(t *testing.T) {
	const cached = 4 // objects' worth
	s := openT(t, Config{Dir: t.TempDir(), MaxSize: cached * admitSize}, hooks{})
	big := obj("big", 3*cached*admitSize)
	read := func() float64 {
		var hit, total int
		for b := int64(0); b < 3*cached*admitBlocks; b += admitChunk {
			p := make([]byte, admitChunk*testBS)
			n := s.ReadBlocks(big, b, p, make([]bool, admitChunk))
			hit, total = hit+n*testBS, total+len(p)
			if n < admitChunk {
				s.WriteBlocks(big, b, blocksData(big, b, admitChunk, testBS))
			}
		}
		require.NoError(t, s.flush())
		return float64(hit) / float64(total)
	}
	assert.Zero(t, read())
	for pass := 2; pass <= 3; pass++ {
		assert.InDelta(t, 1.0/3, read(), 0.001, "pass %d", pass)
	}
	assert.Equal(t, int64(cached*admitSize), s.Stats().UsedBytes)
	s.checkInvariants(t)
}
