package readahead

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"ferry/bucket"
	"ferry/filecache"
)

// Handle reads one object version. ReadAt may be called concurrently.
type Handle struct {
	// Dependencies
	f *Fetcher

	// Constant data
	obj      bucket.Object
	key      objKey
	cacheKey filecache.Key // obj, for the block cache
	// medium: at most mediumObjectSize; fetched whole (like a small
	// object) if the handle's first read starts at offset 0.
	medium bool
	// whole: fetch the rest of the object with the first read: set at Open
	// for small objects, by the first read for medium ones.
	whole  atomic.Bool
	ctx    context.Context // parent of the streams' contexts
	cancel context.CancelFunc
	wg     sync.WaitGroup // this handle's fetches (Add under Fetcher.mu while !released)

	closed atomic.Bool // set under mu
	// unread: opened ahead (Fetcher.OpenAhead) and not read yet. Its
	// kept parts are reclaimable by any readahead, as parts the cache
	// also holds are: its reader may never come, and until it does they
	// must not starve streams that are being read. Cleared by the first
	// read.
	unread atomic.Bool
	// released: Close is waiting for wg; fetches started from now on (by
	// reads racing with Close) are not waited for.
	released bool // GUARDED_BY(Fetcher.mu)

	mu   sync.Mutex
	det  detector // GUARDED_BY(mu)
	read bool     // GUARDED_BY(mu); the handle has seen a read
	// reads, randomReads and randomBytes count the reads the detector saw
	// and those that were part of no sequential stream (ReadRandomly).
	reads, randomReads, randomBytes int64 // GUARDED_BY(mu)
	// atEnd, if set, runs once, in its own goroutine, when a sequential
	// stream's readahead has reached the end of the object and is
	// draining (see NotifyAtEnd); atEndDone says it has.
	atEnd     func() // GUARDED_BY(mu)
	atEndDone bool   // GUARDED_BY(mu)
}

// Unread reports whether h was opened ahead (Fetcher.OpenAhead), started
// fetching something then, and has not been read since.
func (h *Handle) Unread() bool { return h.unread.Load() }

// NotifyAtEnd sets fn to run once, in its own goroutine, when readahead of
// a sequential stream of h has been issued up to the end of the object and
// what it has in flight has dropped to a quarter of its window: from then
// on the link drains, and a caller that knows which object comes next may
// start it (Fetcher.OpenAhead). Not sooner: if the reader stops after this
// object, whatever was started for the next one is lost, and while the
// stream's own parts still fill the link it would only slow them. Random
// reads never call it.
func (h *Handle) NotifyAtEnd(fn func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.atEnd = fn
}

// ReadAt reads len(p) bytes at off with io.ReaderAt semantics: fewer bytes
// only at the end of the object, with io.EOF. Errors from the bucket are
// wrapped and stay errors.Is-able (bucket.ErrPrecondition for a changed
// object). It does not retain p.
func (h *Handle) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("readahead: %w: negative offset %d", ErrInvalid, off)
	}
	if h.closed.Load() {
		return 0, ErrClosed
	}
	size := int64(h.obj.Size)
	if off >= size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	end := min(off+int64(len(p)), size)
	seq, err := h.observe(off, end-off)
	if err != nil {
		return 0, err
	}
	// A sequential reader's cache file is read ahead by the kernel
	// already; advice would only cut that readahead into small pieces.
	if err := h.f.read(ctx, h, p[:end-off], off, end, !seq); err != nil {
		return 0, err
	}
	n := int(end - off)
	h.f.stats.bytesRead.Add(int64(n))
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// randomMinReads and randomMinSize: ReadRandomly wants this many reads,
// of this mean size at least.
const (
	randomMinReads = 4
	randomMinSize  = 64 << 10
)

// ReadRandomly reports whether h's reads so far were random: at least
// three quarters part of no sequential stream, and those of randomMinSize
// on average. known is false if h has seen fewer than randomMinReads
// reads, too few to tell (a header read, a probe).
func (h *Handle) ReadRandomly() (random, known bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reads < randomMinReads {
		return false, false
	}
	return 4*h.randomReads >= 3*h.reads && h.randomBytes >= randomMinSize*h.randomReads, true
}

// Spliceable is ReadAt for a caller that can send bytes from a file
// without reading them (fs splices them to the kernel): if the cache
// hands out [off, off+len) clipped to the object (filecache.Store.
// Spliceable: blocks read and checked earlier), it returns that file,
// where the bytes are at the same offsets, and how many bytes to send;
// release unpins the file, once it has been sent from. The read counts as
// ReadAt's would (readahead, statistics). ok is false, and nothing
// counted, if the cache cannot: the caller then calls ReadAt.
func (h *Handle) Spliceable(off int64, size int) (f *os.File, n int, release func(), ok bool) {
	if h.f.cache == nil || off < 0 || size <= 0 || off >= int64(h.obj.Size) || h.closed.Load() {
		return nil, 0, nil, false
	}
	end := min(off+int64(size), int64(h.obj.Size))
	f, release, ok = h.f.cache.Spliceable(h.cacheKey, off, end-off)
	if !ok {
		return nil, 0, nil, false
	}
	if _, err := h.observe(off, end-off); err != nil {
		release()
		return nil, 0, nil, false
	}
	h.f.stats.bytesRead.Add(end - off)
	h.f.stats.cacheHitBytes.Add(end - off)
	return f, int(end - off), release, true
}

// Close cancels the handle's readahead, waits for its fetches (a demand
// fetch may outlive its read: the padding of its last block, and the
// cache write) and frees the memory it holds. Reads after Close fail
// with ErrClosed.
func (h *Handle) Close() {
	h.mu.Lock()
	if h.closed.Load() {
		h.mu.Unlock()
		return
	}
	h.closed.Store(true)
	h.det.streams = nil
	h.mu.Unlock()
	h.f.mu.Lock()
	h.released = true
	h.f.mu.Unlock()
	h.cancel()
	h.wg.Wait()
	h.f.mu.Lock()
	h.f.dropKeptLocked(h, nil, int64(h.obj.Size)+1)
	h.f.mu.Unlock()
}

// observe feeds the detector and issues readahead for a sequential stream.
// It reports whether the read belongs to a sequential stream (or to an
// object fetched whole).
func (h *Handle) observe(off, n int64) (sequential bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed.Load() {
		return false, ErrClosed
	}
	if !h.read {
		h.read = true
		if h.unread.Swap(false) {
			// Opened ahead: other readahead may have reclaimed parts of
			// its first window meanwhile (or a second handle opened ahead
			// of the object cancelled them). The frontier must not stay
			// past those holes, or the reader fetches them one read at a
			// time; issue skips what is still there.
			for _, s := range h.det.streams {
				s.frontier = min(s.frontier, alignUp(off, h.f.bs))
			}
		}
		// A file read from its start is usually read whole: for an object
		// of a few MiB one request beats a ramping readahead window.
		if h.medium && off == 0 {
			h.whole.Store(true)
		}
	}
	h.reads++
	if h.whole.Load() {
		return true, nil
	}
	s, advanced, evicted := h.det.observe(off, n)
	if !s.sequential() {
		h.randomReads++
		h.randomBytes += n
	}
	if evicted != nil {
		// Seeking away: the oldest stream's readahead is cancelled and its
		// memory returned.
		evicted.cancel()
		h.f.mu.Lock()
		h.f.dropKeptLocked(h, evicted, int64(h.obj.Size)+1)
		h.f.mu.Unlock()
	}
	if advanced && s.sequential() {
		h.prefetch(s, n)
	}
	return s.sequential(), nil
}

// prefetch grows s's window and issues parts up to next+window; n is the
// length of the read that triggered it.
// LOCKS_REQUIRED(h.mu)
func (h *Handle) prefetch(s *stream, n int64) {
	f := h.f
	cfg := &f.cfg
	size := int64(h.obj.Size)
	if s.frontier == 0 {
		// A window smaller than a few of the reader's own reads would
		// leave it waiting on every read.
		s.window = max(s.window, 4*alignUp(n, f.bs))
		s.window = min(s.window, cfg.MaxWindow)
		s.growAt = s.next + s.window/4
		if s.fromStart {
			s.window = max(s.window, min(cfg.StartWindow, alignDown(size/4, f.bs)))
			// A file read from its start grows at its first part's
			// worth of progress: with graded parts (below) the reader
			// gets its first bytes long before the window has arrived,
			// and waiting for a quarter of it left the link idle
			// between the first window and the second.
			s.growAt = s.next + s.window/partsPerWindow
		}
	}
	// The window grows once readahead has started and the reader has
	// consumed a quarter of it since the last growth (a part's worth, the
	// first time, from offset 0). Only a step of the reader (n > 0) grows
	// it: a read that jumped into the prefetched range moved next without
	// being one, and a completing part must not turn that into growth.
	if n > 0 && s.frontier > 0 && s.next >= s.growAt && s.window < cfg.MaxWindow {
		s.window = min(2*s.window, cfg.MaxWindow)
		s.growAt = s.next + s.window/4
		if f.windowHist != nil {
			f.windowHist.Observe(float64(s.window))
		}
	}
	// Parts the reader has left behind (beyond reordering) are not wanted.
	f.mu.Lock()
	f.dropKeptLocked(h, s, s.next-cfg.ReorderTolerance)
	f.mu.Unlock()

	s.frontier = max(s.frontier, min(alignUp(s.next, f.bs), size))
	// Without a cache, the window is memory: everything between the
	// reader and the frontier is held. With a cache, the window bounds
	// only the bytes in flight and readahead may run up to two windows
	// ahead, as far as the budget holds (completed parts wait in memory
	// for their reader; the cache has them too, should memory be needed
	// for a reader): the link stays busy while the reader works through
	// what has arrived, instead of all parts being issued, and completing,
	// in one convoy.
	// A stream opened ahead (Fetcher.OpenAhead) whose reader has not come
	// yet (next is 0) reaches one window, no more: the reader may never
	// come, and what it fetched is then wasted.
	reach := s.window
	if f.cache != nil && s.next > 0 {
		reach = 2 * s.window
	}
	target := min(alignUp(s.next+reach, f.bs), size)
	// A window is cut into partsPerWindow parts, so even a young stream
	// has many requests in flight: one connection alone is far below link
	// speed. Slivers are not issued: we wait until a whole part fits.
	partSize := max(f.bs, alignDown(min(cfg.PartSize, s.window/partsPerWindow), f.bs))
	for s.frontier < target {
		boundary := alignDown(s.frontier, partSize) + partSize
		// Graded parts. Parts issued together share the link equally and
		// so arrive together: the reader waits for the first while the
		// rest arrive, consumes them all at once, and they are issued
		// again all at once, the link idle for a round trip each time.
		// So a stream's k-th part (of its first partsPerWindow) is about
		// k/partsPerWindow of a part: the first window arrives head first
		// and the rest one after another, each completion making room for
		// one more part while the others keep the link busy, and the
		// stream stays staggered from then on. A graded cut that would
		// leave less than itself before the part boundary takes the rest.
		if s.issued < partsPerWindow {
			graded := max(f.bs, alignDown(int64(s.issued+1)*partSize/partsPerWindow, f.bs))
			if s.frontier+2*graded <= boundary {
				boundary = s.frontier + graded
			}
		}
		end := min(boundary, target)
		if end < boundary && end < size {
			break
		}
		if f.cache != nil && s.inflight+(end-s.frontier) > s.window {
			break
		}
		if !h.issue(s, s.frontier, end) {
			f.stats.specDropped.Add(1)
			s.window = max(cfg.InitialWindow, s.window/2)
			s.growAt = s.next + s.window/4
			return
		}
		s.frontier = end
	}
	if s.frontier >= size && s.inflight <= s.window/4 && h.atEnd != nil && !h.atEndDone {
		// See NotifyAtEnd. (Measured with the bench's seq-1, which stops
		// after 4 of 8 files: notified at the frontier alone, 48-55 MiB of
		// the 5th file was fetched for nobody in every run; after the
		// drain, 0-47 MiB, none in half the runs.)
		h.atEndDone = true
		go h.atEnd()
	}
}

// issue starts readahead of the blocks of [from, to) that are neither
// cached nor already fetched. It reports false (nothing issued) when the
// budget has no room: readahead is dropped, never queued.
// LOCKS_REQUIRED(h.mu)
func (h *Handle) issue(s *stream, from, to int64) bool {
	f := h.f
	b0, b1 := from/f.bs, (to+f.bs-1)/f.bs
	missing := make([]bool, b1-b0)
	for i := range missing {
		missing[i] = f.cache == nil || !f.cache.HasBlock(h.cacheKey, b0+int64(i))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return true
	}
	for i := range missing {
		if missing[i] && f.table[blockKey{h.key, b0 + int64(i)}] != nil {
			missing[i] = false
		}
	}
	runs := runsOf(b0, missing)
	if len(runs) == 0 {
		return true
	}
	var cost int64
	for _, r := range runs {
		cost += f.pool.class(r.bytes(f.bs, h.obj.Size))
	}
	// Memory held for readers is not taken, only what costs little to
	// lose (see victimLocked).
	for !f.budget.TryAcquire(cost) {
		if !f.reclaimSpareLocked(h.unread.Load()) {
			return false
		}
	}
	if h.unread.Load() {
		for _, r := range runs {
			f.stats.aheadBytes.Add(r.bytes(f.bs, h.obj.Size))
		}
	}
	for _, r := range runs {
		p := f.newPart(h, r, true, true)
		p.stream = s
		p.ctx, p.cancel = context.WithCancel(s.ctx)
		s.inflight += p.end - p.start
		s.issued++
		f.launch(p)
	}
	return true
}

// readaheadDone is called when readahead part p of this handle has
// completed (or failed): the stream may issue more at once, without
// waiting for the reader's next read.
func (h *Handle) readaheadDone(p *part) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := p.stream
	s.inflight -= p.end - p.start
	if h.closed.Load() || s.ctx.Err() != nil || h.f.cache == nil || p.err != nil {
		return
	}
	h.prefetch(s, 0)
}

// runsOf returns the runs [first, limit) of consecutive true entries of
// set, whose index 0 is block b0.
func runsOf(b0 int64, set []bool) []blockRun {
	var runs []blockRun
	for i := 0; i < len(set); {
		if !set[i] {
			i++
			continue
		}
		j := i
		for j < len(set) && set[j] {
			j++
		}
		runs = append(runs, blockRun{b0 + int64(i), b0 + int64(j)})
		i = j
	}
	return runs
}
