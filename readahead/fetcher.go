// Package readahead decides what to fetch from the bucket and when: a
// per-handle detector tells sequential from random reads; a sequential
// stream gets a growing window split into parts fetched in parallel, one
// ranged GET each, pinned to the object version; a random read fetches just
// the missing blocks; a small object comes whole in one request. Fetched
// bytes go to the reader and, once, into the block cache.
//
// Every buffer it allocates is accounted, before allocation, against ONE
// memory budget. Demand reads always make progress (they wait for memory);
// speculative readahead only takes what is free and is dropped, never
// queued or spilled, when it is not. It must never exceed that budget,
// never download a byte twice that it still holds, and never return bytes
// of another object version than the one its handle was opened on.
package readahead

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ferry/bucket"
	"ferry/filecache"
	"ferry/ranges"
)

// BlockCache is the local disk cache of fixed-size blocks of object
// versions (filecache.Store). Implementations are safe for concurrent use
// and best effort: a block may disappear at any time, but ReadBlocks never
// fills p with wrong bytes.
type BlockCache interface {
	// BlockSize is the size of every block but an object's last.
	BlockSize() int64
	// ReadBlocks fills p, consecutive whole blocks starting at block
	// first (the last may be the object's short final block), in one disk
	// read; ok[i] (len(ok) blocks) reports whether block first+i was
	// present and intact. It returns how many were.
	ReadBlocks(obj filecache.Key, first int64, p []byte, ok []bool) int
	// WriteBlocksCRC stores p, consecutive whole blocks starting at block
	// first (the last may be the object's short final block), and returns
	// how many it stored. crcs[i], if present, is the CRC32C (Castagnoli)
	// of block first+i, computed by the caller.
	WriteBlocksCRC(obj filecache.Key, first int64, p []byte, crcs []uint32) int
	// HasBlock reports whether block idx of obj is present.
	HasBlock(obj filecache.Key, idx int64) bool
	// WillRead starts the disk reads of blocks [first, first+n) of obj
	// before they are read one by one: a 512 KiB record is 9 blocks of
	// 64 KiB, and reading them in turn from a cold page cache waits for
	// 9 disk reads in a row.
	WillRead(obj filecache.Key, first, n int64)
	// Spliceable hands out the data file holding bytes [off, off+n) of
	// obj at the same offsets, if every block they touch was read and
	// checked earlier and the file is unchanged since; release unpins
	// it once it has been sent from.
	Spliceable(obj filecache.Key, off, n int64) (f *os.File, release func(), ok bool)
	// CachedBytes says how many bytes of obj are present, reading
	// nothing.
	CachedBytes(obj filecache.Key) int64
	// Whole hands out the data file of obj if every block is present.
	Whole(obj filecache.Key) (*filecache.WholeFile, bool)
	// Consumed tells the cache that a reader has had bytes of obj that
	// the cache stored, from a copy outside it (a fetch's buffer, or
	// readahead kept in memory): its entry is read, not fetched ahead
	// for nobody.
	Consumed(obj filecache.Key)
	// Unready returns the byte ranges of obj that stand between it and
	// a Whole file that checks good, if they come to at most limit bytes.
	Unready(obj filecache.Key, limit int64) []ranges.ByteRange
}

// The disk cache is a BlockCache.
var _ BlockCache = (*filecache.Store)(nil)

// ErrClosed is returned by reads on a closed Handle or Fetcher.
var ErrClosed = errors.New("readahead: closed")

// ErrInvalid is returned for a Config that cannot work (New) and a read
// at a negative offset.
var ErrInvalid = errors.New("invalid argument")

// ErrChecksum is returned for an object whose bytes arrived twice in a
// row with another CRC32C than the store gives for it.
var ErrChecksum = errors.New("checksum mismatch")

// maxAttempts bounds how often one demand chunk goes round when the fetches
// it waited for (someone else's) failed or were cancelled.
const maxAttempts = 16

// objKey names the bytes a part holds. Size is part of it (as in
// filecache): one version has one size, and a store that gives no
// versions (Version "") must never let an object of one length be served
// from a part of another. Without a version nothing tells two contents
// apart, so such handles do not share parts at all: unpinned says which
// handle the part belongs to.
type objKey struct {
	name, version string
	size          uint64
	unpinned      uint64
}

// blockRun is the blocks [first, limit) of one object: what one part
// fetches.
type blockRun struct{ first, limit int64 }

// bytes is the run's length in bytes, in an object of size bytes cut into
// blocks of bs.
func (r blockRun) bytes(bs int64, size uint64) int64 {
	return min(r.limit*bs, int64(size)) - r.first*bs
}

type blockKey struct {
	obj objKey
	idx int64
}

// cacheKeyOf is obj's version as the block cache names it.
func cacheKeyOf(obj bucket.Object) filecache.Key {
	return filecache.Key{Name: obj.Name, Version: obj.Version, Size: obj.Size}
}

// part is one ranged GET of whole blocks [first, limit) = bytes [start, end)
// and, once done, its buffer. Demand reads, readahead and concurrent
// readers of the same blocks all find it through Fetcher.table, so each
// block is fetched once.
type part struct {
	// Constant data
	key          objKey
	obj          *bucket.Object
	first, limit int64
	start, end   int64
	spec         bool
	// keep: stay in memory after success if the cache didn't take the bytes
	// (readahead, and small objects fetched whole), until read or evicted.
	keep bool
	// fromCache: a block read from the cache for a read that wanted only
	// part of it, kept for the reads of the rest.
	fromCache bool
	// stored: readahead whose bytes the cache also took. It stays in
	// memory for its reader (a copy instead of a pread and a CRC check per
	// block), but anyone short of memory may drop it: the cache has it.
	stored bool // GUARDED_BY(Fetcher.mu)
	// inCache: the cache took all of the part's bytes; read: a reader
	// copied some of them; told: the cache was told so (Consumed), once
	// both are true.
	inCache, read, told bool // GUARDED_BY(Fetcher.mu)
	owner               *Handle
	stream              *stream // readahead only
	ctx                 context.Context
	cancel              context.CancelFunc
	done                chan struct{} // closed once buf or err is set
	urgent              atomic.Bool   // a demand read waits for this readahead
	// need and early: a demand fetch whose reader wants only [start,
	// need) of it (the rest pads the reader's range out to whole blocks)
	// closes early as soon as those bytes have arrived, with head set to
	// them, so the reader need not wait for the padding. The fetch goes
	// on for the cache. early is nil for other parts.
	need  int64
	early chan struct{}
	head  []byte // buf[:n] for some n >= need-start; set before early is closed

	// Mutable state
	cost  int64  // accounted bytes still held; GUARDED_BY(Fetcher.mu)
	buf   []byte // set (before done) on success; nil once freed; GUARDED_BY(Fetcher.mu)
	err   error  // set before done on failure
	refs  int    // GUARDED_BY(Fetcher.mu)
	owned bool   // the table (or the in-flight fetch) holds a ref; GUARDED_BY(Fetcher.mu)
	// INVARIANT: inTable => every table[key, first..limit) == this part
	inTable bool          // GUARDED_BY(Fetcher.mu)
	elem    *list.Element // in Fetcher.resident while kept; GUARDED_BY(Fetcher.mu)
	// consumed counts bytes read per block while kept in memory; left is
	// how many blocks are not yet fully read.
	consumed []int64 // GUARDED_BY(Fetcher.mu)
	left     int     // GUARDED_BY(Fetcher.mu)
}

// Fetcher fetches object ranges for many handles under one memory budget
// and one connection budget.
//
// Lock order: Handle.mu, then Fetcher.mu, then budget.mu / connLimiter.mu /
// mappedBuffers.mu (a leaf: under it only munmap and Config.OffHeap run).
// budget.Acquire may call reclaimOne (Fetcher.mu), so it is never called
// with Fetcher.mu held.
type Fetcher struct {
	// Dependencies
	bucket bucket.Bucket
	cache  BlockCache
	log    *slog.Logger

	// Constant data
	cfg    Config
	bs     int64
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	budget *budget
	conns  *connLimiter
	pool   bufPool
	stats  counters
	// windowHist is nil without a Registerer.
	windowHist prometheus.Histogram
	collectors []prometheus.Collector
	reg        prometheus.Registerer
	wg         sync.WaitGroup // every fetch goroutine
	// afterPublish, if set (tests), runs between publishing a part's
	// bytes and writing them to the cache.
	afterPublish func(*part)
	// idleAfter is idleStream (tests lengthen it).
	idleAfter time.Duration

	unpinned atomic.Uint64 // numbers handles of unversioned objects (objKey)

	mu    sync.Mutex
	table map[blockKey]*part // GUARDED_BY(mu)
	// resident holds completed parts kept in memory, least recently used
	// first; demand reads reclaim from the front.
	resident *list.List // GUARDED_BY(mu)
	closed   bool       // GUARDED_BY(mu)
}

// New returns a Fetcher. See Config for what is required.
func New(cfg Config) (*Fetcher, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	f := &Fetcher{
		bucket:    cfg.Bucket,
		cache:     cfg.Cache,
		log:       cfg.Logger,
		cfg:       cfg,
		bs:        cfg.BlockSize,
		budget:    newBudget(cfg.MemoryLimit),
		conns:     newConnLimiter(cfg.MaxConnections),
		pool:      bufPool{blockSize: cfg.BlockSize},
		idleAfter: idleStream,
		table:     make(map[blockKey]*part),
		resident:  list.New(),
	}
	f.pool.room = func() int64 {
		used, _ := f.budget.snapshot()
		return f.budget.limit - used
	}
	if !raceDetector {
		f.pool.mapped = newMappedBuffers(cfg.MemoryLimit)
		if f.pool.mapped != nil {
			f.pool.mapped.onChange = cfg.OffHeap
		}
	}
	f.budget.reclaim = f.reclaimOne
	f.ctx, f.cancel = context.WithCancel(context.Background())
	if err := f.register(cfg.Registerer); err != nil {
		f.cancel()
		return nil, err
	}
	return f, nil
}

// Cached reports whether the block cache holds every block of obj: opening
// it ahead would fetch nothing.
func (f *Fetcher) Cached(obj bucket.Object) bool {
	if f.cache == nil {
		return false
	}
	k := cacheKeyOf(obj)
	for i, n := int64(0), (int64(obj.Size)+f.bs-1)/f.bs; i < n; i++ {
		if !f.cache.HasBlock(k, i) {
			return false
		}
	}
	return true
}

// CachedBytes says how many bytes of obj the block cache holds; ok is
// false without one.
func (f *Fetcher) CachedBytes(obj bucket.Object) (n int64, ok bool) {
	if f.cache == nil {
		return 0, false
	}
	return f.cache.CachedBytes(cacheKeyOf(obj)), true
}

// Whole returns the block cache's file of obj if it holds obj whole.
func (f *Fetcher) Whole(obj bucket.Object) (WholeFile, bool) {
	if f.cache == nil {
		return nil, false
	}
	w, ok := f.cache.Whole(cacheKeyOf(obj))
	if !ok {
		return nil, false
	}
	return w, true
}

// Unready returns what stands between obj and a Whole file that checks
// good, if it comes to at most limit bytes (see Content).
func (f *Fetcher) Unready(obj bucket.Object, limit int64) []ranges.ByteRange {
	if f.cache == nil {
		return nil
	}
	return f.cache.Unready(cacheKeyOf(obj), limit)
}

// Open returns a handle reading obj, pinned to obj.Version.
func (f *Fetcher) Open(obj bucket.Object) Reader { return f.open(obj) }

func (f *Fetcher) open(obj bucket.Object) *Handle {
	h := &Handle{f: f, obj: obj, key: objKey{name: obj.Name, version: obj.Version, size: obj.Size}, cacheKey: cacheKeyOf(obj)}
	if obj.Version == "" {
		h.key.unpinned = f.unpinned.Add(1)
	}
	h.ctx, h.cancel = context.WithCancel(f.ctx)
	h.whole.Store(f.cfg.SmallObjectSize > 0 && int64(obj.Size) <= f.cfg.SmallObjectSize)
	h.medium = f.cfg.SmallObjectSize > 0 && int64(obj.Size) <= min(mediumObjectSize, f.cfg.PartSize)
	h.det = detector{
		reorder: f.cfg.ReorderTolerance,
		gap:     f.cfg.GapTolerance,
		max:     f.cfg.MaxStreams,
		initial: f.cfg.InitialWindow,
		parent:  h.ctx,
	}
	return h
}

// OpenAhead opens a handle of obj, like Open, and starts its readahead
// as a sequential read from offset 0 would, before anything is read: for
// an object expected to be read next, whose first round trip and first
// window then overlap the end of the one being read now. Like all
// readahead it takes only free memory. Reads through this handle, or
// through any other of the same version, use what it fetched; Close
// cancels what is still in flight and frees it. An object under
// aheadWholeSize is fetched whole, in parts of at most PartSize (one for
// small and medium objects), of the blocks neither cached nor in memory.
// If it fetches nothing (all cached, or no memory free), the handle is
// not Unread.
func (f *Fetcher) OpenAhead(obj bucket.Object) Reader { return f.openAhead(obj) }

func (f *Fetcher) openAhead(obj bucket.Object) *Handle {
	h := f.open(obj)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unread.Store(true)
	s, _, _ := h.det.observe(0, 0)
	if size := int64(obj.Size); size < aheadWholeSize {
		for off := int64(0); off < size; off += f.cfg.PartSize {
			if !h.issue(s, off, min(off+f.cfg.PartSize, size)) {
				f.stats.specDropped.Add(1)
				break
			}
		}
		// No window follows: the frontier is the end, and the stream
		// never notifies (NotifyAtEnd is for streams read in windows).
		s.frontier = size
		h.atEndDone = true
	} else {
		h.prefetch(s, 0)
	}
	if s.issued == 0 {
		// Everything cached or in memory already, or no memory free:
		// nothing was fetched ahead (see Unread).
		h.unread.Store(false)
	}
	return h
}

// Close cancels all fetches, waits for them and frees all memory. Reads
// after Close fail with ErrClosed.
func (f *Fetcher) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	f.mu.Unlock()
	f.cancel()
	f.wg.Wait()
	f.mu.Lock()
	for e := f.resident.Front(); e != nil; {
		next := e.Next()
		f.dropLocked(e.Value.(*part))
		e = next
	}
	f.mu.Unlock()
	f.pool.close()
	if f.reg != nil {
		for _, c := range f.collectors {
			f.reg.Unregister(c)
		}
	}
}

// newPart builds a part for blocks r of h's object.
// LOCKS_REQUIRED(f.mu)
func (f *Fetcher) newPart(h *Handle, r blockRun, spec, keep bool) *part {
	first, limit := r.first, r.limit
	p := &part{
		key:   h.key,
		obj:   &h.obj,
		first: first,
		limit: limit,
		start: first * f.bs,
		end:   min(limit*f.bs, int64(h.obj.Size)),
		spec:  spec,
		keep:  keep,
		owner: h,
		done:  make(chan struct{}),
		refs:  1,
		owned: true,
	}
	p.cost = f.pool.class(p.end - p.start)
	for i := first; i < limit; i++ {
		f.table[blockKey{p.key, i}] = p
	}
	p.inTable = true
	return p
}

// launch starts p's fetch. LOCKS_REQUIRED(f.mu), so that Close's Wait
// never races with the Add (nor Handle.Close's with the handle's Add).
func (f *Fetcher) launch(p *part) {
	f.wg.Add(1)
	track := !p.owner.released
	if track {
		p.owner.wg.Add(1)
	}
	go func() {
		defer f.wg.Done()
		if track {
			defer p.owner.wg.Done()
		}
		f.fetch(p)
		if p.spec {
			p.owner.readaheadDone(p)
		}
	}()
}

func (f *Fetcher) fetch(p *part) {
	defer p.cancel()
	buf, crcs, err := f.downloadChecked(p)
	if err != nil {
		f.fail(p, buf, err)
		return
	}
	// Readers waiting for these bytes get them now, not after the disk
	// write; the part stays in the table (and holds a reference for the
	// write) until the cache has them, so nobody looks there too early.
	f.publish(p, buf)
	if f.afterPublish != nil {
		f.afterPublish(p)
	}
	stored := false
	if f.cache != nil {
		// The owner's key: every handle sharing p reads p.obj's version.
		n := f.cache.WriteBlocksCRC(p.owner.cacheKey, p.first, buf, crcs)
		stored = int64(n) >= p.limit-p.first
	}
	if f.settle(p, stored) {
		f.cache.Consumed(p.owner.cacheKey)
	}
}

// download reads p's range into a pooled buffer. The buffer is allocated
// only once the store has answered (the bytes were accounted when p was
// funded), so requests waiting for their first byte hold no memory. With
// a cache, it returns each block's CRC32C, computed as the block arrives
// (still in the CPU cache; over a whole part afterwards the checksum
// costs another pass through memory).
func (f *Fetcher) download(p *part) ([]byte, []uint32, error) {
	f.stats.requests.Add(1)
	if p.spec {
		f.stats.specRequests.Add(1)
	} else {
		f.stats.demandRequests.Add(1)
	}
	rng := bucket.ByteRange{Start: uint64(p.start), Limit: uint64(p.end)}
	rc, err := f.bucket.NewRangeReader(p.ctx, &bucket.ReadRequest{Name: p.obj.Name, Version: p.obj.Version, Range: rng})
	if err != nil {
		return nil, nil, fmt.Errorf("readahead: read %q %v: %w", p.obj.Name, rng, bucket.ContextError(p.ctx, err))
	}
	buf := f.pool.get(p.end - p.start)
	var crcs []uint32
	if f.cache != nil {
		crcs = make([]uint32, 0, p.limit-p.first)
	}
	need := -1 // where a read stops to close p.early
	if p.early != nil {
		need = int(p.need - p.start)
	}
	n, crc := 0, uint32(0)
	for n < len(buf) && err == nil {
		blockEnd := min(alignDown(int64(n), f.bs)+f.bs, int64(len(buf)))
		stop := int(blockEnd)
		if need > n && need < stop {
			stop = need
		}
		var m int
		m, err = io.ReadFull(rc, buf[n:stop])
		if err != nil {
			n += m
			break
		}
		if crcs != nil {
			crc = crc32.Update(crc, castagnoli, buf[n:stop])
			if stop == int(blockEnd) {
				crcs = append(crcs, crc)
				crc = 0
			}
		}
		n = stop
		if need >= 0 && n >= need {
			p.head = buf[:n]
			close(p.early)
			need = -1
		}
	}
	f.stats.bytesFetched.Add(int64(n))
	_ = rc.Close() // every byte we asked for has arrived (or err says why not)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("%w: body ended after %d of %d bytes: %w", bucket.ErrUnavailable, n, len(buf), io.ErrUnexpectedEOF)
		}
		return buf, nil, fmt.Errorf("readahead: read %q %v: %w", p.obj.Name, rng, bucket.ContextError(p.ctx, err))
	}
	return buf, crcs, nil
}

// castagnoli is the CRC32C table of the cache's block checksums.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fail publishes p's failed fetch.
func (f *Fetcher) fail(p *part, buf []byte, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p.err = err
	if p.head != nil {
		// Its reader may still be copying from the head it was given: the
		// buffer goes (and its memory with it) with the last reference.
		p.buf = buf
	} else {
		f.pool.put(buf)
		f.budget.Release(p.cost)
		p.cost = 0
	}
	if p.spec {
		f.stats.specFailed.Add(1)
		f.log.Debug("readahead failed", "object", p.obj.Name, "start", p.start, "end", p.end, "err", err)
	}
	f.dropLocked(p)
	close(p.done)
}

// publish hands p's bytes to its readers. The fetch keeps a reference
// until settle.
func (f *Fetcher) publish(p *part, buf []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p.buf = buf
	p.refs++
	if p.keep {
		// Count what readers take from now on: a part read to the end
		// before settle leaves memory there.
		p.consumed = make([]int64, p.limit-p.first)
		p.left = len(p.consumed)
	}
	close(p.done)
}

// settle decides, once the cache has taken p's bytes (stored) or not,
// whether p stays in memory, and drops the fetch's reference. It reports
// whether the caller must tell the cache that a reader had p's bytes: a
// demand fetch's reader has them, readahead's once read (consumeLocked).
func (f *Fetcher) settle(p *part, stored bool) (tell bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.unrefLocked(p)
	p.inCache = stored
	tell = f.readLocked(p, !p.spec)
	// A demand fetch's context ends with its read (jacobsa/fuse cancels an
	// op's context once answered); the bytes are still good. Readahead
	// cancelled by a seek away is not kept.
	alive := !p.owner.closed.Load() && !f.closed && p.inTable && (!p.spec || p.ctx.Err() == nil)
	if p.keep && alive && (!stored || p.spec) && p.left > 0 {
		p.stored = stored
		p.elem = f.resident.PushBack(p)
		// A demand read waiting for memory may reclaim this now.
		f.budget.Notify()
		return tell
	}
	// In the cache (or only wanted by its readers): leave the table so
	// later reads go to the cache; memory goes when the readers are done.
	f.dropLocked(p)
	return tell
}

// dropLocked removes p from the table and the resident list and drops the
// table's reference. LOCKS_REQUIRED(f.mu)
func (f *Fetcher) dropLocked(p *part) {
	if p.inTable {
		for i := p.first; i < p.limit; i++ {
			k := blockKey{p.key, i}
			if f.table[k] == p {
				delete(f.table, k)
			}
		}
		p.inTable = false
	}
	if p.elem != nil {
		f.resident.Remove(p.elem)
		p.elem = nil
	}
	if p.owned {
		p.owned = false
		f.unrefLocked(p)
	}
}

// LOCKS_REQUIRED(f.mu)
func (f *Fetcher) unrefLocked(p *part) {
	p.refs--
	if p.refs < 0 {
		panic("readahead: part reference count below zero")
	}
	if p.refs == 0 && p.buf != nil {
		f.pool.put(p.buf)
		p.buf = nil
		f.budget.Release(p.cost)
		p.cost = 0
	}
	if p.refs == 1 && p.elem != nil {
		// Only the keep reference is left: the part is reclaimable now,
		// and a demand read waiting for memory (which skipped it while a
		// reader held it) must look again, or it sleeps on.
		f.budget.Notify()
	}
}

// reclaimOne drops a kept part nobody is reading, for a demand read
// waiting for memory (see victimLocked).
func (f *Fetcher) reclaimOne() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.victimLocked(true, false); p != nil {
		f.stats.evicted.Add(1)
		f.dropLocked(p)
		return true
	}
	return false
}

// reclaimSpareLocked drops a kept part that costs little to lose, for
// readahead (see victimLocked); ahead is readahead of a handle opened
// ahead and not read yet, which takes nothing from another such handle.
// LOCKS_REQUIRED(f.mu)
func (f *Fetcher) reclaimSpareLocked(ahead bool) bool {
	if p := f.victimLocked(false, ahead); p != nil {
		f.dropLocked(p)
		return true
	}
	return false
}

// idleStream: a stream not read for this long has lost its reader (it
// paused, or went elsewhere); its parts that the cache also holds are
// among the first to go.
const idleStream = time.Second

// victimLocked picks the kept part to drop for memory, or nil. Only parts
// nobody is reading (the keep reference alone) qualify.
//
// Readahead takes, least recently used first, only what costs little or
// is likely unwanted: blocks kept from the cache, parts of handles opened
// ahead and not read yet, and parts the cache also holds that belong to
// no stream or to an idle one. It does not take the parts of streams
// being read: their readers come to them soon, and would then read them
// back from the disk instead of memory, while the link gains nothing
// (the budget is full of bytes not read yet; readahead waits for the
// readers to make room). Taking the least recently used part, the next in
// line for its reader, sent 40% of a 4-stream cold read through the disk
// (docs/notes/2026-11-30-cold-four-streams-dear-memory.md).
//
// Readahead of a handle opened ahead and not read yet (ahead) takes
// nothing from another such handle: files opened ahead of their readers
// would otherwise push one another out of the budget, each fetched for
// nobody, where they should only take what is free.
//
// A demand read takes any: the same first, then the part the cache also
// holds that its reader comes to last (the furthest ahead of its stream's
// cursor), else the least recently used.
// LOCKS_REQUIRED(f.mu)
func (f *Fetcher) victimLocked(demand, ahead bool) *part {
	now := time.Now().UnixNano()
	var lru, far *part
	var farAhead int64
	for e := f.resident.Front(); e != nil; e = e.Next() {
		p := e.Value.(*part)
		if p.refs != 1 {
			continue
		}
		if lru == nil {
			lru = p
		}
		unread := p.owner.unread.Load()
		if unread && ahead {
			continue
		}
		if p.fromCache || unread {
			return p
		}
		if !p.stored {
			continue
		}
		if p.stream == nil || now-p.stream.lastRead.Load() >= int64(f.idleAfter) {
			return p
		}
		if d := p.start - p.stream.cursor.Load(); far == nil || d > farAhead {
			far, farAhead = p, d
		}
	}
	if !demand {
		return nil
	}
	if far != nil {
		return far
	}
	return lru
}

// dropKeptLocked drops kept parts of h ending at or before `before`: all
// of them if s is nil, else those of stream s and blocks kept from the
// cache. LOCKS_REQUIRED(f.mu)
func (f *Fetcher) dropKeptLocked(h *Handle, s *stream, before int64) {
	for e := f.resident.Front(); e != nil; {
		next := e.Next()
		p := e.Value.(*part)
		if p.owner == h && (s == nil || p.stream == s || p.fromCache) && p.end <= before {
			f.dropLocked(p)
		}
		e = next
	}
}

// checkInvariants panics if the table or the resident list is
// inconsistent. Tests call it while work is in flight.
func (f *Fetcher) checkInvariants() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, p := range f.table {
		if !p.inTable || !p.owned || k.obj != p.key || k.idx < p.first || k.idx >= p.limit {
			panic(fmt.Sprintf("readahead: table entry %v -> part [%d, %d) inTable=%v owned=%v", k, p.first, p.limit, p.inTable, p.owned))
		}
		if p.refs < 1 {
			panic(fmt.Sprintf("readahead: part [%d, %d) in table with %d refs", p.first, p.limit, p.refs))
		}
	}
	for e := f.resident.Front(); e != nil; e = e.Next() {
		p := e.Value.(*part)
		if p.elem != e || p.buf == nil || !p.inTable || p.left <= 0 {
			panic(fmt.Sprintf("readahead: resident part [%d, %d) elem ok=%v buf=%v inTable=%v left=%d",
				p.first, p.limit, p.elem == e, p.buf != nil, p.inTable, p.left))
		}
	}
}
