package readahead

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
)

// gate blocks matching requests until opened (or their ctx ends) and
// records how many ended by cancellation.
type gate struct {
	open      chan struct{}
	match     func(req *bucket.ReadRequest) bool
	cancelled atomic.Int64
}

func newGate(match func(*bucket.ReadRequest) bool) *gate {
	return &gate{open: make(chan struct{}), match: match}
}

func (g *gate) hook(ctx context.Context, req *bucket.ReadRequest) error {
	if g.match != nil && !g.match(req) {
		return nil
	}
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		g.cancelled.Add(1)
		return ctx.Err()
	}
}

func TestRandomReadsFetchRatio(t *testing.T) {
	for _, bs := range []int64{64 * KiB, 128 * KiB} {
		t.Run(fmt.Sprintf("block=%dK", bs/KiB), func(t *testing.T) {
			b := newFakeBucket()
			f := newTestFetcher(t, Config{Bucket: b, Cache: newMemCache(bs), MemoryLimit: 64 * MiB, PartSize: 1 * MiB})
			obj := b.put("random", 2<<30)
			h := f.open(obj)
			r := rand.New(rand.NewPCG(5, 6))
			const n, size = 150, 512 * KiB
			for range n {
				readCheck(t, b, h, r.Int64N(int64(obj.Size)-size), size)
			}
			h.Close()
			st := f.Stats()
			ratio := float64(st.BytesFetched) / float64(st.BytesRead)
			t.Logf("fetched/read = %.3f (%+v)", ratio, st)
			assert.LessOrEqual(t, ratio, 1.3)
			// A random read may land just after another by chance and
			// start a little readahead; rarely.
			assert.LessOrEqual(t, st.SpeculativeRequests, int64(n/10))
			assert.LessOrEqual(t, st.DemandRequests, int64(n), "at most one request per read: adjacent missing blocks are merged")
		})
	}
}

// TestRandomRecordsFetchRatio is the benchmark's random pattern: 8 shards
// of back-to-back 512 KiB records (boundaries off the block grid), a
// quarter of them read in shuffled order by 4 readers sharing one handle
// per shard. Records that follow one another by chance must not grow a
// readahead stream that fetches for nobody.
func TestRandomRecordsFetchRatio(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, Cache: newMemCache(64 * KiB), MemoryLimit: 512 * MiB})
	const shards, shardSize, rec = 8, 256 * MiB, 512 * KiB
	hs := make([]*Handle, shards)
	type record struct {
		h   int
		off int64
	}
	r := rand.New(rand.NewPCG(1, 2))
	var all []record
	for i := range hs {
		hs[i] = f.open(b.put(fmt.Sprintf("shard%d", i), shardSize))
		for off := r.Int64N(rec); off+rec <= shardSize; off += rec {
			all = append(all, record{i, off})
		}
	}
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	recs := all[:len(all)/4]
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(recs)); i = next.Add(1) - 1 {
				readCheck(t, b, hs[recs[i].h], recs[i].off, rec)
			}
		}()
	}
	wg.Wait()
	for _, h := range hs {
		h.Close()
	}
	st := f.Stats()
	ratio := float64(st.BytesFetched) / float64(st.BytesRead)
	t.Logf("fetched/read = %.3f, %d speculative requests for %d records", ratio, st.SpeculativeRequests, len(recs))
	assert.LessOrEqual(t, ratio, 1.2, "blocks of 64 KiB around 512 KiB records cost at most 1.125")
}

// A read of blocks partly cached fetches exactly the missing runs.
func TestRandomReadFetchesOnlyMissingBlocks(t *testing.T) {
	b := newFakeBucket()
	cache := newMemCache(64 * KiB)
	f := newTestFetcher(t, Config{Bucket: b, Cache: cache, MemoryLimit: 16 * MiB, PartSize: 1 * MiB})
	obj := b.put("o", 64*MiB)
	// One handle per read, so that no read looks sequential.
	read := func(off, n int64) {
		h := f.open(obj)
		defer h.Close()
		readCheck(t, b, h, off, n)
	}
	// Blocks: 0123456789
	//         .XX...X...   cached first
	read(64*KiB, 128*KiB)
	read(6*64*KiB+5, 100)
	before := len(b.requests())
	read(10, 10*64*KiB-20) // touches blocks 0..9
	var newRanges []bucket.ByteRange
	for _, r := range b.requests()[before:] {
		newRanges = append(newRanges, r.Range)
	}
	assert.ElementsMatch(t, []bucket.ByteRange{
		{Start: 0, Limit: 64 * 1024},
		{Start: 3 * 64 * 1024, Limit: 6 * 64 * 1024},
		{Start: 7 * 64 * 1024, Limit: 10 * 64 * 1024},
	}, newRanges)
}

// earlyRead reads [off, end) of obj once through a new handle, which it
// returns open. The store sends each body up to end; after, given the
// request's context, decides what comes next (the padding out to whole
// blocks): it may block, fail or let the rest flow. earlyRead fails the
// test unless the read is answered, right, whatever after does.
func earlyRead(t *testing.T, b *fakeBucket, f *Fetcher, obj bucket.Object, off, end int64, after func(ctx context.Context, at int64) (int64, error)) *Handle {
	t.Helper()
	b.hold = func(ctx context.Context, name string, at int64) (int64, error) {
		if at < end {
			return end, nil
		}
		return after(ctx, at)
	}
	h := f.open(obj)
	p := make([]byte, end-off)
	type result struct {
		n   int
		err error
	}
	res := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithCancel(context.Background())
		n, err := h.ReadAt(ctx, p, off)
		cancel() // as jacobsa/fuse does once the read is answered
		res <- result{n, err}
	}()
	select {
	case r := <-res:
		require.NoError(t, r.err)
		require.Equal(t, int(end-off), r.n)
		require.Equal(t, want(b.seed(obj.Name), off, end-off), p)
	case <-time.After(20 * time.Second):
		t.Fatal("the read was not answered before the padding of its request arrived")
	}
	return h
}

// A random read fetches whole blocks, but its reader is answered as soon
// as its own bytes are in, not after the padding up to the block end; the
// fetch goes on, and the cache gets every block of it, once.
func TestDemandReadAnsweredBeforeItsPadding(t *testing.T) {
	b := newFakeBucket()
	cache := newMemCache(64 * KiB)
	f := newTestFetcher(t, Config{Bucket: b, Cache: cache, MemoryLimit: 16 * MiB, PartSize: 1 * MiB})
	obj := b.put("o", 4*MiB)
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	defer open() // never leave the fetch (and Close) hanging
	// Blocks 1..4, [64 KiB, 320 KiB): the reader's bytes end 20 KiB short.
	h := earlyRead(t, b, f, obj, 100*KiB+5, 300*KiB, func(ctx context.Context, at int64) (int64, error) {
		select {
		case <-release:
			return 4 * MiB, nil
		case <-ctx.Done(): // the fetch must outlive the answered read
			return 0, ctx.Err()
		}
	})
	for i := int64(1); i <= 4; i++ {
		assert.False(t, cache.HasBlock(cacheKeyOf(obj), i), "block %d cached before its bytes arrived", i)
	}
	open()
	h.Close() // waits for the fetch and its cache write
	assert.Equal(t, []bucket.ByteRange{{Start: 64 << 10, Limit: 320 << 10}}, b.ranges("o"))
	for i := int64(1); i <= 4; i++ {
		assert.True(t, cache.HasBlock(cacheKeyOf(obj), i), "block %d", i)
	}
	h = f.open(obj)
	readCheck(t, b, h, 64*KiB, 256*KiB)
	h.Close()
	assert.Len(t, b.requests(), 1, "read again from the cache")
	assert.Equal(t, 1, cache.maxWrites())
	assert.Zero(t, f.Stats().BudgetInUse)
}

// If the padding never arrives, the reader has its bytes anyway; nothing
// of that request is cached, its memory comes back, and the next read
// fetches the blocks again.
func TestDemandReadAnsweredBeforeItsPaddingFails(t *testing.T) {
	b := newFakeBucket()
	cache := newMemCache(64 * KiB)
	f := newTestFetcher(t, Config{Bucket: b, Cache: cache, MemoryLimit: 16 * MiB, PartSize: 1 * MiB})
	obj := b.put("o", 4*MiB)
	var failed atomic.Bool
	h := earlyRead(t, b, f, obj, 100*KiB+5, 300*KiB, func(ctx context.Context, at int64) (int64, error) {
		if failed.CompareAndSwap(false, true) {
			return 0, fmt.Errorf("fake: connection reset: %w", bucket.ErrUnavailable)
		}
		return 4 * MiB, nil
	})
	h.Close()
	assert.True(t, failed.Load())
	for i := int64(1); i <= 4; i++ {
		assert.False(t, cache.HasBlock(cacheKeyOf(obj), i), "block %d cached from a failed request", i)
	}
	assert.Zero(t, f.Stats().BudgetInUse, "the failed request's buffer is still accounted")
	h = f.open(obj)
	readCheck(t, b, h, 64*KiB, 256*KiB)
	h.Close()
	assert.Len(t, b.requests(), 2)
	for i := int64(1); i <= 4; i++ {
		assert.True(t, cache.HasBlock(cacheKeyOf(obj), i), "block %d", i)
	}
}

// closeWithin closes h, failing the test with msg if Close has not
// returned after 20 s (it waits for the handle's fetches).
func closeWithin(t *testing.T, h *Handle, msg string) {
	t.Helper()
	closed := make(chan struct{})
	go func() { h.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal(msg)
	}
}

// A read given up before its bytes arrive (an interrupted syscall) stops
// its request: the fetch that would outlive an answered read must not
// outlive an abandoned one, nor hold up Close.
func TestDemandReadCancelledStopsItsFetch(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, Cache: newMemCache(64 * KiB), MemoryLimit: 16 * MiB, PartSize: 1 * MiB})
	obj := b.put("o", 4*MiB)
	b.hold = func(ctx context.Context, name string, at int64) (int64, error) {
		<-ctx.Done() // a store that never sends a byte
		return 0, ctx.Err()
	}
	h := f.open(obj)
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() {
		_, err := h.ReadAt(ctx, make([]byte, 200*KiB), 100*KiB+5)
		res <- err
	}()
	require.Eventually(t, func() bool { return b.inflight.Load() == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	assert.ErrorIs(t, <-res, bucket.ErrCanceled)
	closeWithin(t, h, "Close waits for the request of a cancelled read")
	assert.Zero(t, b.inflight.Load())
}

// A read whose first fetch fails gives up at once; its other fetches,
// still waiting for the store, stop with it rather than holding memory
// and Close until the store times out.
func TestDemandReadFailureStopsItsOtherFetches(t *testing.T) {
	b := newFakeBucket()
	cache := newMemCache(64 * KiB)
	f := newTestFetcher(t, Config{Bucket: b, Cache: cache, MemoryLimit: 16 * MiB, PartSize: 1 * MiB})
	obj := b.put("o", 4*MiB)
	h := f.open(obj)
	readCheck(t, b, h, 128*KiB, 64*KiB) // block 2 cached
	h.Close()
	b.hook = func(ctx context.Context, req *bucket.ReadRequest) error {
		switch req.Range.Start {
		case 64 << 10:
			return fmt.Errorf("fake: connection reset: %w", bucket.ErrUnavailable)
		case 192 << 10:
			<-ctx.Done() // a store that never answers
			return ctx.Err()
		}
		return nil
	}
	h = f.open(obj)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := h.ReadAt(ctx, make([]byte, 130*KiB), 100*KiB) // blocks 1 and 3 missing: two requests
	cancel()
	require.ErrorIs(t, err, bucket.ErrUnavailable)
	closeWithin(t, h, "Close waits for a request of a read that failed")
	assert.Zero(t, b.inflight.Load())
	assert.Zero(t, f.Stats().BudgetInUse)
}

// A fetch that delivered its reader's bytes and then failed in the
// padding keeps its buffer, still accounted, until the reader has copied
// out of it: returned to the pool at once, another fetch could overwrite
// it under the reader. And the reader takes its bytes, not the padding's
// error, though both are there when it looks (run a few times: a select
// between the two would pick either).
func TestDeliveredBufferOutlivesFailedPadding(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, Cache: newMemCache(64 * KiB), MemoryLimit: 16 * MiB, PartSize: 1 * MiB})
	obj := b.put("o", 4*MiB)
	const cs, ce = 100*KiB + 5, 300 * KiB // blocks 1..4
	b.hold = func(ctx context.Context, name string, at int64) (int64, error) {
		if at < ce {
			return ce, nil
		}
		return 0, fmt.Errorf("fake: connection reset: %w", bucket.ErrUnavailable)
	}
	for range 16 {
		h := f.open(obj)
		c := &chunk{f: f, h: h, dst: make([]byte, ce-cs), cs: cs, ce: ce, b0: 1, filled: make([]bool, 4), left: 4}
		ctx := context.Background()
		own, more, err := c.claim(ctx, []int64{1, 2, 3, 4}, nil, false)
		require.NoError(t, err)
		require.Len(t, own, 1)
		require.Empty(t, more)
		<-own[0].done // the padding failed; the reader has not copied yet
		require.Error(t, own[0].err)
		f.mu.Lock()
		cost := own[0].cost
		f.mu.Unlock()
		require.Positive(t, cost)
		require.Equal(t, cost, f.Stats().BudgetInUse, "the reader's buffer is no longer accounted")
		n, err := c.wait(ctx, own, own)
		require.NoError(t, err, "the padding's failure instead of the delivered bytes")
		require.Zero(t, n)
		require.Zero(t, c.left)
		require.Equal(t, want(b.seed("o"), cs, ce-cs), c.dst)
		require.Zero(t, f.Stats().BudgetInUse)
		h.Close()
	}
}
