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
