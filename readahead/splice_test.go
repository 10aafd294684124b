package readahead

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/filecache"
)

// spliceCheck calls h.Spliceable and, if it hands out a file, checks the
// bytes there and the count; then releases it.
func spliceCheck(t *testing.T, b *fakeBucket, h *Handle, off, size int64) bool {
	t.Helper()
	f, n, release, ok := h.Spliceable(off, int(size))
	if !ok {
		assert.Nil(t, f)
		return false
	}
	defer release()
	require.Equal(t, int(min(size, int64(h.obj.Size)-off)), n)
	got := make([]byte, n)
	_, err := f.ReadAt(got, off)
	require.NoError(t, err)
	require.Equal(t, want(b.seed(h.obj.Name), off, int64(n)), got)
	return true
}

// A handle hands out what the disk cache has checked: not what it
// fetched and wrote, nor what a store without Splice holds; the reads it
// answers count as reads.
func TestSpliceable(t *testing.T) {
	b := newFakeBucket()
	obj := b.put("o", 1*MiB+100)
	dir := t.TempDir()
	store, err := filecache.Open(filecache.Config{Dir: dir, BlockSize: 64 * KiB, MaxSize: 64 * MiB, Splice: true})
	require.NoError(t, err)
	defer store.Close()
	cfg := Config{Bucket: b, Cache: store, MemoryLimit: 64 * MiB}

	f := newTestFetcher(t, cfg)
	h := f.open(obj)
	assert.False(t, spliceCheck(t, b, h, 0, 100), "nothing cached")
	readCheck(t, b, h, 0, 256*KiB)
	readCheck(t, b, h, 1*MiB, 100)
	assert.False(t, spliceCheck(t, b, h, 0, 100), "fetched and written, not read from disk")
	h.Close()
	f.Close()

	// Another fetcher (nothing in memory) reads the blocks from disk.
	f = newTestFetcher(t, cfg)
	h = f.open(obj)
	defer h.Close()
	readCheck(t, b, h, 0, 256*KiB)
	readCheck(t, b, h, 1*MiB, 100)
	before := f.Stats()
	assert.True(t, spliceCheck(t, b, h, 10, 200*KiB))
	assert.True(t, spliceCheck(t, b, h, 1*MiB, 4096), "clipped at the end")
	assert.False(t, spliceCheck(t, b, h, 200*KiB, 100*KiB), "part not cached")
	assert.False(t, spliceCheck(t, b, h, 2*MiB, 10), "past the end")
	after := f.Stats()
	assert.EqualValues(t, 200*KiB+100, after.BytesRead-before.BytesRead)
	assert.EqualValues(t, 200*KiB+100, after.CacheHitBytes-before.CacheHitBytes)
	h.Close()
	assert.False(t, spliceCheck(t, b, h, 10, 100), "closed")

	// Without a disk cache, or with one that does not splice.
	g := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 64 * MiB})
	hg := g.open(obj)
	defer hg.Close()
	readCheck(t, b, hg, 0, 4096)
	assert.False(t, spliceCheck(t, b, hg, 0, 100))
}

// readRandomly is ReadRandomly of a handle that has read enough to tell.
func readRandomly(t *testing.T, h *Handle) bool {
	t.Helper()
	random, known := h.ReadRandomly()
	require.True(t, known, "too few reads to tell")
	return random
}

// ReadRandomly tells a reader of large records at random offsets from a
// sequential one, a small-read one, and one that read little; reads
// answered by Spliceable count.
func TestReadRandomly(t *testing.T) {
	b := newFakeBucket()
	obj := b.put("o", 64*MiB)
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 64 * MiB, BlockSize: 64 * KiB})
	read := func(h *Handle, off, n int64) {
		_, err := h.ReadAt(context.Background(), make([]byte, n), off)
		require.NoError(t, err)
	}
	random := []int64{40, 3, 17, 60, 9, 28, 51, 33}

	h := f.open(obj)
	for _, mib := range random[:3] {
		read(h, mib*MiB, 512*KiB)
	}
	random3, known := h.ReadRandomly()
	assert.False(t, known, "three reads")
	assert.False(t, random3)
	read(h, random[3]*MiB, 512*KiB)
	assert.True(t, readRandomly(t, h))
	h.Close()

	h = f.open(obj)
	for i := range int64(16) {
		read(h, i*128*KiB, 128*KiB)
	}
	assert.False(t, readRandomly(t, h), "sequential")
	h.Close()

	h = f.open(obj)
	for _, mib := range random {
		read(h, mib*MiB+5, 4*KiB)
	}
	assert.False(t, readRandomly(t, h), "small reads")
	h.Close()

	// A quarter sequential still counts as random; half does not. (The
	// run starts past every other read: a read up to 16 MiB behind a
	// stream's cursor is taken as reordered, DefaultReorderTolerance.)
	h = f.open(obj)
	for _, mib := range random[:6] {
		read(h, mib*MiB, 256*KiB)
	}
	// 60 MiB: seq 2, then 3 (sequential from the third read in a row).
	read(h, 60*MiB+256*KiB, 256*KiB)
	read(h, 60*MiB+512*KiB, 256*KiB)
	assert.True(t, readRandomly(t, h), "7 of 8 random")
	for i := range int64(6) {
		read(h, 60*MiB+(3+i)*256*KiB, 256*KiB)
	}
	assert.False(t, readRandomly(t, h), "7 of 14 random")
	h.Close()
}

// Reads answered by Spliceable feed the detector: sequential ones are
// not random, random ones are.
func TestSpliceableFeedsTheDetector(t *testing.T) {
	b := newFakeBucket()
	obj := b.put("o", 8*MiB)
	store, err := filecache.Open(filecache.Config{Dir: t.TempDir(), BlockSize: 64 * KiB, MaxSize: 64 * MiB, Splice: true})
	require.NoError(t, err)
	defer store.Close()
	cfg := Config{Bucket: b, Cache: store, MemoryLimit: 64 * MiB}
	f := newTestFetcher(t, cfg)
	h := f.open(obj)
	readCheck(t, b, h, 0, 8*MiB)
	h.Close()
	f.Close()
	f = newTestFetcher(t, cfg)
	h = f.open(obj)
	readCheck(t, b, h, 0, 8*MiB) // from disk: checked
	h.Close()

	h = f.open(obj)
	for _, k := range []int64{7, 2, 5, 0, 3, 6} {
		require.True(t, spliceCheck(t, b, h, k*MiB+11, 512*KiB))
	}
	assert.True(t, readRandomly(t, h))
	h.Close()
	h = f.open(obj)
	for i := range int64(12) {
		require.True(t, spliceCheck(t, b, h, i*512*KiB, 512*KiB))
	}
	assert.False(t, readRandomly(t, h))
	h.Close()
}
