package filecache

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIntegrityFlippedByte(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Config{Dir: dir}, hooks{})
	o := obj("x", 4*testBS)
	require.Equal(t, 4, s.WriteBlocks(o, 0, blocksData(o, 0, 4, testBS)))
	s.mu.Lock()
	path := s.pathFor(s.keyFor(o))
	s.mu.Unlock()

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	b := make([]byte, 1)
	_, err = f.ReadAt(b, testBS+123)
	require.NoError(t, err)
	b[0] ^= 0x40
	_, err = f.WriteAt(b, testBS+123)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	assert.True(t, readOK(t, s, o, 0))
	assert.False(t, readOK(t, s, o, 1), "corrupt block is never served")
	assert.False(t, s.HasBlock(o, 1), "and is dropped")
	assert.EqualValues(t, 1, s.Stats().CorruptBlocks)
	assert.True(t, readOK(t, s, o, 2))

	// A fresh write repairs it.
	require.Equal(t, 1, s.WriteBlocks(o, 1, blockData(o, 1, testBS)))
	assert.True(t, readOK(t, s, o, 1))
	s.checkInvariants(t)

	// Truncation behind our back (a lost tail) is caught the same way.
	require.NoError(t, os.Truncate(path, 3*testBS+5))
	assert.False(t, readOK(t, s, o, 3))
	assert.EqualValues(t, 2, s.Stats().CorruptBlocks)
	s.checkInvariants(t)
}

// TestReadBlocksStoppedShort: when one read of a run stops early (here a
// file truncated behind our back), the blocks before are served and every
// block from the stop on is dropped, so that the next write of them
// repairs the cache (WriteBlocks skips blocks still marked present).
func TestReadBlocksStoppedShort(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir()}, hooks{})
	o := obj("x", 8*testBS)
	require.Equal(t, 8, s.WriteBlocks(o, 0, blocksData(o, 0, 8, testBS)))
	s.mu.Lock()
	path := s.pathFor(s.keyFor(o))
	s.mu.Unlock()
	require.NoError(t, os.Truncate(path, 3*testBS+100))

	ok := make([]bool, 8)
	assert.Equal(t, 3, s.ReadBlocks(o, 0, make([]byte, 8*testBS), ok))
	assert.Equal(t, []bool{true, true, true, false, false, false, false, false}, ok)
	for i := int64(3); i < 8; i++ {
		assert.False(t, s.HasBlock(o, i), "block %d is dropped", i)
	}
	assert.EqualValues(t, 5, s.Stats().CorruptBlocks)
	assert.Equal(t, 5, s.WriteBlocks(o, 3, blocksData(o, 3, 5, testBS)), "and written again")
	for i := int64(0); i < 8; i++ {
		assert.True(t, readOK(t, s, o, i), "block %d", i)
	}
	s.checkInvariants(t)
}

// TestReadBlocks: one read of several blocks fills exactly the present,
// intact ones; a corrupt block among them is dropped, the others served.
func TestReadBlocks(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir()}, hooks{})
	o := obj("x", 8*testBS+10) // 9 blocks, the last short
	require.Equal(t, 3, s.WriteBlocks(o, 1, blocksData(o, 1, 3, testBS)))
	require.Equal(t, 3, s.WriteBlocks(o, 6, blocksData(o, 6, 3, testBS)))
	s.mu.Lock()
	path := s.pathFor(s.keyFor(o))
	s.mu.Unlock()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{0xff, 0x00, 0xff}, 2*testBS+77) // block 2
	require.NoError(t, err)
	require.NoError(t, f.Close())

	all := blocksData(o, 0, 9, testBS)
	p := make([]byte, len(all))
	ok := make([]bool, 9)
	assert.Equal(t, 5, s.ReadBlocks(o, 0, p, ok))
	assert.Equal(t, []bool{false, true, false, true, false, false, true, true, true}, ok)
	for i, good := range ok {
		if good {
			lo, hi := i*testBS, min((i+1)*testBS, len(all))
			assert.Equal(t, all[lo:hi], p[lo:hi], "block %d", i)
		}
	}
	assert.False(t, s.HasBlock(o, 2), "the corrupt block is dropped")
	assert.EqualValues(t, 1, s.Stats().CorruptBlocks)

	// Wrong lengths read nothing.
	assert.Zero(t, s.ReadBlocks(o, 0, p[:len(p)-1], ok))
	assert.Zero(t, s.ReadBlocks(o, 6, make([]byte, 3*testBS), make([]bool, 3)), "block 8 is short")
	assert.Equal(t, 2, s.ReadBlocks(o, 6, make([]byte, 2*testBS), make([]bool, 2)))
	s.checkInvariants(t)
}

func TestEvictWhileReading(t *testing.T) {
	dir := t.TempDir()
	var s *Store
	a, b := obj("a", 4*testBS), obj("b", 4*testBS)
	evictA := func() {
		// Fill the cache with b: a, the least recently used, must go.
		require.Equal(t, 4, s.WriteBlocks(b, 0, blocksData(b, 0, 4, testBS)))
		require.False(t, s.HasBlock(a, 0))
	}
	s = openT(t, Config{Dir: dir, MaxSize: 5 * testBS}, hooks{})
	require.Equal(t, 4, s.WriteBlocks(a, 0, blocksData(a, 0, 4, testBS)))
	aPath := s.pathFor(s.keyFor(a))
	s.hooks.beforeRead = func() {
		s.hooks.beforeRead = nil
		evictA()
		_, err := os.Stat(aPath)
		assert.NoError(t, err, "a pinned file is not unlinked under its reader")
	}
	// The read started before the eviction: its bytes are a's (CRC
	// checked) or it misses; never anything else.
	readOK(t, s, a, 2)
	_, err := os.Stat(aPath)
	assert.ErrorIs(t, err, os.ErrNotExist, "the last reader unlinks")
	assert.False(t, readOK(t, s, a, 2))
	assert.Zero(t, s.WriteBlocks(a, 0, blocksData(a, 0, 1, testBS)), "no new file until the deletion is committed")
	require.NoError(t, s.flush())
	s.checkInvariants(t)
	assert.Empty(t, s.deleting)
	assert.Equal(t, 1, s.WriteBlocks(a, 0, blocksData(a, 0, 1, testBS)))
	assert.True(t, readOK(t, s, a, 0))
	assert.True(t, s.HasBlock(b, 0), "4+1 blocks fit")
	s.checkInvariants(t)
	assert.Equal(t, du(t, dir), s.Stats().UsedBytes)
}

// TestWillRead: the read advice touches no state: unknown objects and
// empty ranges are ignored, and a cached entry reads back unchanged.
func TestWillRead(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir()}, hooks{})
	o := obj("o", 4*testBS)
	s.WillRead(o, 0, 4) // not cached yet: nothing to advise
	require.Equal(t, 4, s.WriteBlocks(o, 0, blocksData(o, 0, 4, testBS)))
	before := s.Stats()
	s.WillRead(o, 1, 3)
	s.WillRead(o, 0, 0)
	s.WillRead(Key{}, 0, 1)
	assert.Equal(t, before, s.Stats(), "advice counts as neither hit nor miss")
	for i := range int64(4) {
		assert.True(t, readOK(t, s, o, i))
	}
	s.checkInvariants(t)
}
