package readahead

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"golang.org/x/sync/errgroup"

	"ferry/bucket"
)

// Demand reads: a read is cut into chunks of at most a part, and each
// chunk is served from memory (parts fetched or kept), the disk cache and
// the store, in that order, fetching each missing block once whoever else
// wants it too.

// read fills dst with [off, end), in chunks of at most one part so that
// no single demand read needs more memory than the budget can give.
func (f *Fetcher) read(ctx context.Context, h *Handle, dst []byte, off, end int64, advise bool) error {
	chunkEnd := func(cs int64) int64 { return min(end, alignDown(cs, f.bs)+f.cfg.PartSize) }
	if chunkEnd(off) == end {
		return f.readChunk(ctx, h, dst, off, end, advise)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(f.cfg.MaxConnections)
	for cs := off; cs < end; {
		ce := chunkEnd(cs)
		d := dst[cs-off : ce-off]
		from := cs
		g.Go(func() error { return f.readChunk(gctx, h, d, from, ce, advise) })
		cs = ce
	}
	return g.Wait()
}

// chunk is one demand read of [cs, ce) into dst; its blocks are
// [b0, b0+len(filled)).
type chunk struct {
	f      *Fetcher
	h      *Handle
	dst    []byte
	cs, ce int64
	b0     int64
	filled []bool
	left   int
	advise bool // announce multi-block cache reads (random reads only)
}

// readChunk serves [cs, ce) from memory, the cache and the bucket, in that
// order. Each round it either waits for fetches already in flight or funds
// and starts its own; it never blocks on the budget while holding
// references to parts, so demand reads cannot deadlock one another.
func (f *Fetcher) readChunk(ctx context.Context, h *Handle, dst []byte, cs, ce int64, advise bool) error {
	b0, b1 := cs/f.bs, (ce+f.bs-1)/f.bs
	c := &chunk{f: f, h: h, dst: dst, cs: cs, ce: ce, b0: b0, filled: make([]bool, b1-b0), left: int(b1 - b0), advise: advise}
	// Every round copies something, starts a fetch, or sees a fetch it
	// waited for fail; only failures count against maxAttempts.
	failures := 0
	for first := true; c.left > 0; first = false {
		if failures >= maxAttempts {
			return fmt.Errorf("readahead: read %q [%d, %d): %w: gave up after %d failed fetches",
				h.obj.Name, cs, ce, bucket.ErrUnavailable, failures)
		}
		if err := ctx.Err(); err != nil {
			return bucket.ContextError(ctx, err)
		}
		// Memory first; note the blocks whose fetch is in flight.
		parts, inflight, _ := c.lookup(false)
		c.copyParts(parts, false)
		if f.cache != nil {
			if err := c.readCache(ctx, inflight); err != nil {
				return err
			}
		}
		if c.left == 0 {
			break
		}
		var extras []int64
		if h.whole.Load() && first {
			extras = c.smallExtras()
		}
		parts, _, missing := c.lookup(true)
		var own []*part
		if len(missing) > 0 {
			mine, more, err := c.claim(ctx, missing, extras, len(parts) > 0)
			if err != nil {
				c.unref(parts)
				return err
			}
			own = mine
			parts = append(parts, more...)
			parts = append(parts, own...)
		}
		n, err := c.wait(ctx, parts, own)
		if err != nil {
			return err
		}
		failures += n
	}
	return nil
}

// blockRange is the byte range of block i clipped to the object and the
// part of it this chunk wants.
func (c *chunk) blockRange(i int64) (bs, be, lo, hi int64) {
	bs = i * c.f.bs
	be = min(bs+c.f.bs, int64(c.h.obj.Size))
	return bs, be, max(bs, c.cs), min(be, c.ce)
}

// lookup finds the unfilled blocks in the table. It returns the parts
// covering them, with a reference taken: done ones always, in-flight ones
// only if takeInflight (else it marks them in inflight). missing lists the
// blocks no part covers.
func (c *chunk) lookup(takeInflight bool) (parts []*part, inflight []bool, missing []int64) {
	f := c.f
	inflight = make([]bool, len(c.filled))
	f.mu.Lock()
	defer f.mu.Unlock()
	for j, ok := range c.filled {
		if ok {
			continue
		}
		i := c.b0 + int64(j)
		p := f.table[blockKey{c.h.key, i}]
		if p == nil {
			missing = append(missing, i)
			continue
		}
		if p.buf == nil && !takeInflight {
			inflight[j] = true
			continue
		}
		if !slices.Contains(parts, p) {
			p.refs++
			if p.buf == nil {
				p.urgent.Store(true)
			}
			parts = append(parts, p)
		}
	}
	return parts, inflight, missing
}

// copyParts copies from done parts, or from the heads of parts of ours
// that delivered early, and drops the references.
func (c *chunk) copyParts(parts []*part, head bool) {
	if len(parts) == 0 {
		return
	}
	type use struct {
		p    *part
		i, n int64
	}
	var uses []use
	for _, p := range parts {
		for i := max(p.first, c.b0); i < min(p.limit, c.b0+int64(len(c.filled))); i++ {
			j := i - c.b0
			if c.filled[j] {
				continue
			}
			_, _, lo, hi := c.blockRange(i)
			src := p.head
			if !head {
				src = p.buf
			}
			copy(c.dst[lo-c.cs:hi-c.cs], src[lo-p.start:hi-p.start])
			c.filled[j] = true
			c.left--
			switch {
			case p.fromCache:
				c.f.stats.cacheHitBytes.Add(hi - lo)
			case p.spec:
				c.f.stats.prefetchHitBytes.Add(hi - lo)
			}
			uses = append(uses, use{p, i, hi - lo})
		}
	}
	var tell []*part
	c.f.mu.Lock()
	for _, u := range uses {
		if c.f.consumeLocked(u.p, u.i, u.n) {
			tell = append(tell, u.p)
		}
	}
	for _, p := range parts {
		c.f.unrefLocked(p)
	}
	c.f.mu.Unlock()
	for _, p := range tell {
		c.f.cache.Consumed(p.owner.cacheKey)
	}
}

func (c *chunk) unref(parts []*part) {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	for _, p := range parts {
		c.f.unrefLocked(p)
	}
}

// readCache fills unfilled blocks that are not in flight from the cache.
// Called holding no references.
func (c *chunk) readCache(ctx context.Context, inflight []bool) error {
	f := c.f
	if c.advise && c.left > 1 {
		f.cache.WillRead(c.h.cacheKey, c.b0, int64(len(c.filled)))
	}
	// Runs of whole blocks wanted: one disk read each.
	for j := 0; j < len(c.filled); {
		if c.filled[j] || inflight[j] || !c.whole(j) {
			j++
			continue
		}
		k := j + 1
		for k < len(c.filled) && !c.filled[k] && !inflight[k] && c.whole(k) {
			k++
		}
		_, _, lo, _ := c.blockRange(c.b0 + int64(j))
		_, _, _, hi := c.blockRange(c.b0 + int64(k-1))
		ok := c.filled[j:k:k] // filled by ReadBlocks (all false here)
		n := f.cache.ReadBlocks(c.h.cacheKey, c.b0+int64(j), c.dst[lo-c.cs:hi-c.cs], ok)
		c.left -= n
		if n > 0 {
			for i, good := range ok {
				if good {
					_, _, blo, bhi := c.blockRange(c.b0 + int64(j+i))
					f.stats.cacheHitBytes.Add(bhi - blo)
				}
			}
		}
		j = k
	}
	// Blocks we want only part of: the cache reads (and checks) whole
	// blocks, so keep the block in memory for the reads of the rest of it,
	// which usually follow.
	for j, ok := range c.filled {
		if ok || inflight[j] || c.whole(j) {
			continue
		}
		i := c.b0 + int64(j)
		bs, be, lo, hi := c.blockRange(i)
		cost := f.pool.class(be - bs)
		if err := f.budget.Acquire(ctx, cost); err != nil {
			return err
		}
		buf := f.pool.get(be - bs)
		var got [1]bool
		if f.cache.ReadBlocks(c.h.cacheKey, i, buf, got[:]) == 0 {
			f.pool.put(buf)
			f.budget.Release(cost)
			continue
		}
		copy(c.dst[lo-c.cs:hi-c.cs], buf[lo-bs:hi-bs])
		c.filled[j] = true
		c.left--
		f.stats.cacheHitBytes.Add(hi - lo)
		f.keepCacheBlock(c.h, i, buf, cost, hi-lo)
	}
	return nil
}

// whole reports whether the chunk wants all of its j-th block.
func (c *chunk) whole(j int) bool {
	bs, be, lo, hi := c.blockRange(c.b0 + int64(j))
	return lo == bs && hi == be
}

// keepCacheBlock publishes block i, just read from the cache into buf
// (cost accounted), as a kept part of which n bytes are already consumed;
// or frees it if the block is in memory already.
func (f *Fetcher) keepCacheBlock(h *Handle, i int64, buf []byte, cost, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || h.closed.Load() || f.table[blockKey{h.key, i}] != nil {
		f.pool.put(buf)
		f.budget.Release(cost)
		return
	}
	p := &part{
		key: h.key, obj: &h.obj, first: i, limit: i + 1,
		start: i * f.bs, end: i*f.bs + int64(len(buf)),
		keep: true, fromCache: true, owner: h,
		done: closedChan, cost: cost, buf: buf, refs: 1, owned: true,
		consumed: make([]int64, 1), left: 1,
	}
	f.table[blockKey{h.key, i}] = p
	p.inTable = true
	p.elem = f.resident.PushBack(p)
	f.consumeLocked(p, i, n)
}

// closedChan is the done channel of parts that are born complete.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// smallExtras lists the blocks of a small object outside this chunk that
// the cache lacks, so the first read fetches the whole object at once.
func (c *chunk) smallExtras() []int64 {
	f := c.f
	n := (int64(c.h.obj.Size) + f.bs - 1) / f.bs
	var extras []int64
	for i := int64(0); i < n; i++ {
		if i >= c.b0 && i < c.b0+int64(len(c.filled)) {
			continue
		}
		if f.cache == nil || !f.cache.HasBlock(c.h.cacheKey, i) {
			extras = append(extras, i)
		}
	}
	return extras
}

// claim funds and starts fetches for the missing blocks (merged into runs
// with adjacent extras). If the budget is full and deferOK, it returns
// nothing: the caller first waits for the fetches it holds references to.
// It returns its own parts (referenced) and parts of blocks someone else
// claimed meanwhile (referenced).
func (c *chunk) claim(ctx context.Context, missing, extras []int64, deferOK bool) (own, more []*part, err error) {
	f := c.f
	want := make(map[int64]bool, len(missing)+len(extras))
	for _, i := range missing {
		want[i] = true
	}
	for _, i := range extras {
		want[i] = false
	}
	all := append(slices.Clone(missing), extras...)
	slices.Sort(all)
	runs := c.runs(all, want)
	var cost int64
	for _, r := range runs {
		cost += f.pool.class(r.bytes(f.bs, c.h.obj.Size))
	}
	if !f.budget.TryAcquire(cost) {
		if deferOK {
			return nil, nil, nil
		}
		if err := f.budget.Acquire(ctx, cost); err != nil {
			return nil, nil, err
		}
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		f.budget.Release(cost)
		return nil, nil, ErrClosed
	}
	// Blocks someone else started meanwhile are theirs.
	var free []int64
	for _, i := range all {
		p := f.table[blockKey{c.h.key, i}]
		switch {
		case p == nil:
			free = append(free, i)
		case want[i] && !slices.Contains(more, p):
			p.refs++
			if p.buf == nil {
				p.urgent.Store(true)
			}
			more = append(more, p)
		}
	}
	var used int64
	keep := c.h.whole.Load() && f.cache == nil
	for _, r := range c.runs(free, want) {
		p := f.newPart(c.h, r, false, keep)
		p.refs++ // ours
		pctx := ctx
		if !keep {
			// The reader takes its bytes as soon as they are in (see
			// part.early; not before a whole object's checksum is
			// compared) and its read's context ends with the reply
			// (jacobsa/fuse cancels it), while the fetch goes on for
			// the cache: wait cancels the fetch if the reader gives up
			// before that.
			if !checked(p) {
				p.need = min(p.end, c.ce)
				p.early = make(chan struct{})
			}
			pctx = context.WithoutCancel(ctx)
		}
		p.ctx, p.cancel = context.WithCancel(pctx)
		stop := context.AfterFunc(f.ctx, p.cancel)
		cancel := p.cancel
		p.cancel = func() { stop(); cancel() }
		used += p.cost
		own = append(own, p)
		f.launch(p)
	}
	f.mu.Unlock()
	f.budget.Release(cost - used)
	return own, more, nil
}

// runs groups sorted blocks into runs of consecutive blocks and keeps only
// runs containing a block the chunk wants (want[i] true).
func (c *chunk) runs(blocks []int64, want map[int64]bool) []blockRun {
	var runs []blockRun
	for k := 0; k < len(blocks); {
		l := k + 1
		for l < len(blocks) && blocks[l] == blocks[l-1]+1 {
			l++
		}
		for m := k; m < l; m++ {
			if want[blocks[m]] {
				runs = append(runs, blockRun{blocks[k], blocks[l-1] + 1})
				break
			}
		}
		k = l
	}
	return runs
}

// wait waits for parts (all referenced), copies what they bring and drops
// the references. A failed fetch of our own is the read's error; someone
// else's cancelled or speculative fetch just sends us round again.
func (c *chunk) wait(ctx context.Context, parts, own []*part) (failures int, err error) {
	for k, p := range parts {
		var early chan struct{} // never ready unless p is ours
		if slices.Contains(own, p) {
			early = p.early
		}
		select {
		case <-early:
			c.copyParts([]*part{p}, true)
			continue
		case <-p.done:
		case <-ctx.Done():
			stopUndelivered(own)
			c.unref(parts[k:])
			return failures, bucket.ContextError(ctx, ctx.Err())
		}
		select {
		case <-early: // closed before done: our bytes are good, whatever became of the padding
			c.copyParts([]*part{p}, true)
			continue
		default:
		}
		if p.err == nil {
			c.copyParts([]*part{p}, false)
			continue
		}
		c.unref([]*part{p})
		// Someone else's failure is ours too unless it was cancelled
		// (its reader seeked away, closed, or gave up); a speculative
		// part's only if the store failed it for good (its retry budget
		// spent): a fresh fetch would wait a whole budget more, and the
		// reader's wait would reach twice --retry-max-time, or three
		// times with the kernel's retry of a failed readahead (found by
		// a review: 30.8 s at a 10 s budget).
		if slices.Contains(own, p) || !errors.Is(p.err, bucket.ErrCanceled) && (!p.spec || errors.Is(p.err, bucket.ErrUnavailable)) {
			stopUndelivered(own)
			c.unref(parts[k+1:])
			return failures, p.err
		}
		failures++
	}
	return failures, nil
}

// stopUndelivered cancels the fetches of a read that gives up (its
// context ended, or a fetch failed): they outlive the read only once they
// have delivered (see claim). Anyone else waiting for them goes round
// again.
func stopUndelivered(own []*part) {
	for _, p := range own {
		select {
		case <-p.early:
		default:
			p.cancel()
		}
	}
}
