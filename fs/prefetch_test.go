package fs

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jacobsa/fuse/fuseops"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDirPrefetch: after a few lookup misses in one directory, a
// background listing answers every other lookup there, positive or
// negative, without a request.
func TestDirPrefetch(t *testing.T) {
	b := newTestBucket()
	for i := range 50 {
		b.put(fmt.Sprintf("d/f%02d", i), []byte("x"))
	}
	fs := newTestFS(t, b, nil, nil)
	fs.prefetch.enabled = true

	d, err := lookUp(fs, fuseops.RootInodeID, "d")
	require.NoError(t, err)
	for i := range prefetchAfterMisses {
		_, err := lookUp(fs, d.Child, fmt.Sprintf("f%02d", i))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { _, ok := fs.cache.listing("d"); return ok }, 10*time.Second, time.Millisecond)

	before := b.requests()
	for i := prefetchAfterMisses; i < 50; i++ {
		e, err := lookUp(fs, d.Child, fmt.Sprintf("f%02d", i))
		require.NoError(t, err)
		assert.EqualValues(t, 1, e.Attributes.Size)
	}
	_, err = lookUp(fs, d.Child, "missing")
	assert.Equal(t, syscall.ENOENT, err)
	assert.Equal(t, before, b.requests(), "lookups after the prefetch reached the store")
}

// TestDirPrefetchOffWithoutTTL: with metadata caching off there is
// nowhere to keep a listing, so nothing is prefetched.
func TestDirPrefetchOffWithoutTTL(t *testing.T) {
	b := newTestBucket()
	for i := range 10 {
		b.put(fmt.Sprintf("f%02d", i), []byte("x"))
	}
	fs := newTestFS(t, b, nil, func(c *Config) { c.MetadataTTL, c.NegativeTTL = 0, 0 })
	fs.prefetch = newDirPrefetcher(fs)
	require.False(t, fs.prefetch.enabled)
	for i := range 10 {
		_, err := lookUp(fs, fuseops.RootInodeID, fmt.Sprintf("f%02d", i))
		require.NoError(t, err)
	}
	fs.prefetch.stop()
	assert.EqualValues(t, 20, b.requests(), "a Stat and a List per lookup, no listing")
}

// A directory too large to cache is not listed again at every few misses:
// each try costs maxEntries/1000 requests for nothing.
func TestDirPrefetchTooLargeNotRetried(t *testing.T) {
	b := newTestBucket()
	for i := range 30 {
		b.put(fmt.Sprintf("d/f%02d", i), []byte("x"))
	}
	clock := newFakeClock()
	fs := newTestFS(t, b, clock, func(c *Config) { c.ListPageSize = 5 })
	fs.prefetch.enabled = true
	fs.prefetch.maxEntries = 10
	listings := func() int64 { return b.Stats().Lists }

	fs.prefetch.want("d")
	require.Eventually(t, func() bool {
		fs.prefetch.mu.Lock()
		defer fs.prefetch.mu.Unlock()
		return !fs.prefetch.inflight["d"] && !fs.prefetch.tooLarge["d"].IsZero()
	}, 10*time.Second, time.Millisecond)
	_, ok := fs.cache.listing("d")
	assert.False(t, ok, "too large to cache")
	n := listings()
	assert.Positive(t, n)

	fs.prefetch.want("d")
	for range prefetchAfterMisses {
		fs.prefetch.miss("d")
	}
	fs.prefetch.mu.Lock()
	assert.False(t, fs.prefetch.inflight["d"], "not listed again")
	fs.prefetch.mu.Unlock()

	clock.Advance(prefetchTooLargeFor)
	fs.prefetch.want("d")
	require.Eventually(t, func() bool { return listings() > n }, 10*time.Second, time.Millisecond, "tried again later")
}
