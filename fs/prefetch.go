package fs

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

type dirPrefetcher struct {
	// Dependencies
	fs *fileSystem

	// Constant data
	enabled    bool
	maxEntries int // prefetchMaxEntries; smaller in tests
	sem        *semaphore.Weighted
	ctx        context.Context // cancelled when the file system is destroyed
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

func newDirPrefetcher(fs *fileSystem) *dirPrefetcher {
	ctx, cancel := context.WithCancel(context.Background())
	return &dirPrefetcher{
		fs:         fs,
		enabled:    fs.ttl != 0, // nothing to keep the listing in otherwise
		maxEntries: prefetchMaxEntries,
		sem:        semaphore.NewWeighted(prefetchParallel),
		ctx:        ctx,
		cancel:     cancel,
		misses:     make(map[string]int),
		inflight:   make(map[string]bool),
		tooLarge:   make(map[string]time.Time),
	}
}

// miss records a lookup in dir that the metadata cache could not answer
// and starts a listing of dir once misses pile up.
func (p *dirPrefetcher) miss(dir string) {
	if !p.enabled {
		return
	}
	p.mu.Lock()
	if len(p.misses) >= prefetchTracked {
		clear(p.misses)
	}
	p.misses[dir]++
	start := false
	if p.misses[dir] >= prefetchAfterMisses {
		start, _ = p.startLocked(dir)
	}
	p.mu.Unlock()
	if start {
		go p.list(dir)
	}
}

// want starts a listing of dir now, for a caller that needs one (reading
// ahead across files), unless one is in flight or the budget is busy. It
// reports busy if only the budget stopped it: a later call may succeed.
func (p *dirPrefetcher) want(dir string) (busy bool) {
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
func (p *dirPrefetcher) startLocked(dir string) (start, busy bool) {
	if at, ok := p.tooLarge[dir]; ok && p.fs.now().Sub(at) < prefetchTooLargeFor {
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
// the metadata cache (fetchPage does that for any complete listing).
func (p *dirPrefetcher) list(dir string) {
	defer func() {
		p.sem.Release(1)
		p.mu.Lock()
		delete(p.inflight, dir)
		p.mu.Unlock()
		p.wg.Done()
	}()
	h := &dirHandle{path: dir, index: make(map[string]int)}
	h.mu.Lock()
	defer h.mu.Unlock()
	for !h.complete && len(h.entries) <= p.maxEntries {
		if err := p.fs.fetchPage(p.ctx, h); err != nil {
			p.fs.log.Debug("directory prefetch failed", "dir", dir, "err", err)
			return
		}
	}
	if !h.complete {
		p.mu.Lock()
		if len(p.tooLarge) >= prefetchTracked {
			clear(p.tooLarge)
		}
		p.tooLarge[dir] = p.fs.now()
		p.mu.Unlock()
	}
}

// stop cancels listings in flight and waits for them.
func (p *dirPrefetcher) stop() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
}
