package readahead

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
)

// newTestFetcher builds a Fetcher whose budget is checked on every change:
// the accounted bytes must never exceed the limit.
func newTestFetcher(t *testing.T, cfg Config) *Fetcher {
	t.Helper()
	f, err := New(cfg)
	require.NoError(t, err)
	var bad atomic.Int64
	bad.Store(-1)
	limit := f.budget.limit
	f.budget.onChange = func(used int64) {
		if used > limit || used < 0 {
			bad.Store(used)
		}
	}
	t.Cleanup(func() {
		f.checkInvariants()
		f.Close()
		f.mu.Lock()
		assert.Empty(t, f.table, "parts left after Close")
		assert.Zero(t, f.resident.Len(), "kept parts left after Close")
		f.mu.Unlock()
		assert.Equal(t, int64(-1), bad.Load(), "budget went out of [0, limit]")
		assert.Zero(t, f.Stats().BudgetInUse, "memory left accounted after Close")
	})
	return f
}

// readCheck reads [off, off+n) through h and checks every byte.
func readCheck(t *testing.T, b *fakeBucket, h *Handle, off, n int64) {
	t.Helper()
	p := make([]byte, n)
	// Like jacobsa/fuse, cancel the read's context once it is answered.
	ctx, cancel := context.WithCancel(context.Background())
	got, err := h.ReadAt(ctx, p, off)
	cancel()
	size := int64(h.obj.Size)
	wantN := max(0, min(n, size-off))
	if wantN < n {
		require.ErrorIs(t, err, io.EOF)
	} else {
		require.NoError(t, err)
	}
	require.Equal(t, int(wantN), got)
	if !bytes.Equal(want(b.seed(h.obj.Name), off, wantN), p[:wantN]) {
		t.Fatalf("%s: wrong bytes in [%d, %d)", h.obj.Name, off, off+wantN)
	}
}

func sequential(t *testing.T, b *fakeBucket, h *Handle, chunk int64) {
	t.Helper()
	for off := int64(0); off < int64(h.obj.Size); off += chunk {
		readCheck(t, b, h, off, chunk)
	}
}

func TestConfigValidation(t *testing.T) {
	b := newFakeBucket()
	for _, cfg := range []Config{
		{MemoryLimit: 64 * MiB},           // no bucket
		{Bucket: b},                       // no memory limit
		{Bucket: b, MemoryLimit: -1},      // negative
		{Bucket: b, MemoryLimit: 8 * MiB}, // < 4 default parts
		{Bucket: b, MemoryLimit: 64 * MiB, MaxConnections: -1},
	} {
		_, err := New(cfg)
		assert.ErrorIs(t, err, ErrInvalid, "%+v", cfg)
	}
	f, err := New(Config{Bucket: b, MemoryLimit: DefaultMemoryLimit})
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, int64(DefaultPartSize), f.cfg.PartSize)
	assert.Equal(t, DefaultMaxConnections, f.cfg.MaxConnections)
	assert.Equal(t, int64(DefaultMaxWindow), f.cfg.MaxWindow)
	// The product target: one stream keeps 10+ multi-MiB GETs in flight.
	assert.GreaterOrEqual(t, f.cfg.MaxWindow/f.cfg.PartSize, int64(10))
	assert.GreaterOrEqual(t, f.cfg.MaxConnections, 10)

	f2, err := New(Config{Bucket: b, MemoryLimit: 64 * MiB, Cache: newMemCache(256 * KiB), PartSize: 1000 * KiB})
	require.NoError(t, err)
	defer f2.Close()
	assert.Equal(t, 256*KiB, f2.bs, "the cache's block size wins")
	assert.Equal(t, 1024*KiB, f2.cfg.PartSize, "parts are whole blocks")
	assert.Equal(t, 32*MiB, f2.cfg.MaxWindow, "a window never exceeds half the budget")
}

func TestByteExact(t *testing.T) {
	for _, withCache := range []bool{false, true} {
		t.Run(fmt.Sprintf("cache=%v", withCache), func(t *testing.T) {
			b := newFakeBucket()
			cfg := Config{Bucket: b, MemoryLimit: 16 * MiB, BlockSize: 64 * KiB, PartSize: 512 * KiB,
				InitialWindow: 256 * KiB, MaxWindow: 2 * MiB, SmallObjectSize: 200 * KiB}
			if withCache {
				cfg.Cache = newMemCache(64 * KiB)
			}
			f := newTestFetcher(t, cfg)
			sizes := []int64{0, 1, 100, 64 * KiB, 64*KiB + 1, 150 * KiB, 3*MiB + 12345}
			r := rand.New(rand.NewPCG(3, 4))
			for _, size := range sizes {
				obj := b.put(fmt.Sprintf("obj-%d", size), size)
				h := f.open(obj)
				// Edges, then random ranges (some past EOF), then a sequential pass.
				for _, rr := range []struct{ off, n int64 }{{0, 1}, {0, size + 10}, {size, 5}, {size + 1, 5}, {max(0, size-1), 2}} {
					readCheck(t, b, h, rr.off, rr.n)
				}
				for range 30 {
					off := r.Int64N(size + 1)
					readCheck(t, b, h, off, 1+r.Int64N(300*KiB))
				}
				sequential(t, b, h, 100*KiB)
				n, err := h.ReadAt(context.Background(), nil, 0)
				assert.NoError(t, err)
				assert.Zero(t, n)
				_, err = h.ReadAt(context.Background(), make([]byte, 1), -1)
				assert.ErrorIs(t, err, ErrInvalid)
				h.Close()
				_, err = h.ReadAt(context.Background(), make([]byte, 1), 0)
				assert.ErrorIs(t, err, ErrClosed)
			}
		})
	}
}

// TestSequentialOnceIntoCache: one sequential epoch downloads every byte
// once, writes every block into the cache once, and mostly by readahead;
// the second epoch downloads nothing.
func TestSequentialOnceIntoCache(t *testing.T) {
	b := newFakeBucket()
	cache := newMemCache(128 * KiB)
	f := newTestFetcher(t, Config{Bucket: b, Cache: cache, MemoryLimit: 64 * MiB, PartSize: 1 * MiB, MaxWindow: 8 * MiB})
	obj := b.put("seq", 40*MiB+777)
	h := f.open(obj)
	sequential(t, b, h, 256*KiB)
	h.Close()
	st := f.Stats()
	assert.Equal(t, int64(obj.Size), st.BytesFetched, "every byte downloaded exactly once")
	assert.Equal(t, 1, cache.maxWrites(), "every block written to the cache once")
	assert.Greater(t, st.SpeculativeRequests, 10*st.DemandRequests, "readahead does the fetching: %+v", st)
	for _, r := range b.ranges("seq") {
		assert.LessOrEqual(t, r.Len(), uint64(1*MiB), "parts are at most PartSize: %v", r)
	}

	h2 := f.open(obj)
	sequential(t, b, h2, 1*MiB)
	h2.Close()
	st2 := f.Stats()
	assert.Equal(t, st.BytesFetched, st2.BytesFetched, "the second epoch is served by the cache")
	assert.Equal(t, st.Requests, st2.Requests)
	assert.GreaterOrEqual(t, st2.CacheHitBytes, int64(obj.Size))
}

// Without a cache, prefetched parts stay in memory until read; still each
// byte is downloaded once.
func TestSequentialNoCache(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 32 * MiB, BlockSize: 64 * KiB, PartSize: 1 * MiB, MaxWindow: 8 * MiB})
	obj := b.put("seq", 30*MiB+5)
	h := f.open(obj)
	sequential(t, b, h, 128*KiB)
	st := f.Stats()
	assert.Equal(t, int64(obj.Size), st.BytesFetched)
	assert.Greater(t, st.PrefetchHitBytes, int64(obj.Size)*3/4)
	assert.Zero(t, st.SpeculativeDropped)
	h.Close()
	assert.Zero(t, f.Stats().BudgetInUse)
}

// TestWindowGrowsToManyParallelParts runs the detector with default tuning
// against a store that holds every request: a sequential reader ends up
// with MaxConnections parts of PartSize in flight at once.
func TestWindowGrowsToManyParallelParts(t *testing.T) {
	b := newFakeBucket()
	release := make(chan struct{})
	// Hold full-size parts; the small ones of a young window go through.
	b.hook = func(ctx context.Context, req *bucket.ReadRequest) error {
		if req.Range.Len() < DefaultPartSize {
			return nil
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: DefaultMemoryLimit})
	obj := b.put("big", 4<<30)
	h := f.open(obj)
	// Feed the detector as FUSE would (1 MiB reads) without waiting for data.
	var windows []int64
	for off := int64(0); off < 200*MiB; off += MiB {
		seq, err := h.observe(off, MiB)
		require.NoError(t, err)
		require.True(t, seq)
		h.mu.Lock()
		windows = append(windows, h.det.streams[len(h.det.streams)-1].window)
		h.mu.Unlock()
	}
	s := h.det.streams[0]
	assert.Equal(t, int64(DefaultMaxWindow), s.window)
	for i := 1; i < len(windows); i++ {
		require.GreaterOrEqual(t, windows[i], windows[i-1], "the window only grows while nothing is dropped")
	}
	assert.Equal(t, int64(DefaultStartWindow), windows[0], "a stream from offset 0 starts at StartWindow")
	// Small parts complete; full-size parts are held in the store until
	// they occupy every connection: that many PartSize GETs at once.
	full := func() int {
		n := 0
		for _, r := range b.requests() {
			assert.Equal(t, obj.Version, r.Version, "every GET is pinned")
			if r.Range.Len() == DefaultPartSize {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return full() == DefaultMaxConnections }, 10*time.Second, time.Millisecond)
	assert.Equal(t, int64(DefaultMaxConnections), b.inflight.Load())
	h.mu.Lock()
	assert.LessOrEqual(t, s.frontier-s.next, s.window, "readahead reaches at most a window ahead")
	h.mu.Unlock()
	close(release)
	h.Close()
}

// TestStartWindow: a stream from offset 0 starts at StartWindow (at most
// a quarter of the object); one starting elsewhere at InitialWindow, or
// four of its reads if larger.
func TestStartWindow(t *testing.T) {
	b := newFakeBucket()
	b.hook = func(ctx context.Context, req *bucket.ReadRequest) error {
		<-ctx.Done() // nothing completes: only the windows matter
		return ctx.Err()
	}
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: DefaultMemoryLimit})
	first := func(name string, size, off int64) int64 {
		h := f.open(b.put(name, size))
		defer h.Close()
		seq, err := h.observe(off, MiB)
		require.NoError(t, err)
		h.mu.Lock()
		defer h.mu.Unlock()
		if !seq {
			return 0
		}
		return h.det.streams[0].window
	}
	assert.Equal(t, int64(DefaultStartWindow), first("big", 1<<30, 0))
	assert.Equal(t, 16*MiB, first("mid", 64<<20, 0), "a quarter of a 64 MiB object")
	assert.Equal(t, 4*MiB, first("tiny-quarter", 12<<20, 0), "four reads when that is more")
	assert.Zero(t, first("middle", 1<<30, 100*MiB), "one read in the middle is not a stream yet")
}

// TestGradedParts: a stream's first parts grow with their place, so that
// the head of its first window arrives first; after partsPerWindow parts
// it issues whole parts on part boundaries. Nothing completes here, so
// the parts are exactly what the first read issued.
func TestGradedParts(t *testing.T) {
	b := newFakeBucket()
	b.hook = func(ctx context.Context, req *bucket.ReadRequest) error {
		<-ctx.Done()
		return ctx.Err()
	}
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: DefaultMemoryLimit, BlockSize: 64 * KiB})
	obj := b.put("big", 1<<30)
	h := f.open(obj)
	defer h.Close()
	_, err := h.observe(0, MiB)
	require.NoError(t, err)
	h.mu.Lock()
	issued := h.det.streams[0].issued
	h.mu.Unlock()
	require.Eventually(t, func() bool { return len(b.ranges("big")) == issued }, time.Minute, time.Millisecond,
		"%d parts issued, %d requested", issued, len(b.ranges("big")))
	rs := b.ranges("big")
	part := int64(DefaultStartWindow / partsPerWindow) // 4 MiB
	require.Greater(t, len(rs), partsPerWindow)
	assert.Equal(t, uint64(MiB), rs[0].Start, "readahead starts after the read")
	assert.Equal(t, part/partsPerWindow, int64(rs[0].Len()), "the head is a sixteenth of a part")
	var sum int64
	for k, r := range rs {
		n := int64(r.Len())
		sum += n
		if k > 0 {
			require.Equal(t, rs[k-1].Limit, r.Start, "parts are contiguous")
		}
		if k < partsPerWindow {
			// About (k+1)/16 of a part: cut there, or on to the part
			// boundary when less than that would be left before it.
			graded := int64(k+1) * part / partsPerWindow
			assert.Less(t, n, 2*graded, "part %d", k)
		} else {
			assert.Zero(t, r.Limit%uint64(part), "part %d ends on a part boundary", k)
		}
	}
	assert.Equal(t, part, int64(rs[len(rs)-1].Len()), "whole parts after the first window")
	assert.Greater(t, sum, int64(DefaultStartWindow)-part, "the first window reaches StartWindow past the read (but for a sliver)")
	assert.LessOrEqual(t, sum, int64(DefaultStartWindow))
}

// TestGradedPartsOnlyAtStart: a reader slower than the store has nothing
// in flight at each of its reads; its parts are still whole parts, not a
// new graded ramp every time (which made about three requests per MiB).
func TestGradedPartsOnlyAtStart(t *testing.T) {
	b := newFakeBucket()
	cache := newMemCache(64 * KiB)
	f := newTestFetcher(t, Config{Bucket: b, Cache: cache, MemoryLimit: DefaultMemoryLimit})
	const size = 256 << 20
	obj := b.put("big", size)
	h := f.open(obj)
	defer h.Close()
	buf := make([]byte, MiB)
	for off := int64(0); off < size; off += MiB {
		_, err := h.ReadAt(context.Background(), buf, off)
		require.NoError(t, err)
		// The slow reader: everything issued completes before the next read.
		require.Eventually(t, func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return len(h.det.streams) == 0 || h.det.streams[0].inflight == 0
		}, time.Minute, time.Millisecond)
	}
	n := len(b.ranges("big"))
	// Whole 4 MiB parts, plus the graded first window and the first read.
	assert.LessOrEqual(t, n, size/DefaultPartSize+2*partsPerWindow, "store requests for %d MiB", size>>20)
	t.Logf("%d store requests for %d MiB", n, size>>20)
}

// TestJumpDoesNotGrowWindow: a read that jumps into the prefetched range
// moves the stream's cursor without being a step; the completions of
// its parts must not grow the window on that account.
func TestJumpDoesNotGrowWindow(t *testing.T) {
	b := newFakeBucket()
	cache := newMemCache(64 * KiB)
	f := newTestFetcher(t, Config{Bucket: b, Cache: cache, MemoryLimit: DefaultMemoryLimit})
	obj := b.put("big", 1<<30)
	h := f.open(obj)
	defer h.Close()
	buf := make([]byte, 512*KiB)
	_, err := h.ReadAt(context.Background(), buf, 0) // a header read at offset 0
	require.NoError(t, err)
	h.mu.Lock()
	s := h.det.streams[0]
	w := s.window
	h.mu.Unlock()
	// A record read 40 MiB in, inside the prefetched range.
	_, err = h.ReadAt(context.Background(), buf, 40*MiB)
	require.NoError(t, err)
	// Waits for 128 MiB of readahead: several seconds under -race on a
	// loaded machine.
	require.Eventually(t, func() bool { h.mu.Lock(); defer h.mu.Unlock(); return s.inflight == 0 }, time.Minute, time.Millisecond)
	h.mu.Lock()
	defer h.mu.Unlock()
	assert.Equal(t, w, s.window, "the window did not grow")
}

func TestWindowShrinks(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 8 * MiB, BlockSize: 64 * KiB, PartSize: 1 * MiB,
		InitialWindow: 512 * KiB, MaxWindow: 4 * MiB})
	obj := b.put("o", 1<<30)
	h := f.open(obj)
	for off := int64(0); off < 16*MiB; off += 256 * KiB {
		readCheck(t, b, h, off, 256*KiB)
	}
	assert.Zero(t, f.Stats().SpeculativeDropped)
	h.mu.Lock()
	s := h.det.streams[0]
	assert.Equal(t, 4*MiB, s.window)
	h.mu.Unlock()

	// A random jump starts a new stream at the initial window.
	require.NoError(t, observeErr(h.observe(700*MiB, 256*KiB)))
	require.NoError(t, observeErr(h.observe(700*MiB+256*KiB, 256*KiB)))
	h.mu.Lock()
	j := h.det.streams[len(h.det.streams)-1]
	assert.NotSame(t, s, j)
	assert.Equal(t, 512*KiB, j.window)
	h.mu.Unlock()

	// Fill the budget with someone else's memory: readahead is dropped and
	// the window halves.
	used, _ := f.budget.snapshot()
	took := f.budget.limit - used
	require.True(t, f.budget.TryAcquire(took))
	before := f.Stats().SpeculativeDropped
	h.mu.Lock()
	w := s.window
	h.mu.Unlock()
	for k := int64(0); k < 16; k++ {
		require.NoError(t, observeErr(h.observe(16*MiB+k*256*KiB, 256*KiB)))
	}
	h.mu.Lock()
	assert.Less(t, s.window, w)
	assert.GreaterOrEqual(t, s.window, int64(512*KiB))
	h.mu.Unlock()
	assert.Greater(t, f.Stats().SpeculativeDropped, before)
	h.Close()
	f.budget.Release(took)
}

// observeErr drops observe's sequential flag for tests that feed the
// detector only for its side effects.
func observeErr(_ bool, err error) error { return err }
