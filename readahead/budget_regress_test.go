package readahead

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"ferry/bucket"
)

// Regression tests for defects a review found in the budget and the part
// table.

// TestNoLostWakeupWhenReaderLetsGo: a demand read waiting in
// budget.Acquire is woken when a kept part settles, but cannot reclaim it
// while a reader still holds a reference (chunk.wait holds references on
// later parts while it waits for an earlier one). When that reader drops
// its reference (refs 2 -> 1) the part is reclaimable, and the waiter must
// be woken then, not at some unrelated budget event (which, with nothing
// else reading, never comes).
func TestNoLostWakeupWhenReaderLetsGo(t *testing.T) {
	b := newFakeBucket()
	g := newGate(func(r *bucket.ReadRequest) bool { return r.Name == "seq" })
	b.hook = g.hook
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 4 * MiB, BlockSize: 64 * KiB, PartSize: 1 * MiB, MaxWindow: 2 * MiB})
	seq := f.open(b.put("seq", 1<<30))
	for off := int64(0); f.Stats().BudgetInUse < 4*MiB && off < 64*MiB; off += 256 * KiB {
		require.NoError(t, observeErr(seq.observe(off, 256*KiB)))
	}
	require.Equal(t, 4*MiB, f.Stats().BudgetInUse)

	// A reader of seq (what chunk.lookup(true) does for a read overlapping
	// the in-flight readahead): one reference on every in-flight part, and
	// it will want just the first block of each.
	f.mu.Lock()
	var all []*part
	for _, p := range f.table {
		if !slices.Contains(all, p) {
			all = append(all, p)
		}
	}
	f.mu.Unlock()
	// One 1-byte reader per part, each holding a reference (as chunk.wait
	// does for the parts after the one it is waiting for).
	var chunks []*chunk
	var parts [][]*part
	for _, p := range all {
		c := &chunk{f: f, h: seq, cs: p.start, ce: p.start + 1, b0: p.first, filled: make([]bool, 1), left: 1, dst: make([]byte, 1)}
		ps, _, missing := c.lookup(true)
		require.Empty(t, missing)
		chunks, parts = append(chunks, c), append(parts, ps)
	}
	t.Logf("%d in-flight parts referenced by readers", len(all))

	// W: a demand read of another object, waiting for memory.
	h := f.open(b.put("other", 8*MiB))
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, err := h.ReadAt(ctx, make([]byte, 512*KiB), 1*MiB)
		done <- err
	}()
	require.Eventually(t, func() bool {
		f.budget.mu.Lock()
		defer f.budget.mu.Unlock()
		return f.budget.waiters == 1
	}, 10*time.Second, time.Millisecond)

	close(g.open) // readahead completes: parts settle as kept (Notify), W's reclaim finds refs==2
	require.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.resident.Len() == len(all)
	}, 10*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond)

	// The reader copies its block of each part and drops its references.
	for i, c := range chunks {
		c.copyParts(parts[i], false)
	}
	f.mu.Lock()
	var refs []int
	for _, p := range all {
		refs = append(refs, p.refs)
	}
	f.mu.Unlock()
	t.Logf("refs after copy: %v", refs)

	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(3 * time.Second):
		used, _ := f.budget.snapshot()
		t.Errorf("demand read still waiting 3s later: %d reclaimable kept parts, budget %d/%d", len(all), used, f.budget.limit)
		// Any unrelated budget event frees it:
		f.budget.Notify()
		require.NoError(t, <-done)
	}
	seq.Close()
	h.Close()
}

// TestUnversionedHandlesShareNoParts: a store without versions (Version
// "", e.g. an S3 gateway that gives no ETag) cannot tell two contents of
// one name apart, so a handle opened after the object changed must not be
// served a part kept for a handle opened before, whose bytes, and past its
// length the pooled buffer's previous content, are not the object's.
func TestUnversionedHandlesShareNoParts(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 64 * MiB, BlockSize: 64 * KiB})
	const s1 = 1*MiB - 100
	b.put("u", s1)
	a := f.open(bucket.Object{Name: "u", Size: uint64(s1)}) // Version ""
	_, err := a.ReadAt(context.Background(), make([]byte, 1), 0)
	require.NoError(t, err) // whole object fetched, kept in memory
	f.mu.Lock()
	p := f.table[blockKey{a.key, 15}]
	require.NotNil(t, p)
	// What a pooled buffer may still hold past the part's length.
	copy(p.buf[len(p.buf):cap(p.buf)], bytes.Repeat([]byte{0xEE}, cap(p.buf)-len(p.buf)))
	f.mu.Unlock()

	b.put("u", 2*MiB) // the object is replaced: new size, new content
	bh := f.open(bucket.Object{Name: "u", Size: uint64(2 * MiB)})
	got := make([]byte, 20)
	_, err = bh.ReadAt(context.Background(), got, s1-10)
	require.NoError(t, err)
	require.Equal(t, want(b.seed("u"), s1-10, 20), got)
	a.Close()
	bh.Close()
}

// TestLargeDemandReadIsNotStarved: a 1 MiB demand read waits in
// budget.Acquire behind a steady stream of 64 KiB demand reads. Waiters
// are served in order; otherwise each 64 KiB freed would go to a small
// waiter and the large one would never find 1 MiB free at once.
func TestLargeDemandReadIsNotStarved(t *testing.T) {
	b := newFakeBucket()
	b.hook = func(ctx context.Context, req *bucket.ReadRequest) error { return sleepCtx(ctx, 5*time.Millisecond) }
	f := newTestFetcher(t, Config{Bucket: b, MemoryLimit: 4 * MiB, BlockSize: 64 * KiB, PartSize: 1 * MiB, MaxConnections: 256})
	var objs []bucket.Object
	for i := range 200 {
		objs = append(objs, b.put(fmt.Sprint("o", i), 1<<30))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var small atomic.Int64
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := f.open(objs[i])
			defer h.Close()
			p := make([]byte, 64*KiB)
			for k := int64(0); ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				// random-looking, block aligned
				if _, err := h.ReadAt(context.Background(), p, ((k*7919+int64(i)*104729)%16000)*64*KiB); err != nil {
					t.Error(err)
					return
				}
				small.Add(1)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	big := f.open(b.put("big", 1<<30))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	start := time.Now()
	s0 := small.Load()
	_, err := big.ReadAt(ctx, make([]byte, 1*MiB), 100*MiB)
	t.Logf("1 MiB read: %v after %v; %d small reads meanwhile", err, time.Since(start), small.Load()-s0)
	cancel()
	close(stop)
	wg.Wait()
	big.Close()
	if err != nil {
		t.Errorf("large demand read starved: %v", err)
	}
}
