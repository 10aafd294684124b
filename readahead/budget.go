package readahead

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"ferry/bucket"
)

// budget is the one byte budget for every buffer of a Fetcher. Bytes are
// accounted here before the buffer is allocated and released after it is
// returned to the pool.
//
// Demand reads call Acquire: they wait, but first ask reclaim to drop idle
// prefetched buffers. Waiting demand reads are served first come, first
// served: under a stream of small reads, freed memory would otherwise
// always fit a small waiter first and a large one could wait for ever.
// Speculative readahead calls TryAcquire, which fails (and the caller
// drops the work) when the budget is full or a demand read is waiting, so
// demand reads get the memory first.
type budget struct {
	// Constant data
	limit int64
	// reclaim frees one idle buffer and reports whether it found one. It is
	// called without mu held.
	reclaim func() bool
	// onChange, if set (tests), is called under mu after every change.
	onChange func(used int64)

	mu sync.Mutex
	// INVARIANT: 0 <= used <= limit
	used    int64 // GUARDED_BY(mu)
	peak    int64 // GUARDED_BY(mu)
	waiters int   // demand readers blocked in Acquire; GUARDED_BY(mu)
	// queue holds the tickets of the waiting Acquires in arrival order;
	// only the head may take memory (and reclaim for it).
	queue      []uint64 // GUARDED_BY(mu)
	nextTicket uint64   // GUARDED_BY(mu)
	// wake is closed (and replaced) whenever memory may have become
	// available or reclaimable.
	wake chan struct{} // GUARDED_BY(mu)
}

func newBudget(limit int64) *budget {
	return &budget{limit: limit, wake: make(chan struct{})}
}

// LOCKS_REQUIRED(b.mu)
func (b *budget) take(n int64) {
	b.used += n
	if b.used > b.peak {
		b.peak = b.used
	}
	if b.onChange != nil {
		b.onChange(b.used)
	}
}

// TryAcquire takes n bytes if they are free and no demand read is waiting.
func (b *budget) TryAcquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.waiters > 0 || b.used+n > b.limit {
		return false
	}
	b.take(n)
	return true
}

// Acquire takes n bytes, waiting until they are free and every earlier
// waiter has been served. The caller must hold no other budgeted memory
// that only it can release, or it may deadlock.
func (b *budget) Acquire(ctx context.Context, n int64) error {
	if n > b.limit {
		return fmt.Errorf("readahead: %w: %d bytes exceed the memory limit %d", ErrInvalid, n, b.limit)
	}
	b.mu.Lock()
	if b.waiters == 0 && b.used+n <= b.limit {
		b.take(n)
		b.mu.Unlock()
		return nil
	}
	ticket := b.nextTicket
	b.nextTicket++
	b.queue = append(b.queue, ticket)
	b.waiters++
	for {
		head := b.queue[0] == ticket
		if head && b.used+n <= b.limit {
			b.queue = b.queue[1:]
			b.waiters--
			b.take(n)
			if b.waiters > 0 {
				b.notifyLocked() // the next in line may fit too
			}
			b.mu.Unlock()
			return nil
		}
		// Take the channel before reclaiming: a buffer that turns idle
		// after a failed reclaim closes it and we try again.
		wake := b.wake
		b.mu.Unlock()
		if head && b.reclaim != nil && b.reclaim() {
			b.mu.Lock()
			continue
		}
		select {
		case <-wake:
		case <-ctx.Done():
			b.mu.Lock()
			i := slices.Index(b.queue, ticket)
			b.queue = slices.Delete(b.queue, i, i+1)
			b.waiters--
			if i == 0 && b.waiters > 0 {
				b.notifyLocked() // the next in line is the head now
			}
			b.mu.Unlock()
			return bucket.ContextError(ctx, ctx.Err())
		}
		b.mu.Lock()
	}
}

// Release returns n bytes.
func (b *budget) Release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.used < 0 {
		panic(fmt.Sprintf("readahead: budget released below zero (%d)", b.used))
	}
	if b.onChange != nil {
		b.onChange(b.used)
	}
	b.notifyLocked()
}

// Notify wakes waiting demand reads: something became reclaimable.
func (b *budget) Notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.notifyLocked()
}

// LOCKS_REQUIRED(b.mu)
func (b *budget) notifyLocked() {
	close(b.wake)
	b.wake = make(chan struct{})
}

func (b *budget) snapshot() (used, peak int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.peak
}
