package metadata

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
)

// Directory prefetch: a training loader often opens files it never listed
// (the file list came from a manifest, or from a listing made by another
// process before a remount). Each such lookup costs a Stat and a List on
// the store, a round trip each. After a few lookup misses in one
// directory, one background listing of the whole directory answers all
// the others, and says which names do not exist, at 1000 entries a
// request.
//
// Best effort throughout: at most prefetchParallel listings at once, taken
// with TryAcquire and dropped (not queued) when none is free; a directory
// larger than prefetchMaxEntries is not cached by prefetch at all.
const (
	prefetchAfterMisses = 3
	prefetchParallel    = 2
	prefetchMaxEntries  = 200_000
	prefetchTracked     = 10_000 // directories whose misses are counted at once
	// prefetchTooLargeFor is how long a directory found too large to
	// cache is not listed again by prefetch: each try costs
	// prefetchMaxEntries/1000 requests for nothing.
	prefetchTooLargeFor = 10 * time.Minute
)

type prefetcher struct {
	// Dependencies
	c *Cache

	// Constant data
	enabled    bool // lists when asked (ListSoon)
	afterMiss  int  // misses that start a listing; 0: never
	maxEntries int  // prefetchMaxEntries; smaller in tests
	sem        *semaphore.Weighted
	ctx        context.Context // cancelled by stop
	cancel     context.CancelFunc

	// Mutable state
	mu       sync.Mutex
	misses   map[string]int  // GUARDED_BY(mu); lookup misses per directory
	inflight map[string]bool // GUARDED_BY(mu)
	stopped  bool            // GUARDED_BY(mu); no listing starts after stop
	// tooLarge: directories with more than prefetchMaxEntries entries,
	// and when that was found.
	tooLarge map[string]time.Time // GUARDED_BY(mu)
	wg       sync.WaitGroup
}

// newPrefetcher lists directories of c in the background after
// afterMisses lookup misses (Config.ListAfterMisses).
func newPrefetcher(c *Cache, afterMisses int) *prefetcher {
	ctx, cancel := context.WithCancel(context.Background())
	p := &prefetcher{
		c:          c,
		enabled:    c.ttl != 0, // nothing to keep the listing in otherwise
		afterMiss:  prefetchAfterMisses,
		maxEntries: prefetchMaxEntries,
		sem:        semaphore.NewWeighted(prefetchParallel),
		ctx:        ctx,
		cancel:     cancel,
		misses:     make(map[string]int),
		inflight:   make(map[string]bool),
		tooLarge:   make(map[string]time.Time),
	}
	switch {
	case afterMisses < 0:
		p.afterMiss = 0
	case afterMisses > 0:
		p.afterMiss = afterMisses
	}
	return p
}

// miss records a lookup in dir that the cache could not answer and
// starts a listing of dir once misses pile up.
func (p *prefetcher) miss(dir string) {
	if !p.enabled || p.afterMiss == 0 {
		return
	}
	p.mu.Lock()
	if len(p.misses) >= prefetchTracked {
		clear(p.misses)
	}
	p.misses[dir]++
	start := false
	if p.misses[dir] >= p.afterMiss {
		start, _ = p.startLocked(dir)
	}
	p.mu.Unlock()
	if start {
		go p.list(dir)
	}
}

// ListSoon starts a listing of dir in the background, for a caller that
// will need one (reading ahead across files), unless one is in flight or
// the budget of listings is busy. It reports busy if only that budget
// stopped it: a later call may succeed. Nothing is listed when the TTL is
// 0.
func (c *Cache) ListSoon(dir string) (busy bool) {
	p := c.prefetch
	if !p.enabled {
		return false
	}
	p.mu.Lock()
	start, busy := p.startLocked(dir)
	p.mu.Unlock()
	if start {
		go p.list(dir)
	}
	return busy
}

// startLocked reports whether a listing of dir may start now, and if so
// books it; the caller then runs p.list(dir). busy: it may not only
// because prefetchParallel listings are running. LOCKS_REQUIRED(p.mu)
func (p *prefetcher) startLocked(dir string) (start, busy bool) {
	if at, ok := p.tooLarge[dir]; ok && p.c.now().Sub(at) < prefetchTooLargeFor {
		return false, false
	}
	if p.stopped || p.inflight[dir] {
		return false, false
	}
	if !p.sem.TryAcquire(1) {
		return false, true // dropped, a later call tries again
	}
	p.inflight[dir] = true
	delete(p.misses, dir)
	p.wg.Add(1)
	return true, false
}

// list reads every page of dir; the last page puts the complete listing in
// the cache (NextPage does that for any complete listing).
func (p *prefetcher) list(dir string) {
	defer func() {
		p.sem.Release(1)
		p.mu.Lock()
		delete(p.inflight, dir)
		p.mu.Unlock()
		p.wg.Done()
	}()
	l := &Lister{Path: dir}
	defer p.c.Release(l)
	for !l.Complete && l.Len() <= p.maxEntries {
		if err := p.c.NextPage(p.ctx, l); err != nil {
			p.c.log.Debug("directory prefetch failed", "dir", dir, "err", err)
			return
		}
	}
	if !l.Complete {
		p.mu.Lock()
		if len(p.tooLarge) >= prefetchTracked {
			clear(p.tooLarge)
		}
		p.tooLarge[dir] = p.c.now()
		p.mu.Unlock()
	}
}

// stop cancels listings in flight and waits for them.
func (p *prefetcher) stop() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
}
