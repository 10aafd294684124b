package readahead

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
)

func TestSmallObjectOneRequest(t *testing.T) {
	for _, withCache := range []bool{false, true} {
		t.Run(fmt.Sprintf("cache=%v", withCache), func(t *testing.T) {
			b := newFakeBucket()
			cfg := Config{Bucket: b, MemoryLimit: 16 * MiB, BlockSize: 64 * KiB, PartSize: 2 * MiB}
			if withCache {
				cfg.Cache = newMemCache(64 * KiB)
			}
			f := newTestFetcher(t, cfg)
			obj := b.put("small", 1536*KiB+3)
			h := f.open(obj)
			// The kernel reads 128K at a time, starting in the middle.
			readCheck(t, b, h, 512*KiB, 128*KiB)
			sequential(t, b, h, 128*KiB)
			assert.Equal(t, []bucket.ByteRange{{Start: 0, Limit: obj.Size}}, b.ranges("small"))
			h.Close()
			assert.Zero(t, f.Stats().BudgetInUse)
		})
	}
}

// TestSmallObjectKeptAfterItsRead: without a cache, an object fetched
// whole stays in memory for the reads of the rest of it even though the
// read that fetched it has been answered (its context cancelled) before
// the fetch settled.
func TestSmallObjectKeptAfterItsRead(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 16 * MiB, BlockSize: 64 * KiB, PartSize: 2 * MiB})
	answered := make(chan struct{})
	f.afterPublish = func(*part) { <-answered }
	obj := b.put("small", 1536*KiB+3)
	h := f.open(obj)
	readCheck(t, b, h, 0, 128*KiB) // returns after publish; cancels its context
	close(answered)
	sequential(t, b, h, 128*KiB)
	assert.Equal(t, []bucket.ByteRange{{Start: 0, Limit: obj.Size}}, b.ranges("small"), "one request")
	h.Close()
	assert.Zero(t, f.Stats().BudgetInUse)
}

// TestPartReadBeforeSettleLeavesMemory: a kept part that its readers
// consume to the end while its fetch is still settling (writing to the
// cache) leaves memory when it settles, not when the handle closes.
func TestPartReadBeforeSettleLeavesMemory(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 16 * MiB, BlockSize: 64 * KiB, PartSize: 2 * MiB})
	answered := make(chan struct{})
	settled := make(chan struct{})
	f.afterPublish = func(*part) {
		<-answered
		go func() { // after settle, which runs once this returns
			defer close(settled)
			assert.Eventually(t, func() bool { return f.Stats().BudgetInUse == 0 }, time.Minute, time.Millisecond,
				"memory held after the part was read and settled")
		}()
	}
	obj := b.put("small", 1536*KiB+3)
	h := f.open(obj)
	sequential(t, b, h, 128*KiB) // every byte, from memory, before settle
	assert.Positive(t, f.Stats().BudgetInUse, "the fetch still holds the part")
	close(answered)
	<-settled
	assert.Equal(t, []bucket.ByteRange{{Start: 0, Limit: obj.Size}}, b.ranges("small"))
	h.Close()
}

// TestMediumObjectFromStart: an object of a few MiB read from offset 0 is
// fetched whole in one request; read from the middle, only the blocks
// asked for are fetched.
func TestMediumObjectFromStart(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, Cache: newMemCache(64 * KiB), MemoryLimit: 64 * MiB})
	obj := b.put("sample", 2764*KiB)
	h := f.open(obj)
	sequential(t, b, h, 128*KiB)
	assert.Equal(t, []bucket.ByteRange{{Start: 0, Limit: obj.Size}}, b.ranges("sample"))
	h.Close()

	other := b.put("random", 3*MiB)
	h = f.open(other)
	readCheck(t, b, h, 1*MiB+5, 100)
	assert.Equal(t, []bucket.ByteRange{{Start: uint64(1 * MiB), Limit: uint64(1*MiB + 64*KiB)}}, b.ranges("random"),
		"a first read in the middle fetches its block, not the object")
	h.Close()
	assert.Zero(t, f.Stats().BudgetInUse)
}

// TestCacheReadsAreAdvised: a read of several cached blocks announces
// them to the cache before reading them one by one; a one-block read
// does not.
func TestCacheReadsAreAdvised(t *testing.T) {
	b := newFakeBucket()
	c := newMemCache(64 * KiB)
	f := newTestFetcher(t, Config{Bucket: b, Cache: c, MemoryLimit: 64 * MiB, SmallObjectSize: -1})
	obj := b.put("o", 8*MiB)
	h := f.open(obj)
	sequential(t, b, h, 1*MiB) // fill the cache
	h.Close()
	requests := len(b.ranges("o"))
	c.advised.Store(0)

	h = f.open(obj)
	defer h.Close()
	readCheck(t, b, h, 3*MiB+100, 512*KiB)
	assert.EqualValues(t, 9, c.advised.Load(), "the 9 blocks of an unaligned 512 KiB read")
	readCheck(t, b, h, 5*MiB, 1000)
	assert.EqualValues(t, 9, c.advised.Load(), "one block: nothing to advise")
	assert.Len(t, b.ranges("o"), requests, "served from the cache")

	// A sequential reader is left to the kernel's readahead of the file.
	h2 := f.open(obj)
	defer h2.Close()
	sequential(t, b, h2, 1*MiB)
	assert.EqualValues(t, 9, c.advised.Load(), "sequential reads are not advised")
}

func TestSingleFlight(t *testing.T) {
	b := newFakeBucket()
	g := newGate(nil)
	b.hook = g.hook
	f := newTestFetcher(t, Config{Bucket: b, Cache: newMemCache(64 * KiB), MemoryLimit: 16 * MiB, PartSize: 1 * MiB})
	obj := b.put("o", 64*MiB)
	const readers = 12
	var wg sync.WaitGroup
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := f.open(obj) // separate handles share the fetch too
			defer h.Close()
			readCheck(t, b, h, 10*MiB+int64(i)*1000, 100)
		}()
	}
	// Wait until every reader waits on the one fetch, then let it go.
	require.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		p := f.table[blockKey{objKey{name: obj.Name, version: obj.Version, size: obj.Size}, 10 * MiB / (64 * KiB)}]
		return p != nil && p.refs == readers+1
	}, 10*time.Second, time.Millisecond)
	close(g.open)
	wg.Wait()
	assert.Len(t, b.requests(), 1)
	assert.Equal(t, 64*KiB, f.Stats().BytesFetched)
}

func TestPreconditionPropagates(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, Cache: newMemCache(64 * KiB), MemoryLimit: 16 * MiB, PartSize: 1 * MiB})
	obj := b.put("o", 32*MiB)
	h := f.open(obj)
	defer h.Close()
	readCheck(t, b, h, 0, 256*KiB)
	readCheck(t, b, h, 256*KiB, 256*KiB) // sequential: readahead starts
	b.put("o", 32*MiB)                   // the object changes under the open handle
	var err error
	for off := 512 * KiB; off < 32*MiB && err == nil; off += 256 * KiB {
		_, err = h.ReadAt(context.Background(), make([]byte, 256*KiB), off)
	}
	require.Error(t, err)
	assert.ErrorIs(t, err, bucket.ErrPrecondition)
	// A handle opened on the new version reads it.
	obj2, err := b.Stat(context.Background(), &bucket.StatRequest{Name: "o"})
	require.NoError(t, err)
	h2 := f.open(*obj2)
	defer h2.Close()
	readCheck(t, b, h2, 20*MiB, 1*MiB)
}

// A failed readahead is dropped silently; the demand read fetches itself.
func TestFailedReadaheadRetriedOnDemand(t *testing.T) {
	b := newFakeBucket()
	var failed atomic.Int64
	b.hook = func(ctx context.Context, req *bucket.ReadRequest) error {
		// Fail every request starting in [4 MiB, 8 MiB) once.
		if req.Range.Start >= uint64(4*MiB) && req.Range.Start < uint64(8*MiB) && failed.Add(1) <= 3 {
			return fmt.Errorf("fake: %w", bucket.ErrUnavailable)
		}
		return nil
	}
	f := newTestFetcher(t, Config{Bucket: b, Cache: newMemCache(64 * KiB), MemoryLimit: 16 * MiB, PartSize: 1 * MiB, MaxWindow: 4 * MiB})
	obj := b.put("o", 12*MiB)
	h := f.open(obj)
	sequential(t, b, h, 256*KiB)
	h.Close()
	st := f.Stats()
	assert.Positive(t, st.SpeculativeFailed)
	assert.Positive(t, st.DemandRequests)
}

// The cache refusing writes (full disk) falls back to keeping parts in
// memory: still every byte downloaded once.
func TestCacheRefusingWrites(t *testing.T) {
	b := newFakeBucket()
	cache := newMemCache(64 * KiB)
	cache.refuse = true
	f := newTestFetcher(t, Config{Bucket: b, Cache: cache, MemoryLimit: 16 * MiB, PartSize: 1 * MiB, MaxWindow: 4 * MiB})
	obj := b.put("o", 10*MiB)
	h := f.open(obj)
	sequential(t, b, h, 128*KiB)
	h.Close()
	assert.Equal(t, int64(obj.Size), f.Stats().BytesFetched)
}

// A demand read larger than the whole budget is split and completes.
func TestDemandReadLargerThanBudget(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 4 * MiB, BlockSize: 64 * KiB, PartSize: 1 * MiB, MaxConnections: 3})
	obj := b.put("o", 20*MiB)
	h := f.open(obj)
	readCheck(t, b, h, 12345, 13*MiB)
	h.Close()
	assert.LessOrEqual(t, f.Stats().BudgetPeak, int64(4*MiB))
}

// With the budget full of readahead in flight, a demand read waits (it is
// not refused), readahead is refused meanwhile, and the demand read
// completes once memory frees up.
func TestDemandProgressWhenBudgetFullOfReadahead(t *testing.T) {
	b := newFakeBucket()
	g := newGate(func(r *bucket.ReadRequest) bool { return r.Name == "seq" })
	b.hook = g.hook
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 4 * MiB, BlockSize: 64 * KiB, PartSize: 1 * MiB, MaxWindow: 2 * MiB})
	seq := f.open(b.put("seq", 1<<30))
	// Feed the detector so readahead fills the budget (held in flight).
	for off := int64(0); f.Stats().BudgetInUse < 4*MiB && off < 64*MiB; off += 256 * KiB {
		require.NoError(t, observeErr(seq.observe(off, 256*KiB)))
	}
	require.Equal(t, 4*MiB, f.Stats().BudgetInUse, "readahead filled the budget")
	other := b.put("other", 8*MiB)
	h := f.open(other)
	done := make(chan struct{})
	go func() {
		defer close(done)
		readCheck(t, b, h, 1*MiB, 512*KiB)
	}()
	require.Eventually(t, func() bool {
		f.budget.mu.Lock()
		defer f.budget.mu.Unlock()
		return f.budget.waiters == 1
	}, 10*time.Second, time.Millisecond, "the demand read waits for memory")
	dropped := f.Stats().SpeculativeDropped
	for k := int64(0); k < 4; k++ {
		require.NoError(t, observeErr(seq.observe(64*MiB+k*256*KiB, 256*KiB)))
	}
	assert.Greater(t, f.Stats().SpeculativeDropped, dropped, "readahead yields to the waiting demand read")
	close(g.open) // readahead completes; its parts are kept, then reclaimed for the demand read
	<-done
	seq.Close()
	h.Close()
}

// Kept readahead nobody reads is evicted for demand reads of others.
func TestKeptReadaheadEvictedForDemand(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 4 * MiB, BlockSize: 64 * KiB, PartSize: 1 * MiB, MaxWindow: 2 * MiB})
	seq := f.open(b.put("seq", 64*MiB))
	readCheck(t, b, seq, 0, 256*KiB)
	readCheck(t, b, seq, 256*KiB, 256*KiB) // readahead of ~2 MiB starts, then the reader stalls
	require.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.resident.Len() > 0
	}, 10*time.Second, time.Millisecond)
	// Someone else holds all the rest: only the kept parts can give way.
	used, _ := f.budget.snapshot()
	took := f.budget.limit - used
	require.True(t, f.budget.TryAcquire(took))
	h := f.open(b.put("other", 64*MiB))
	readCheck(t, b, h, 30*MiB+5, 512*KiB)
	assert.Positive(t, f.Stats().Evicted)
	f.budget.Release(took)
	seq.Close()
	h.Close()
}

func TestCloseCancelsReadaheadAndFreesMemory(t *testing.T) {
	b := newFakeBucket()
	g := newGate(func(r *bucket.ReadRequest) bool { return r.Range.Start >= uint64(1*MiB) })
	b.hook = g.hook
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 32 * MiB, BlockSize: 64 * KiB, PartSize: 1 * MiB, MaxWindow: 8 * MiB})
	obj := b.put("o", 1<<30)
	h := f.open(obj)
	for off := int64(0); off < 1*MiB; off += 128 * KiB {
		readCheck(t, b, h, off, 128*KiB)
	}
	require.Positive(t, f.Stats().BudgetInUse, "readahead in flight")
	h.Close() // must not hang on the gated requests
	assert.Zero(t, f.Stats().BudgetInUse)
	assert.Positive(t, g.cancelled.Load(), "in-flight readahead was cancelled")

	// Seeking away: a random jump that evicts a stream from the LRU
	// cancels that stream's readahead.
	f2 := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 32 * MiB, BlockSize: 64 * KiB, PartSize: 1 * MiB, MaxWindow: 8 * MiB, MaxStreams: 1})
	h2 := f2.open(obj)
	for off := int64(0); off < 1*MiB; off += 128 * KiB {
		readCheck(t, b, h2, off, 128*KiB)
	}
	require.Positive(t, f2.Stats().BudgetInUse)
	before := g.cancelled.Load()
	require.NoError(t, observeErr(h2.observe(500*MiB, 4*KiB))) // evicts the only stream
	require.Eventually(t, func() bool { return f2.Stats().BudgetInUse == 0 }, 10*time.Second, time.Millisecond)
	assert.Greater(t, g.cancelled.Load(), before)
	close(g.open)
	h2.Close()
}

// Several sequential readers interleaved on one handle each get readahead,
// and with a cache every byte is still fetched once.
func TestInterleavedStreamsOnOneHandle(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, Cache: newMemCache(64 * KiB), MemoryLimit: 32 * MiB, PartSize: 1 * MiB, MaxWindow: 4 * MiB})
	obj := b.put("o", 1<<30)
	h := f.open(obj)
	starts := []int64{0, 300 * MiB, 600 * MiB, 900 * MiB}
	const per = 6 * MiB
	for off := int64(0); off < per; off += 256 * KiB {
		for _, s := range starts {
			readCheck(t, b, h, s+off, 256*KiB)
		}
	}
	h.Close()
	st := f.Stats()
	assert.Greater(t, st.SpeculativeRequests, 3*st.DemandRequests, "%+v", st)
	assert.LessOrEqual(t, st.DemandRequests, int64(4*len(starts)))
	for _, r := range b.ranges("o") {
		for _, q := range b.ranges("o") {
			if r != q {
				assert.False(t, r.Start < q.Limit && q.Start < r.Limit, "overlapping fetches %v %v", r, q)
			}
		}
	}
}

// Kernel-style reads: several goroutines take the next 128K chunk from a
// shared cursor, so requests arrive concurrently and out of order.
func TestReorderedConcurrentReads(t *testing.T) {
	for _, withCache := range []bool{false, true} {
		t.Run(fmt.Sprintf("cache=%v", withCache), func(t *testing.T) {
			b := newFakeBucket()
			cfg := Config{Bucket: b, MemoryLimit: 32 * MiB, BlockSize: 64 * KiB, PartSize: 1 * MiB, MaxWindow: 8 * MiB}
			if withCache {
				cfg.Cache = newMemCache(64 * KiB)
			}
			f := newTestFetcher(t, cfg)
			obj := b.put("o", 24*MiB)
			h := f.open(obj)
			var next atomic.Int64
			var wg sync.WaitGroup
			for range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						off := next.Add(128*KiB) - 128*KiB
						if off >= int64(obj.Size) {
							return
						}
						readCheck(t, b, h, off, 128*KiB)
					}
				}()
			}
			wg.Wait()
			h.Close()
			st := f.Stats()
			assert.Greater(t, st.SpeculativeRequests, st.DemandRequests, "%+v", st)
			assert.LessOrEqual(t, st.BytesFetched, int64(obj.Size)*11/10, "%+v", st)
		})
	}
}

// A random concurrent workload never takes the budget out of [0, limit]
// (newTestFetcher checks every change) and returns every byte right.
func TestBudgetUnderConcurrentWorkload(t *testing.T) {
	for _, withCache := range []bool{false, true} {
		t.Run(fmt.Sprintf("cache=%v", withCache), func(t *testing.T) {
			b := newFakeBucket()
			cfg := Config{Bucket: b, MemoryLimit: 2 * MiB, BlockSize: 64 * KiB, PartSize: 256 * KiB,
				InitialWindow: 256 * KiB, MaxWindow: 1 * MiB, MaxConnections: 4, SmallObjectSize: 256 * KiB}
			if withCache {
				cfg.Cache = newMemCache(64 * KiB)
			}
			b.hook = func(ctx context.Context, req *bucket.ReadRequest) error {
				return sleepCtx(ctx, time.Duration(req.Range.Start%3)*time.Millisecond)
			}
			f := newTestFetcher(t, cfg)
			objs := []bucket.Object{b.put("a", 6*MiB), b.put("b", 3*MiB+1), b.put("c", 200*KiB)}
			stop := make(chan struct{})
			checked := make(chan struct{})
			go func() {
				defer close(checked)
				for {
					select {
					case <-stop:
						return
					case <-time.After(time.Millisecond):
						f.checkInvariants()
					}
				}
			}()
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(w), 9))
					for range 4 {
						obj := objs[r.IntN(len(objs))]
						h := f.open(obj)
						size := int64(obj.Size)
						if r.IntN(2) == 0 {
							for off := r.Int64N(size / 2); off < size; off += 128 * KiB {
								readCheck(t, b, h, off, 128*KiB)
							}
						} else {
							for range 8 {
								readCheck(t, b, h, r.Int64N(size), 1+r.Int64N(700*KiB))
							}
						}
						h.Close()
					}
				}()
			}
			wg.Wait()
			close(stop)
			<-checked
			st := f.Stats()
			t.Logf("%+v", st)
			assert.LessOrEqual(t, st.BudgetPeak, st.BudgetLimit)
			assert.Zero(t, st.BudgetInUse, "every handle closed: no memory held")
		})
	}
}

// 32 sequential streams share a 256 MiB budget: readahead is dropped, not
// queued, and the accounted peak stays within the limit.
func TestManyStreamsStayWithinBudget(t *testing.T) {
	b := newFakeBucket()
	g := newGate(func(r *bucket.ReadRequest) bool { return r.Range.Start >= uint64(1*MiB) })
	b.hook = g.hook
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 256 * MiB})
	// Phase 1: 32 streams whose readahead is held in flight: together they
	// want far more than the budget.
	handles := make([]*Handle, 32)
	var wg sync.WaitGroup
	for i := range handles {
		handles[i] = f.open(b.put(fmt.Sprintf("big-%d", i), 4<<30))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for off := int64(0); off < 96*MiB; off += 1 * MiB {
				require.NoError(t, observeErr(handles[i].observe(off, 1*MiB)))
			}
		}()
	}
	wg.Wait()
	st := f.Stats()
	assert.Positive(t, st.SpeculativeDropped)
	assert.LessOrEqual(t, st.BudgetPeak, int64(256*MiB))
	assert.Greater(t, st.BudgetPeak, int64(128*MiB), "the budget was actually under pressure")
	for _, h := range handles {
		h.Close()
	}
	assert.Zero(t, f.Stats().BudgetInUse)
	close(g.open)

	// Phase 2: 32 real concurrent sequential readers, every byte checked.
	size := int64(32 * MiB)
	if raceEnabled {
		size = 3 * MiB
	}
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := f.open(b.put(fmt.Sprintf("file-%d", i), size+int64(i)))
			defer h.Close()
			sequential(t, b, h, 1*MiB)
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, f.Stats().BudgetPeak, int64(256*MiB))
}

func TestMetrics(t *testing.T) {
	b := newFakeBucket()
	reg := prometheus.NewRegistry()
	f, err := New(Config{Bucket: b, MemoryLimit: 64 * MiB, Registerer: reg, PartSize: 1 * MiB})
	require.NoError(t, err)
	h := f.open(b.put("o", 8*MiB))
	sequential(t, b, h, 256*KiB)
	h.Close()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		switch {
		case m.Gauge != nil:
			got[mf.GetName()] = m.Gauge.GetValue()
		case m.Counter != nil:
			got[mf.GetName()] = m.Counter.GetValue()
		case m.Histogram != nil:
			got[mf.GetName()] = float64(m.Histogram.GetSampleCount())
		}
	}
	assert.Equal(t, float64(64*MiB), got["ferry_readahead_budget_limit_bytes"])
	assert.Contains(t, got, "ferry_readahead_budget_bytes")
	assert.Contains(t, got, "ferry_readahead_mapped_bytes") // TestFetcherWithMappedBuffers: values
	assert.Contains(t, got, "ferry_readahead_mapped_free_bytes")
	assert.Contains(t, got, "ferry_readahead_dropped_total")
	assert.Positive(t, got["ferry_readahead_window_bytes"], "window growth observed")
	assert.Equal(t, float64(8*MiB), got["ferry_readahead_fetched_bytes_total"])
	// A second Fetcher on the same registry fails until the first closes.
	_, err = New(Config{Bucket: b, MemoryLimit: 64 * MiB, Registerer: reg})
	assert.Error(t, err)
	f.Close()
	f2, err := New(Config{Bucket: b, MemoryLimit: 64 * MiB, Registerer: reg})
	require.NoError(t, err)
	f2.Close()
}

var _ = errors.Is

// Reads smaller than a cache block read each block from the cache once,
// not once per read.
func TestPartialBlockReadsHitCacheOnce(t *testing.T) {
	b := newFakeBucket()
	cache := newMemCache(1 * MiB)
	f := newTestFetcher(t, Config{Bucket: b, Cache: cache, MemoryLimit: 64 * MiB, PartSize: 4 * MiB, MaxWindow: 16 * MiB})
	obj := b.put("o", 16*MiB)
	h := f.open(obj)
	sequential(t, b, h, 1*MiB) // epoch 1 fills the cache
	h.Close()
	fetched := f.Stats().BytesFetched
	cache.reads.Store(0)
	h = f.open(obj)
	// 128K reads, shifted so that no read is block-aligned.
	readCheck(t, b, h, 0, 100*KiB)
	for off := 100 * KiB; off < int64(obj.Size); off += 128 * KiB {
		readCheck(t, b, h, off, 128*KiB)
	}
	h.Close()
	assert.Equal(t, fetched, f.Stats().BytesFetched, "epoch 2 comes from the cache")
	assert.LessOrEqual(t, cache.reads.Load(), int64(16+2), "each 1 MiB block read about once, not 8 times")
}

// A demand read waiting for a readahead part that the store failed for
// good (its retry budget spent: ErrUnavailable from the retry layer)
// fails with it. Going round again would fetch the range anew with a
// whole new budget: with the kernel's own retry of a failed readahead,
// a reader of a dead store waited three times --retry-max-time (found by
// a review), against the documented two.
func TestDemandReadTakesReadaheadsFinalFailure(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 64 * MiB, PartSize: 1 * MiB})
	obj := b.put("o", 64*MiB)
	const gate = 8 * MiB
	release := make(chan struct{})
	b.hook = func(ctx context.Context, req *bucket.ReadRequest) error {
		if int64(req.Range.Start) < gate {
			return nil
		}
		select { // the store is down from here on
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return fmt.Errorf("fake: giving up after 5 attempts: connection refused: %w", bucket.ErrUnavailable)
	}
	h := f.open(obj)
	defer h.Close()
	for off := int64(0); off < gate; off += MiB {
		readCheck(t, b, h, off, MiB)
	}
	partAt := func() *part {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.table[blockKey{h.key, gate / f.bs}]
	}
	require.Eventually(t, func() bool { p := partAt(); return p != nil && p.spec }, 5*time.Second, time.Millisecond,
		"readahead reached past the gate")
	p := partAt()

	errc := make(chan error, 1)
	go func() {
		_, err := h.ReadAt(context.Background(), make([]byte, MiB), gate)
		errc <- err
	}()
	require.Eventually(t, p.urgent.Load, 5*time.Second, time.Millisecond, "the read waits for the readahead")
	close(release)
	require.ErrorIs(t, <-errc, bucket.ErrUnavailable)

	asked := 0
	for _, r := range b.ranges("o") {
		if int64(r.Start) <= gate && gate < int64(r.Limit) {
			asked++
		}
	}
	assert.Equal(t, 1, asked, "the range is not asked for again")
}
