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

// OpenAhead fetches the head of the object before any read, and a reader
// that opens the object afterwards gets those bytes without fetching
// them again.
func TestOpenAheadFetchesTheHeadOnce(t *testing.T) {
	for _, withCache := range []bool{false, true} {
		t.Run(map[bool]string{false: "no cache", true: "cache"}[withCache], func(t *testing.T) {
			b := newFakeBucket()
			cfg := Config{Bucket: b, MemoryLimit: 64 * MiB, BlockSize: 64 * KiB, PartSize: 1 * MiB, StartWindow: 8 * MiB, MaxWindow: 8 * MiB}
			if withCache {
				cfg.Cache = newMemCache(64 * KiB)
			}
			f := newTestFetcher(t, cfg)
			obj := b.put("next", 32*MiB+5)
			ahead := f.openAhead(obj)
			require.Eventually(t, func() bool { return f.Stats().BytesFetched >= 8*MiB }, time.Minute, time.Millisecond,
				"the first window arrives without a read")
			st := f.Stats()
			assert.Zero(t, st.DemandRequests)
			assert.LessOrEqual(t, st.BytesFetched, int64(8*MiB), "one window before the reader comes")

			// The same handle, taken over by the reader (as fs does).
			sequential(t, b, ahead, 128*KiB)
			ahead.Close()
			st = f.Stats()
			assert.Equal(t, int64(obj.Size), st.BytesFetched, "every byte fetched once")
			assert.Zero(t, st.SpeculativeDropped)
		})
	}
}

// With the default tuning and a cache, a file opened ahead but never read
// costs one window (StartWindow), not the two a stream reaches with a
// cache once its reader is there.
func TestOpenAheadFetchesOneWindow(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, Cache: newMemCache(DefaultBlockSize), MemoryLimit: DefaultMemoryLimit})
	h := f.openAhead(b.put("next", 1<<30))
	require.Eventually(t, func() bool { return f.Stats().BytesFetched >= DefaultStartWindow }, time.Minute, time.Millisecond)
	time.Sleep(50 * time.Millisecond) // completions may issue more: they must not
	assert.Equal(t, int64(DefaultStartWindow), f.Stats().BytesFetched)
	h.Close()
}

// Another handle of the same version finds what OpenAhead fetched.
func TestOpenAheadSharedWithAnotherHandle(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 64 * MiB, BlockSize: 64 * KiB, PartSize: 1 * MiB, StartWindow: 4 * MiB, MaxWindow: 4 * MiB})
	obj := b.put("next", 16*MiB)
	ahead := f.openAhead(obj)
	require.Eventually(t, func() bool { return f.Stats().BytesFetched >= 4*MiB }, time.Minute, time.Millisecond)
	h := f.open(obj)
	sequential(t, b, h, 128*KiB)
	h.Close()
	ahead.Close()
	st := f.Stats()
	assert.Equal(t, int64(obj.Size), st.BytesFetched, "the head was not fetched again")
	assert.Greater(t, st.PrefetchHitBytes, int64(4*MiB))
}

// Closing a handle opened ahead that nobody read cancels its readahead and
// returns its memory.
func TestOpenAheadClosedUnread(t *testing.T) {
	b := newFakeBucket()
	started := make(chan struct{}, 100)
	b.hook = func(ctx context.Context, req *bucket.ReadRequest) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 64 * MiB, BlockSize: 64 * KiB, PartSize: 1 * MiB, StartWindow: 8 * MiB, MaxWindow: 8 * MiB})
	h := f.openAhead(b.put("next", 64*MiB))
	<-started
	assert.Positive(t, f.Stats().BudgetInUse, "readahead is accounted")
	h.Close()
	assert.Zero(t, f.Stats().BudgetInUse)
}

// NotifyAtEnd fires once when a sequential stream's readahead reaches the
// end of the object, and never for random reads.
func TestNotifyAtEnd(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 64 * MiB, BlockSize: 64 * KiB, PartSize: 1 * MiB, StartWindow: 4 * MiB, MaxWindow: 4 * MiB})
	obj := b.put("seq", 16*MiB)

	var calls atomic.Int32
	h := f.open(obj)
	h.NotifyAtEnd(func() { calls.Add(1) })
	for off := int64(0); off < int64(obj.Size); off += 256 * KiB {
		readCheck(t, b, h, off, 256*KiB)
	}
	h.Close()
	require.Eventually(t, func() bool { return calls.Load() == 1 }, 5*time.Second, time.Millisecond)
	time.Sleep(10 * time.Millisecond)
	assert.Equal(t, int32(1), calls.Load(), "once")

	// Random reads: no stream, no notice.
	calls.Store(0)
	h = f.open(obj)
	h.NotifyAtEnd(func() { calls.Add(1) })
	for _, off := range []int64{9 * MiB, 2 * MiB, 15 * MiB, 5 * MiB, 12 * MiB, 0 + 512*KiB, 16*MiB - 64*KiB} {
		readCheck(t, b, h, off, 64*KiB)
	}
	h.Close()
	time.Sleep(10 * time.Millisecond)
	assert.Zero(t, calls.Load())
}

// NotifyAtEnd waits until the stream drains: while the parts at the end of
// the object are still in flight (more than a quarter of the window), the
// link is busy with them, and the next object would only slow them.
func TestNotifyAtEndWaitsForTheDrain(t *testing.T) {
	b := newFakeBucket()
	held := make(chan struct{})
	b.hook = func(ctx context.Context, req *bucket.ReadRequest) error {
		if req.Range.Start >= uint64(14*MiB) {
			select {
			case <-held:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 64 * MiB, BlockSize: 64 * KiB, PartSize: 1 * MiB, StartWindow: 4 * MiB, MaxWindow: 4 * MiB})
	obj := b.put("seq", 16*MiB)
	var calls atomic.Int32
	h := f.open(obj)
	defer h.Close()
	h.NotifyAtEnd(func() { calls.Add(1) })
	for off := int64(0); off < 14*MiB; off += 256 * KiB {
		readCheck(t, b, h, off, 256*KiB)
	}
	h.mu.Lock()
	s := h.det.streams[0]
	frontier, inflight, window := s.frontier, s.inflight, s.window
	h.mu.Unlock()
	require.Equal(t, int64(obj.Size), frontier, "readahead was issued to the end")
	require.Greater(t, inflight, window/4, "the last parts are held")
	time.Sleep(10 * time.Millisecond)
	assert.Zero(t, calls.Load(), "not while the end is in flight")

	close(held)
	for off := int64(14 * MiB); off < int64(obj.Size); off += 256 * KiB {
		readCheck(t, b, h, off, 256*KiB)
	}
	require.Eventually(t, func() bool { return calls.Load() == 1 }, 5*time.Second, time.Millisecond)
}

// tightBudget: no cache, and room for two first windows of 8 MiB only.
func tightBudget(b *fakeBucket) Config {
	return Config{Bucket: b, MemoryLimit: 16 * MiB, BlockSize: 64 * KiB, PartSize: 1 * MiB, StartWindow: 8 * MiB, MaxWindow: 8 * MiB}
}

// openTwoAhead opens two 32 MiB objects ahead under tightBudget and waits
// until their first windows have arrived and fill the budget.
func openTwoAhead(t *testing.T, f *Fetcher, b *fakeBucket) (a1, a2 *Handle) {
	t.Helper()
	a1 = f.openAhead(b.put("next1", 32*MiB))
	a2 = f.openAhead(b.put("next2", 32*MiB))
	require.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.resident.Len() >= 16 && f.Stats().BudgetInUse >= 16*MiB
	}, 10*time.Second, time.Millisecond, "both first windows arrived and are kept")
	return a1, a2
}

// Without a cache, what files opened ahead hold is not theirs to keep
// until their readers come: other streams' readahead may take it, as it
// takes parts the cache also holds.
func TestOpenAheadMemoryGivesWay(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, tightBudget(b))
	a1, a2 := openTwoAhead(t, f, b)
	defer a1.Close()
	defer a2.Close()
	assert.Equal(t, int64(16*MiB), f.Stats().AheadBytes)

	h := f.open(b.put("current", 32*MiB))
	sequential(t, b, h, 256*KiB)
	h.Close()
	st := f.Stats()
	assert.Greater(t, st.PrefetchHitBytes, int64(24*MiB), "the reader's readahead ran: %+v", st)
	// Its own window may fill the budget now and then; without taking
	// the unread handles' memory, 125 parts were dropped.
	assert.Less(t, st.SpeculativeDropped, int64(5), "readahead took the unread handles' memory")

	// Once read, a handle's parts are its reader's: a1's reader reads
	// what is left of its window.
	readCheck(t, b, a1, 0, 256*KiB)
	assert.False(t, a1.unread.Load())
}

// After other readahead took an unread handle's window, its reader does
// no worse than a fresh handle: the frontier goes back to the holes, so
// readahead fetches them, not the reader one read at a time.
func TestOpenAheadReclaimedWindowIsFetchedAgain(t *testing.T) {
	slow := func(ctx context.Context, req *bucket.ReadRequest) error { time.Sleep(5 * time.Millisecond); return nil }
	b0 := newFakeBucket()
	b0.hook = slow
	f0 := newTestFetcher(t, tightBudget(b0))
	h0 := f0.open(b0.put("next1", 32*MiB))
	sequential(t, b0, h0, 256*KiB)
	h0.Close()
	fresh := f0.Stats().DemandRequests

	b := newFakeBucket()
	f := newTestFetcher(t, tightBudget(b))
	a1, a2 := openTwoAhead(t, f, b)
	defer a2.Close()
	h := f.open(b.put("current", 32*MiB))
	sequential(t, b, h, 256*KiB) // takes the unread windows' memory
	h.Close()
	before := f.Stats().DemandRequests
	b.hook = slow
	sequential(t, b, a1, 256*KiB)
	a1.Close()
	// Before the fix: 32 demand requests, one per 1 MiB of the lost window.
	assert.LessOrEqual(t, f.Stats().DemandRequests-before, fresh+2)
}

// A small or medium object opened ahead is fetched whole at once, in one
// request, and its reader (the same handle, or another of the same
// version) fetches nothing more; a cached one is not fetched again.
func TestOpenAheadSmallObjectWhole(t *testing.T) {
	for _, withCache := range []bool{false, true} {
		t.Run(map[bool]string{false: "no cache", true: "cache"}[withCache], func(t *testing.T) {
			b := newFakeBucket()
			cfg := Config{Bucket: b, MemoryLimit: 64 * MiB, BlockSize: 64 * KiB, PartSize: 4 * MiB, SmallObjectSize: 1 * MiB}
			if withCache {
				cfg.Cache = newMemCache(64 * KiB)
			}
			f := newTestFetcher(t, cfg)
			small := b.put("small", 128*KiB+3)
			medium := b.put("medium", 3*MiB+7) // over SmallObjectSize, at most mediumObjectSize
			hs, hm := f.openAhead(small), f.openAhead(medium)
			assert.True(t, hs.Unread())
			total := int64(small.Size + medium.Size)
			require.Eventually(t, func() bool { return f.Stats().BytesFetched == total }, time.Minute, time.Millisecond)
			st := f.Stats()
			assert.Equal(t, int64(2), st.Requests, "one request each")
			assert.Equal(t, int64(2), st.SpeculativeRequests)
			assert.Equal(t, total, st.AheadBytes)
			sequential(t, b, hs, 32*KiB) // taken over by the reader
			other := f.open(medium)      // or another handle of the version
			sequential(t, b, other, 1*MiB)
			other.Close()
			st = f.Stats()
			assert.Equal(t, int64(2), st.Requests, "the readers fetched nothing")
			assert.Equal(t, total, st.BytesFetched)
			hs.Close()
			hm.Close()
			if withCache {
				again := f.openAhead(small)
				assert.False(t, again.Unread(), "nothing to fetch: not worth keeping")
				time.Sleep(20 * time.Millisecond)
				assert.Equal(t, int64(2), f.Stats().Requests, "cached: nothing fetched")
				sequential(t, b, again, 64*KiB)
				again.Close()
			}
		})
	}
}

// Objects under aheadWholeSize are fetched whole by OpenAhead, in parts of
// at most PartSize; such a handle never notifies NotifyAtEnd (it has no
// windows), even with a cache, where completed parts ask for more.
func TestOpenAheadWholeUnderEightMiB(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, Cache: newMemCache(64 * KiB), MemoryLimit: 64 * MiB,
		BlockSize: 64 * KiB, PartSize: 4 * MiB, StartWindow: 8 * MiB, MaxWindow: 8 * MiB})
	obj := b.put("six", 6*MiB+5)
	h := f.openAhead(obj)
	notified := make(chan struct{}, 1)
	h.NotifyAtEnd(func() { notified <- struct{}{} })
	require.Eventually(t, func() bool { return f.Stats().BytesFetched == int64(obj.Size) }, time.Minute, time.Millisecond)
	assert.Equal(t, int64(2), f.Stats().Requests, "4 MiB and the rest")
	sequential(t, b, h, 1*MiB)
	assert.Equal(t, int64(2), f.Stats().Requests, "the reader fetched nothing")
	h.Close()
	select {
	case <-notified:
		t.Fatal("notified at the end of an object fetched whole")
	default:
	}
}

// Cached tells whether every block of an object is in the block cache.
func TestFetcherCached(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 64 * MiB})
	obj := b.put("o", 200*KiB)
	assert.False(t, f.Cached(obj), "no cache")

	g := newTestFetcher(t, Config{Bucket: b, Cache: newMemCache(64 * KiB), MemoryLimit: 64 * MiB, BlockSize: 64 * KiB})
	big := b.put("big", 8*MiB+5) // not fetched whole by its first read
	assert.False(t, g.Cached(big))
	h := g.open(big)
	readCheck(t, b, h, 4*MiB, 64*KiB)
	h.Close()
	assert.False(t, g.Cached(big), "one block")
	h = g.open(big)
	sequential(t, b, h, 1*MiB)
	h.Close()
	assert.True(t, g.Cached(big))
}

// The cache is told, once per part it stored, that a reader had the
// part's bytes: at once for a demand fetch, at the first read for a part
// fetched ahead, and never for one nobody read.
func TestCacheToldOfReadsOutsideIt(t *testing.T) {
	b := newFakeBucket()
	c := newMemCache(64 * KiB)
	f := newTestFetcher(t, Config{Bucket: b, Cache: c, MemoryLimit: 64 * MiB, BlockSize: 64 * KiB, PartSize: 1 * MiB})
	demand := b.put("demand", 512*KiB)
	h := f.open(demand)
	buf := make([]byte, demand.Size)
	_, err := h.ReadAt(context.Background(), buf, 0)
	require.NoError(t, err)
	h.Close()
	assert.Equal(t, 1, c.consumedOf("demand"), "a demand fetch's reader had its bytes")

	read, unread := b.put("read", 2*MiB), b.put("unread", 2*MiB)
	ahead, idle := f.openAhead(read), f.openAhead(unread)
	require.Eventually(t, func() bool {
		return c.CachedBytes(cacheKeyOf(read)) == int64(read.Size) && c.CachedBytes(cacheKeyOf(unread)) == int64(unread.Size)
	},
		time.Minute, time.Millisecond, "both fetched ahead and stored")
	assert.Zero(t, c.consumedOf("read"), "stored, not read yet")
	sequential(t, b, ahead, 128*KiB)
	ahead.Close()
	idle.Close()
	assert.Equal(t, 2, c.consumedOf("read"), "told once for each of its two parts, read from memory")
	assert.Zero(t, c.consumedOf("unread"))
	assert.Equal(t, int64(read.Size+unread.Size+demand.Size), f.Stats().BytesFetched, "read from memory, not fetched again")
}
