package readahead

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
)

func TestBudget(t *testing.T) {
	b := newBudget(100)
	require.True(t, b.TryAcquire(60))
	assert.False(t, b.TryAcquire(41), "over the limit")
	require.NoError(t, b.Acquire(context.Background(), 40))

	// A demand read waits; meanwhile readahead is refused even if it fits.
	got := make(chan error)
	go func() { got <- b.Acquire(context.Background(), 30) }()
	require.Eventually(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.waiters == 1 }, 10*time.Second, time.Millisecond)
	b.Release(40)
	require.NoError(t, <-got)
	b.Release(10) // 80 used, nobody waiting
	assert.True(t, b.TryAcquire(10))

	// Cancellation.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { got <- b.Acquire(ctx, 90) }()
	require.Eventually(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.waiters == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	assert.ErrorIs(t, <-got, bucket.ErrCanceled)
	used, peak := b.snapshot()
	assert.Equal(t, int64(90), used)
	assert.Equal(t, int64(100), peak)

	// More than the whole budget can never be granted: an error, not a hang.
	assert.ErrorIs(t, b.Acquire(context.Background(), 101), ErrInvalid)
}

func TestBudgetReclaim(t *testing.T) {
	b := newBudget(100)
	require.True(t, b.TryAcquire(100))
	var idle atomic.Int64
	idle.Store(3) // three idle 30-byte buffers the reclaimer may free
	b.reclaim = func() bool {
		if idle.Add(-1) < 0 {
			return false
		}
		b.Release(30)
		return true
	}
	require.NoError(t, b.Acquire(context.Background(), 50))
	used, _ := b.snapshot()
	assert.Equal(t, int64(100-60+50), used, "reclaimed just enough (two buffers)")

	// Nothing reclaimable: wait for a Notify (a buffer turned idle).
	idle.Store(0)
	done := make(chan error)
	go func() { done <- b.Acquire(context.Background(), 40) }()
	require.Eventually(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.waiters == 1 }, 10*time.Second, time.Millisecond)
	idle.Store(2)
	b.Notify()
	require.NoError(t, <-done)
}

func TestConnLimiterPriority(t *testing.T) {
	c := newConnLimiter(1)
	require.NoError(t, c.acquire(context.Background(), true, nil))
	order := make(chan string, 3)
	var urgent atomic.Bool
	start := func(name string, demand bool, u *atomic.Bool) {
		go func() {
			if err := c.acquire(context.Background(), demand, u); err == nil {
				order <- name
			}
		}()
	}
	waiting := func(n int) func() bool {
		return func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.demand)+len(c.spec) == n }
	}
	start("spec", false, nil)
	require.Eventually(t, waiting(1), 10*time.Second, time.Millisecond)
	start("spec-urgent", false, &urgent)
	require.Eventually(t, waiting(2), 10*time.Second, time.Millisecond)
	start("demand", true, nil)
	require.Eventually(t, waiting(3), 10*time.Second, time.Millisecond)
	urgent.Store(true) // a demand read now waits for this readahead
	var got []string
	for range 3 {
		c.release()
		got = append(got, <-order)
	}
	assert.Equal(t, []string{"demand", "spec-urgent", "spec"}, got)
	c.release()
	c.mu.Lock()
	assert.Zero(t, c.used)
	c.mu.Unlock()

	// A cancelled waiter leaves the queue.
	require.NoError(t, c.acquire(context.Background(), true, nil))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() { errc <- c.acquire(ctx, false, nil) }()
	require.Eventually(t, waiting(1), 10*time.Second, time.Millisecond)
	cancel()
	assert.ErrorIs(t, <-errc, bucket.ErrCanceled)
	c.release()
	c.mu.Lock()
	assert.Zero(t, c.used)
	assert.Empty(t, c.spec)
	c.mu.Unlock()
}
