package readahead

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mapping returns the VmFlags of the mapping holding addr, from
// /proc/self/smaps, and whether there is one.
func mapping(t *testing.T, addr uintptr) ([]string, bool) {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	in, found := false, false
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 {
			in = lo <= addr && addr < hi
			found = found || in
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.Fields(strings.TrimPrefix(line, "VmFlags:")), true
		}
	}
	require.NoError(t, sc.Err())
	return nil, found
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func needHugePages(t *testing.T) int64 {
	hp := hugePageSize()
	if hp == 0 {
		t.Skip("no transparent huge pages here")
	}
	if hp > 2<<20 {
		// 32 MiB or 512 MiB (arm64 with 16 or 64 KiB pages): these tests
		// would map and read gigabytes.
		t.Skipf("huge pages of %d MiB: too large for these tests", hp>>20)
	}
	return hp
}

// checkMapped: the pool's books agree with its buffers, and it never maps
// more than its limit.
func checkMapped(t *testing.T, m *mappedBuffers) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	var sum, free int64
	for _, c := range m.owned {
		sum += c
	}
	for c, l := range m.free {
		for _, fb := range l {
			free += c
			assert.Equal(t, c, m.owned[unsafe.SliceData(fb.b)], "a free buffer is owned, with its size")
		}
	}
	assert.Equal(t, sum, m.mapped)
	assert.Equal(t, free, m.freeBytes)
	assert.LessOrEqual(t, m.mapped, m.limit)
}

// TestMappedBuffers: buffers of whole huge pages are aligned and advised
// to use huge pages; freed ones are reused; mapped bytes never exceed the
// limit (free buffers of other sizes give way); idle ones are unmapped.
func TestMappedBuffers(t *testing.T) {
	hp := needHugePages(t)
	m := newMappedBuffers(8 * hp)
	require.NotNil(t, m)
	m.idle = time.Hour // trimmed by hand below
	var told []int64   // what Config.OffHeap hears
	m.onChange = func(n int64) { told = append(told, n) }
	assert.True(t, m.fits(2*hp))
	assert.True(t, m.fits(hp+64<<10), "whole pages: mapped too")
	assert.False(t, m.fits(64<<10+100), "not whole pages: the heap's")
	assert.False(t, m.fits(0))

	b := m.get(2 * hp)
	require.Len(t, b, int(2*hp))
	assert.Zero(t, addrOf(b)%uintptr(hp), "aligned to a huge page")
	flags, ok := mapping(t, addrOf(b))
	require.True(t, ok)
	assert.Contains(t, flags, "hg", "advised MADV_HUGEPAGE")
	for i := range b {
		b[i] = byte(i)
	}
	first := addrOf(b)
	require.True(t, m.put(b[:100]), "taken back whatever its length")
	b = m.get(2 * hp)
	assert.Equal(t, first, addrOf(b), "reused")
	assert.Equal(t, byte(99), b[99], "reused as it was: not zeroed")
	checkMapped(t, m)
	assert.Equal(t, []int64{2 * hp}, told, "one mapping")

	// Up to the limit, then none: the caller uses the heap.
	bufs := [][]byte{b}
	for range 3 {
		bufs = append(bufs, m.get(2*hp))
	}
	for _, b := range bufs {
		require.NotNil(t, b)
	}
	assert.Nil(t, m.get(2*hp), "all 8 huge pages in use")
	assert.Nil(t, m.get(hp))
	checkMapped(t, m)

	// A free buffer of another size gives way to a new one.
	require.True(t, m.put(bufs[0]))
	small := m.get(hp)
	require.NotNil(t, small)
	checkMapped(t, m)
	assert.Equal(t, 7*hp, m.mapped, "the free buffer was unmapped")
	assert.Empty(t, m.free[2*hp])

	// Not ours: heap buffers are left to the caller.
	assert.False(t, m.put(make([]byte, 2*hp)))
	assert.False(t, m.put(nil))

	// Idle buffers are unmapped by trim; recent ones are kept.
	require.True(t, m.put(bufs[1]))
	require.True(t, m.put(bufs[2]))
	m.mu.Lock()
	m.free[2*hp][0].at = time.Now().Add(-2 * m.idle) // bufs[1], freed long ago
	m.mu.Unlock()
	m.trim()
	m.mu.Lock()
	assert.Len(t, m.free[2*hp], 1, "the recent one is kept")
	_, owned := m.owned[unsafe.SliceData(bufs[1])] // (a lookup: nothing may read an unmapped buffer)
	assert.False(t, owned, "the idle one is unmapped")
	assert.NotNil(t, m.timer, "a trim is due for the one kept")
	m.mu.Unlock()
	checkMapped(t, m)

	// close unmaps what is free now, the rest when it comes back.
	require.True(t, m.put(small))
	m.close()
	checkMapped(t, m)
	assert.Nil(t, m.timer)
	assert.Equal(t, 2*hp, m.mapped, "bufs[3] still in use")
	assert.True(t, m.put(bufs[3]))
	assert.Zero(t, m.mapped)
	assert.Empty(t, m.owned)
	require.NotEmpty(t, told)
	assert.Zero(t, told[len(told)-1], "all unmapped: told so")
	assert.Nil(t, m.get(2*hp), "closed: the heap's")
}

// TestMappedBuffersTrimmedWhenIdle: free buffers go back to the system
// once idle, by the timer alone, as they come (the timer is set again for
// the next one).
func TestMappedBuffersTrimmedWhenIdle(t *testing.T) {
	hp := needHugePages(t)
	m := newMappedBuffers(4 * hp)
	require.NotNil(t, m)
	defer m.close()
	m.idle = 20 * time.Millisecond
	a, b := m.get(hp), m.get(hp)
	require.NotNil(t, a)
	require.NotNil(t, b)
	m.put(a)
	time.Sleep(10 * time.Millisecond) // b is freed later: a second round
	m.put(b)
	require.Eventually(t, func() bool {
		mapped, free := m.snapshot()
		return mapped == 0 && free == 0
	}, time.Minute, 5*time.Millisecond)
	checkMapped(t, m)
}

// TestPoolKeepsFreeMappedWithinBudget: free mapped buffers are kept only
// while the budget has room for them, and within a quarter of it; buffers
// taken for other sizes push them out, so that what is in use and what is
// kept never exceed the budget together.
func TestPoolKeepsFreeMappedWithinBudget(t *testing.T) {
	hp := needHugePages(t)
	limit, used := 16*hp, int64(0)
	p := bufPool{blockSize: 64 << 10, mapped: newMappedBuffers(limit), room: func() int64 { return limit - used }}
	defer p.close()
	m := p.mapped
	m.idle = time.Hour

	// A sequential read: six parts of two huge pages, then done.
	var bufs [][]byte
	for range 6 {
		used += 2 * hp
		bufs = append(bufs, p.get(2*hp))
	}
	for _, b := range bufs {
		p.put(b)
		used -= 2 * hp
	}
	checkMapped(t, m)
	assert.Equal(t, 12*hp, m.freeBytes, "kept until the next buffer is taken")

	// Another read, of other sizes: a buffer of 3 huge pages. Free ones
	// make way down to a quarter of the budget, 4 huge pages.
	used += 3 * hp
	other := p.get(3*hp - 64<<10)
	require.Len(t, other, int(3*hp-64<<10))
	checkMapped(t, m)
	assert.Equal(t, 4*hp, m.freeBytes)
	assert.Equal(t, 4*hp+int64(cap(other)), m.mapped)

	// A mapped buffer reused is no longer free: nothing else goes.
	used += 2 * hp
	b := p.get(2 * hp)
	assert.Equal(t, 2*hp, m.freeBytes)
	assert.Equal(t, 4*hp+int64(cap(other)), m.mapped)

	// The budget nearly full: free buffers within what is left of it.
	used += 10 * hp
	c := p.get(10*hp - 64<<10)
	checkMapped(t, m)
	require.Equal(t, hp, limit-used, "one huge page of room")
	assert.Zero(t, m.freeBytes, "no room: the free buffer went")
	assert.LessOrEqual(t, used+m.freeBytes, limit)
	p.put(b)
	p.put(c)
	p.put(other)
	checkMapped(t, m)
	assert.Zero(t, p.onHeap.Load(), "every buffer mapped")
}

// TestMappedBuffersConcurrent: many goroutines taking and returning
// buffers of two sizes, each writing its buffer and checking it is still
// its own before giving it back.
func TestMappedBuffersConcurrent(t *testing.T) {
	hp := needHugePages(t)
	m := newMappedBuffers(16 * hp)
	require.NotNil(t, m)
	m.idle = time.Millisecond // unmapping races with reuse
	defer m.close()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				c := hp * int64(1+(w+i)%2)
				b := m.get(c)
				if b == nil {
					continue // at the limit
				}
				tag := byte(w*31 + i)
				for j := 0; j < len(b); j += 4096 {
					b[j] = tag
				}
				for j := 0; j < len(b); j += 4096 {
					if b[j] != tag {
						t.Errorf("buffer shared: %d at %d", b[j], j)
						return
					}
				}
				m.put(b)
			}
		}()
	}
	wg.Wait()
	checkMapped(t, m)
}

// TestFetcherWithMappedBuffers: the concurrent workload of
// TestBudgetUnderConcurrentWorkload, every byte checked, with parts in
// mapped buffers (a Fetcher keeps them on the heap under the race
// detector, which sees only the heap).
func TestFetcherWithMappedBuffers(t *testing.T) {
	hp := needHugePages(t)
	b := newFakeBucket()
	// Windows are cut into 16 parts: from 16 huge pages on, parts are
	// whole huge pages.
	reg := prometheus.NewRegistry()
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 48 * hp, BlockSize: 64 * KiB, PartSize: hp,
		InitialWindow: 2 * hp, MaxWindow: 32 * hp, MaxConnections: 4, SmallObjectSize: 256 * KiB, Registerer: reg})
	if f.pool.mapped == nil {
		f.pool.mapped = newMappedBuffers(f.cfg.MemoryLimit)
	}
	m := f.pool.mapped
	m.idle = time.Hour // nothing trimmed between the snapshot and the gauges
	size := 64 * hp
	if raceEnabled {
		size = 40 * hp
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := f.open(b.put(fmt.Sprintf("obj-%d", w), size+int64(w)*4096))
			defer h.Close()
			sequential(t, b, h, 1*MiB)
		}()
	}
	wg.Wait()
	m.mu.Lock()
	used := len(m.owned)
	m.mu.Unlock()
	assert.Positive(t, used, "parts were read into mapped buffers")
	checkMapped(t, m)
	// The metrics say as much.
	mapped, free := m.snapshot()
	assert.Positive(t, free, "every handle closed: kept for reuse")
	assert.InDelta(t, float64(mapped), testutil.ToFloat64(f.collectors[3]), 0)
	assert.InDelta(t, float64(free), testutil.ToFloat64(f.collectors[4]), 0)
	n, err := testutil.GatherAndCount(reg, "ferry_readahead_mapped_bytes", "ferry_readahead_mapped_free_bytes")
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	f.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	assert.Zero(t, m.mapped, "closed with every handle closed: all unmapped")
}

// TestFetcherBuffersOffHeap: no part buffer comes from the Go heap, whatever
// its size: the graded parts of a stream that starts deep in an object,
// the parts cut short as its window grows, demand reads of odd sizes and
// blocks read from the cache for part of them. On the heap, such buffers
// let the garbage collector grow the heap to twice what is live, past the
// budget (issue 32: 834-849 MiB of RSS against 512 MiB).
func TestFetcherBuffersOffHeap(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, Cache: newMemCache(64 * KiB), MemoryLimit: 64 * MiB,
		PartSize: 4 * MiB, MaxConnections: 8})
	if f.pool.mapped == nil {
		f.pool.mapped = newMappedBuffers(f.cfg.MemoryLimit) // as without the race detector
	}
	m := f.pool.mapped
	m.idle = time.Hour
	sizes := map[int64]bool{} // capacities mapped
	m.onChange = func(int64) {
		for _, c := range m.owned { // (m.mu is held)
			sizes[c] = true
		}
	}
	obj := b.put("deep", 256*MiB)

	// Sequential 1 MiB reads from 200 MiB in: a young stream, graded.
	h := f.open(obj)
	for off := int64(200 * MiB); off < 232*MiB; off += MiB {
		readCheck(t, b, h, off, MiB)
	}
	h.Close()
	// Random reads of odd sizes at odd offsets: demand parts, and blocks
	// read from the cache (above) for part of them.
	h = f.open(obj)
	for i, off := range []int64{7 * MiB, 90*MiB + 4097, 203*MiB + 100, 31 * MiB, 211*MiB + 65535, 150 * MiB} {
		readCheck(t, b, h, off, MiB+int64(i)*(100*KiB+3))
	}
	h.Close()

	assert.Zero(t, f.pool.onHeap.Load(), "buffers made on the Go heap")
	m.mu.Lock()
	defer m.mu.Unlock()
	var odd int
	for c := range sizes {
		if m.hp == 0 || c%m.hp != 0 {
			odd++
		}
	}
	assert.Greater(t, odd, 3, "buffers not of whole huge pages were mapped: %v", sizes)
	assert.Zero(t, m.mapped-m.freeBytes, "every buffer back")
}
