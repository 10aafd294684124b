package metadata

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket/mem"
)

// After a few misses in one directory, a background listing answers
// every other resolve there, positive or negative, without a request.
func TestDirPrefetch(t *testing.T) {
	b := mem.New("b")
	for i := range 50 {
		put(t, b, fmt.Sprintf("d/f%02d", i), "x")
	}
	c := newTestCache(t, b, nil, func(cfg *Config) { cfg.ListAfterMisses = 0 })
	ctx := context.Background()
	for i := range prefetchAfterMisses {
		_, err := c.Resolve(ctx, fmt.Sprintf("d/f%02d", i))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { _, ok := c.Listing("d"); return ok }, 10*time.Second, time.Millisecond)

	before := requests(b)
	for i := prefetchAfterMisses; i < 50; i++ {
		e, err := c.Resolve(ctx, fmt.Sprintf("d/f%02d", i))
		require.NoError(t, err)
		assert.EqualValues(t, 1, e.Obj.Size)
	}
	e, err := c.Resolve(ctx, "d/missing")
	require.NoError(t, err)
	assert.Equal(t, None, e.Kind)
	assert.Equal(t, before, requests(b), "resolves after the prefetch reached the store")
}

// With metadata caching off there is nowhere to keep a listing, so
// nothing is prefetched.
func TestDirPrefetchOffWithoutTTL(t *testing.T) {
	b := mem.New("b")
	for i := range 10 {
		put(t, b, fmt.Sprintf("f%02d", i), "x")
	}
	c := newTestCache(t, b, nil, func(cfg *Config) { cfg.TTL, cfg.NegativeTTL, cfg.ListAfterMisses = 0, 0, 0 })
	require.False(t, c.prefetch.enabled)
	for i := range 10 {
		_, err := c.Resolve(context.Background(), fmt.Sprintf("f%02d", i))
		require.NoError(t, err)
	}
	assert.False(t, c.ListSoon(""))
	c.Close()
	assert.EqualValues(t, 20, requests(b), "a Stat and a List per resolve, no listing")
}

// A directory too large to cache is not listed again at every few misses:
// each try costs maxEntries/1000 requests for nothing.
func TestDirPrefetchTooLargeNotRetried(t *testing.T) {
	b := mem.New("b")
	for i := range 30 {
		put(t, b, fmt.Sprintf("d/f%02d", i), "x")
	}
	clock := newFakeClock()
	c := newTestCache(t, b, clock, func(cfg *Config) { cfg.PageSize, cfg.ListAfterMisses = 5, 0 })
	c.prefetch.maxEntries = 10
	listings := func() int64 { return b.Stats().Lists }
	p := c.prefetch

	c.ListSoon("d")
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return !p.inflight["d"] && !p.tooLarge["d"].IsZero()
	}, 10*time.Second, time.Millisecond)
	_, ok := c.Listing("d")
	assert.False(t, ok, "too large to cache")
	n := listings()
	assert.Positive(t, n)

	c.ListSoon("d")
	for range prefetchAfterMisses {
		p.miss("d")
	}
	p.mu.Lock()
	assert.False(t, p.inflight["d"], "not listed again")
	p.mu.Unlock()

	clock.Advance(prefetchTooLargeFor)
	c.ListSoon("d")
	require.Eventually(t, func() bool { return listings() > n }, 10*time.Second, time.Millisecond, "tried again later")
}

// ListSoon says busy when every listing slot is taken, so that its caller
// tries again later; a listing in flight is not started twice.
func TestListSoonBusy(t *testing.T) {
	b := mem.New("b")
	put(t, b, "d/f", "x")
	c := newTestCache(t, b, nil, nil)
	require.True(t, c.prefetch.sem.TryAcquire(prefetchParallel))
	assert.True(t, c.ListSoon("d"), "no slot free")
	c.prefetch.sem.Release(prefetchParallel)
	assert.False(t, c.ListSoon("d"))
	require.Eventually(t, func() bool { _, ok := c.Listing("d"); return ok }, 10*time.Second, time.Millisecond)
}
