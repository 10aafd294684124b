package filecache

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// spliceOK calls Spliceable for [off, off+n) of o and, if it hands out a
// file, checks that the file holds the object's bytes there; then
// releases it. Returns whether it handed one out.
func spliceOK(t *testing.T, s *Store, o Key, off, n int64) bool {
	t.Helper()
	f, release, ok := s.Spliceable(o, off, n)
	if !ok {
		assert.Nil(t, f)
		return false
	}
	defer release()
	got := make([]byte, n)
	_, err := f.ReadAt(got, off)
	require.NoError(t, err)
	all := blocksData(o, 0, numBlocks(o.Size, testBS), testBS)
	require.Equal(t, all[off:off+n], got, "Spliceable(%s, %d, %d) handed out other bytes", o.Name, off, n)
	return true
}

// readBlocks reads blocks [first, first+n) of o through ReadBlocks and
// requires them all good.
func readBlocks(t *testing.T, s *Store, o Key, first, n int64) {
	t.Helper()
	p := blocksData(o, first, n, testBS)
	ok := make([]bool, n)
	require.EqualValues(t, n, s.ReadBlocks(o, first, make([]byte, len(p)), ok))
}

// Only blocks read (and so checked) through the store since it opened
// may be spliced, and only a range wholly of such blocks; never with
// Config.Splice off.
func TestSpliceableOnlyCheckedBlocks(t *testing.T) {
	dir := t.TempDir()
	o := obj("o", 4*testBS+100) // a short last block
	s := openT(t, Config{Dir: dir, Splice: true}, hooks{})
	require.Equal(t, 5, s.WriteBlocks(o, 0, blocksData(o, 0, 5, testBS)))
	assert.False(t, spliceOK(t, s, o, 0, 10), "written, not read")
	readBlocks(t, s, o, 1, 2)
	assert.True(t, spliceOK(t, s, o, testBS, 2*testBS))
	assert.True(t, spliceOK(t, s, o, testBS+7, testBS))
	assert.False(t, spliceOK(t, s, o, testBS-1, 2), "block 0 was not read")
	assert.False(t, spliceOK(t, s, o, 2*testBS, testBS+1), "block 3 was not read")
	readBlocks(t, s, o, 3, 2)
	assert.True(t, spliceOK(t, s, o, testBS, 3*testBS+100))
	assert.False(t, spliceOK(t, s, o, 4*testBS, 101), "past the object's end")
	assert.False(t, spliceOK(t, s, o, 4*testBS, 0))
	st := s.Stats()
	// Whole blocks, as ReadBlocks counts them: 2 + 2 + 4.
	assert.EqualValues(t, 7*testBS+100, st.SplicedBytes)
	assert.EqualValues(t, 8, st.SplicedBlocks)
	s.checkInvariants(t)
	require.NoError(t, s.Close())

	// A new store (a new mount) trusts nothing read before it.
	s = openT(t, Config{Dir: dir, Splice: true}, hooks{})
	assert.False(t, spliceOK(t, s, o, testBS, 10))
	readBlocks(t, s, o, 1, 1)
	assert.True(t, spliceOK(t, s, o, testBS, 10))
	require.NoError(t, s.Close())

	s = openT(t, Config{Dir: dir}, hooks{})
	readBlocks(t, s, o, 1, 1)
	assert.False(t, spliceOK(t, s, o, testBS, 10), "Splice off")
}

// A write to the data file by anyone but the store, checked block or
// not, takes back every block checked: they are read and checked again,
// and the bad one is caught.
func TestSpliceableSeesAChangedFile(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir(), Splice: true}, hooks{})
	o := obj("o", 4*testBS)
	require.Equal(t, 4, s.WriteBlocks(o, 0, blocksData(o, 0, 4, testBS)))
	readBlocks(t, s, o, 0, 4)
	require.True(t, spliceOK(t, s, o, 0, 4*testBS))
	corruptAt(t, s, o, 2*testBS+5)
	assert.False(t, spliceOK(t, s, o, 0, testBS), "a block the write missed")
	assert.False(t, spliceOK(t, s, o, 2*testBS, testBS))
	assert.False(t, readOK(t, s, o, 2), "the bad block is caught")
	assert.EqualValues(t, 1, s.Stats().CorruptBlocks)
	readBlocks(t, s, o, 0, 2)
	assert.True(t, spliceOK(t, s, o, 0, 2*testBS))
	assert.False(t, spliceOK(t, s, o, 2*testBS, testBS), "dropped")

	// Truncated behind the store's back.
	readBlocks(t, s, o, 3, 1)
	require.True(t, spliceOK(t, s, o, 3*testBS, testBS))
	require.NoError(t, os.Truncate(s.pathFor(s.keyFor(o)), 3*testBS))
	assert.False(t, spliceOK(t, s, o, 0, testBS))
	assert.False(t, spliceOK(t, s, o, 3*testBS, testBS))
	assert.False(t, readOK(t, s, o, 3), "cut off")
	s.checkInvariants(t)
}

// The store's own writes to a file keep what was checked in it, one
// write at a time; a block dropped as bad is no longer handed out.
func TestSpliceableFollowsTheStoresWrites(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir(), Splice: true}, hooks{})
	o := obj("o", 6*testBS)
	require.Equal(t, 2, s.WriteBlocks(o, 0, blocksData(o, 0, 2, testBS)))
	readBlocks(t, s, o, 0, 2)
	require.Equal(t, 2, s.WriteBlocks(o, 3, blocksData(o, 3, 2, testBS)))
	assert.True(t, spliceOK(t, s, o, 0, 2*testBS), "after the store's own write")
	assert.False(t, spliceOK(t, s, o, 3*testBS, testBS), "written, not read")

	// Then another process writes block 1, and the store block 5: the
	// stamp before the store's write is not the one checked under.
	corruptAt(t, s, o, testBS+1)
	require.Equal(t, 1, s.WriteBlocks(o, 5, blocksData(o, 5, 1, testBS)))
	assert.False(t, spliceOK(t, s, o, 0, testBS))
	assert.False(t, readOK(t, s, o, 1))
	readBlocks(t, s, o, 0, 1)
	assert.True(t, spliceOK(t, s, o, 0, testBS))
}

// While a read check of a whole file runs, its reads must go through
// ReadBlocks to count: nothing is handed out.
func TestSpliceableNotDuringAReadCheck(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir(), Splice: true}, hooks{})
	o := obj("o", 3*testBS)
	require.Equal(t, 3, s.WriteBlocks(o, 0, blocksData(o, 0, 3, testBS)))
	readBlocks(t, s, o, 0, 1)
	require.True(t, spliceOK(t, s, o, 0, testBS))
	checkAsRead(t, s, o)
	assert.False(t, spliceOK(t, s, o, 0, testBS))
	readBlocks(t, s, o, 0, 3) // ends the check
	assert.True(t, isChecked(t, s, o))
	assert.True(t, spliceOK(t, s, o, 0, 3*testBS))
}

// A handed-out file stays until release, though its entry is evicted.
func TestSpliceablePinsTheFile(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir(), Splice: true}, hooks{})
	o := obj("o", 2*testBS)
	require.Equal(t, 2, s.WriteBlocks(o, 0, blocksData(o, 0, 2, testBS)))
	readBlocks(t, s, o, 0, 2)
	f, release, ok := s.Spliceable(o, 0, 2*testBS)
	require.True(t, ok)
	n, _ := s.Drop(func(string) bool { return true })
	assert.Equal(t, 1, n)
	got := make([]byte, 2*testBS)
	_, err := f.ReadAt(got, 0)
	require.NoError(t, err, "the file went while handed out")
	assert.Equal(t, blocksData(o, 0, 2, testBS), got)
	release()
	assert.False(t, spliceOK(t, s, o, 0, testBS), "evicted")
	s.checkInvariants(t)
}

// Readers, writers, splicers and evictions at once (under -race), then
// damage behind the store's back, then all of them again: every byte
// handed out is right.
func TestSpliceableConcurrent(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir(), MaxSize: 12 * testBS, Splice: true}, hooks{maxOpen: 2})
	var objs []Key
	for i := range 4 {
		objs = append(objs, obj(fmt.Sprintf("o%d", i), 6*testBS-10))
	}
	var spliced atomic.Int64
	phase := func(round uint64) {
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, round))
				for range 400 {
					o := objs[r.IntN(len(objs))]
					idx := r.Int64N(6)
					switch r.IntN(6) {
					case 0, 1:
						s.WriteBlocks(o, idx, blocksData(o, idx, 1, testBS))
					case 2, 3:
						p := make([]byte, len(blockData(o, idx, testBS)))
						var ok [1]bool
						if s.ReadBlocks(o, idx, p, ok[:]) == 1 && !assert.Equal(t, blockData(o, idx, testBS), p) {
							return
						}
					default:
						off := idx*testBS + r.Int64N(testBS)
						n := min(r.Int64N(2*testBS)+1, int64(o.Size)-off)
						if n <= 0 {
							continue
						}
						f, release, ok := s.Spliceable(o, off, n)
						if !ok {
							continue
						}
						got := make([]byte, n)
						_, err := f.ReadAt(got, off)
						release()
						all := blocksData(o, 0, 6, testBS)
						if !assert.NoError(t, err) || !assert.Equal(t, all[off:off+n], got, "%s [%d, %d)", o.Name, off, off+n) {
							return
						}
						spliced.Add(1)
					}
				}
			}(uint64(g))
		}
		wg.Wait()
		s.checkInvariants(t)
	}
	phase(1)
	r := rand.New(rand.NewPCG(9, 9))
	damaged := 0
	for _, o := range objs {
		for idx := range int64(6) {
			if s.HasBlock(o, idx) && r.IntN(2) == 0 {
				corruptAt(t, s, o, idx*testBS+r.Int64N(testBS-10))
				damaged++
			}
		}
	}
	phase(2)
	t.Logf("spliced %d, damaged %d, stats %+v", spliced.Load(), damaged, s.Stats())
	assert.Positive(t, spliced.Load())
	assert.Positive(t, damaged)
}

// A checked block that fails its CRC later with the file unchanged (the
// disk returned other bytes) is dropped, and not handed out after.
func TestSpliceableForgetsADroppedBlock(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir(), Splice: true}, hooks{})
	o := obj("o", 3*testBS)
	require.Equal(t, 3, s.WriteBlocks(o, 0, blocksData(o, 0, 3, testBS)))
	readBlocks(t, s, o, 0, 3)
	require.True(t, spliceOK(t, s, o, 0, 3*testBS))
	// The bytes on disk no longer match the CRC recorded for block 1.
	s.lockLookup(o).crcs[1] ^= 1
	s.mu.Unlock()
	assert.False(t, readOK(t, s, o, 1))
	assert.False(t, spliceOK(t, s, o, testBS, 1))
	assert.True(t, spliceOK(t, s, o, 0, testBS))
	s.checkInvariants(t)
}

// A failed write by the store to a file keeps nothing checked in it: it
// may have left torn bytes. Release may be called twice.
func TestSpliceableAfterAFailedWrite(t *testing.T) {
	var fail atomic.Bool
	s := openT(t, Config{Dir: t.TempDir(), Splice: true}, hooks{
		writeAt: func(f *os.File, p []byte, off int64) (int, error) {
			if fail.Load() {
				return 0, syscall.ENOSPC
			}
			return f.WriteAt(p, off)
		},
	})
	o := obj("o", 4*testBS)
	require.Equal(t, 2, s.WriteBlocks(o, 0, blocksData(o, 0, 2, testBS)))
	readBlocks(t, s, o, 0, 2)
	_, release, ok := s.Spliceable(o, 0, testBS)
	require.True(t, ok)
	release()
	release()
	s.checkInvariants(t)
	fail.Store(true)
	assert.Zero(t, s.WriteBlocks(o, 2, blocksData(o, 2, 2, testBS)))
	assert.False(t, spliceOK(t, s, o, 0, testBS))
	readBlocks(t, s, o, 0, 1)
	assert.True(t, spliceOK(t, s, o, 0, testBS))
}
