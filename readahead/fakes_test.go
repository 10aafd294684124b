package readahead

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"ferry/bucket"
	"ferry/filecache"
	"ferry/ranges"
)

// pattern is the source of every fake object's bytes: byte off of an
// object with seed s is pattern[(off+s) % len(pattern)]. Its length is
// deliberately not a power of two, so a read from the wrong offset (by a
// block, a part, or a power of two) never matches.
var pattern = func() []byte {
	r := rand.New(rand.NewPCG(1, 2))
	p := make([]byte, 1<<20+4099)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}()

// fill writes the content of [off, off+len(p)) of an object with seed.
func fill(p []byte, seed, off int64) {
	for len(p) > 0 {
		i := (off + seed) % int64(len(pattern))
		n := copy(p, pattern[i:])
		p = p[n:]
		off += int64(n)
	}
}

func want(seed, off, n int64) []byte {
	p := make([]byte, n)
	fill(p, seed, off)
	return p
}

type fakeObject struct {
	size    int64
	version int
	seed    int64
}

// fakeBucket is an in-memory store whose content is computed from the
// offset, so tests can read gigabytes without holding them. It logs every
// ranged read and lets tests block or fail requests.
type fakeBucket struct {
	// hook, if set, runs at the start of every NewRangeReader; a non-nil
	// error fails the request. It may block (honouring ctx).
	hook func(ctx context.Context, req *bucket.ReadRequest) error

	// pace, if set, runs before a reader returns n bytes (bandwidth
	// emulation). It may block, honouring ctx.
	pace func(ctx context.Context, n int) error

	// hold, if set, is asked before a reader returns bytes at off of
	// name: it returns where (an absolute offset past off) the bytes may
	// flow to before it is asked again, or an error that fails the read
	// there. It may block, honouring ctx.
	hold func(ctx context.Context, name string, off int64) (int64, error)

	inflight, maxInflight atomic.Int64

	mu      sync.Mutex
	objects map[string]*fakeObject // GUARDED_BY(mu)
	log     []bucket.ReadRequest   // GUARDED_BY(mu)
}

var _ bucket.Bucket = (*fakeBucket)(nil)

func newFakeBucket() *fakeBucket { return &fakeBucket{objects: map[string]*fakeObject{}} }

// put creates or replaces (new version) an object.
func (b *fakeBucket) put(name string, size int64) bucket.Object {
	b.mu.Lock()
	defer b.mu.Unlock()
	o := b.objects[name]
	if o == nil {
		o = &fakeObject{seed: int64(len(b.objects)) * 7919}
		b.objects[name] = o
	}
	o.size = size
	o.version++
	o.seed += 104729
	return b.objLocked(name, o)
}

func (b *fakeBucket) objLocked(name string, o *fakeObject) bucket.Object {
	return bucket.Object{Name: name, Size: uint64(o.size), Version: fmt.Sprint(o.version)}
}

func (b *fakeBucket) seed(name string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.objects[name].seed
}

func (b *fakeBucket) requests() []bucket.ReadRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]bucket.ReadRequest(nil), b.log...)
}

// ranges returns the logged ranges of name, sorted by start.
func (b *fakeBucket) ranges(name string) []bucket.ByteRange {
	var rs []bucket.ByteRange
	for _, r := range b.requests() {
		if r.Name == name {
			rs = append(rs, r.Range)
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Start < rs[j].Start })
	return rs
}

func (b *fakeBucket) Name() string { return "fake://test" }

func (b *fakeBucket) Stat(ctx context.Context, req *bucket.StatRequest) (*bucket.Object, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o := b.objects[req.Name]
	if o == nil {
		return nil, fmt.Errorf("fake: %q: %w", req.Name, bucket.ErrNotFound)
	}
	obj := b.objLocked(req.Name, o)
	return &obj, nil
}

func (b *fakeBucket) List(ctx context.Context, req *bucket.ListRequest) (*bucket.Listing, error) {
	return nil, fmt.Errorf("fake: list: %w", bucket.ErrInvalid)
}

func (b *fakeBucket) NewRangeReader(ctx context.Context, req *bucket.ReadRequest) (io.ReadCloser, error) {
	n := b.inflight.Add(1)
	for {
		m := b.maxInflight.Load()
		if n <= m || b.maxInflight.CompareAndSwap(m, n) {
			break
		}
	}
	b.mu.Lock()
	b.log = append(b.log, *req)
	o := b.objects[req.Name]
	var size, seed int64
	var version string
	if o != nil {
		size, seed, version = o.size, o.seed, fmt.Sprint(o.version)
	}
	hook := b.hook
	b.mu.Unlock()
	fail := func(err error) (io.ReadCloser, error) {
		b.inflight.Add(-1)
		return nil, bucket.ContextError(ctx, err)
	}
	if hook != nil {
		if err := hook(ctx, req); err != nil {
			return fail(err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if o == nil {
		return fail(fmt.Errorf("fake: %q: %w", req.Name, bucket.ErrNotFound))
	}
	if req.Version != "" && req.Version != version {
		return fail(fmt.Errorf("fake: %q version %s, want %s: %w", req.Name, version, req.Version, bucket.ErrPrecondition))
	}
	r := req.Range.Clip(uint64(size))
	return &fakeReader{b: b, ctx: ctx, name: req.Name, seed: seed, off: int64(r.Start), end: int64(r.Limit), pace: b.pace, hold: b.hold}, nil
}

type fakeReader struct {
	b        *fakeBucket
	ctx      context.Context
	name     string
	seed     int64
	off, end int64
	closed   bool
	pace     func(ctx context.Context, n int) error
	hold     func(ctx context.Context, name string, off int64) (int64, error)
}

func (r *fakeReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, bucket.ContextError(r.ctx, err)
	}
	if r.off >= r.end {
		return 0, io.EOF
	}
	n := min(int64(len(p)), r.end-r.off, 256<<10)
	if r.hold != nil {
		to, err := r.hold(r.ctx, r.name, r.off)
		if err != nil {
			return 0, err
		}
		n = min(n, to-r.off)
	}
	if r.pace != nil {
		if err := r.pace(r.ctx, int(n)); err != nil {
			return 0, bucket.ContextError(r.ctx, err)
		}
	}
	fill(p[:n], r.seed, r.off)
	r.off += n
	return int(n), nil
}

func (r *fakeReader) Close() error {
	if !r.closed {
		r.closed = true
		r.b.inflight.Add(-1)
	}
	return nil
}

// memCache is an in-memory BlockCache that counts how often each block was
// written, so tests can check that every byte goes into the cache once.
type memCache struct {
	bs      int64
	reads   atomic.Int64 // ReadBlock calls
	advised atomic.Int64 // blocks announced through WillRead

	mu     sync.Mutex
	blocks map[memCacheKey][]byte // GUARDED_BY(mu)
	writes map[memCacheKey]int    // GUARDED_BY(mu)
	// refuse, if set, makes WriteBlocks store nothing (a full disk).
	refuse bool // GUARDED_BY(mu)
	// consumed counts Consumed calls per object name.
	consumed map[string]int // GUARDED_BY(mu)
}

var _ BlockCache = (*memCache)(nil)

func (c *memCache) WillRead(obj filecache.Key, first, n int64) { c.advised.Add(n) }

// Spliceable: a memory cache has no file to splice from.
func (c *memCache) Spliceable(filecache.Key, int64, int64) (*os.File, func(), bool) {
	return nil, nil, false
}

func (c *memCache) CachedBytes(obj filecache.Key) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for i := int64(0); i*c.bs < int64(obj.Size); i++ {
		if _, ok := c.blocks[cacheKey(obj, i)]; ok {
			n += c.blockLen(obj, i)
		}
	}
	return n
}

// Whole: a memory cache has no file to hand out.
func (c *memCache) Whole(filecache.Key) (*filecache.WholeFile, bool) { return nil, false }

func (c *memCache) Unready(filecache.Key, int64) []ranges.ByteRange { return nil }

func (c *memCache) Consumed(obj filecache.Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.consumed[obj.Name]++
}

// consumedOf is how often the cache was told a reader had bytes of name.
func (c *memCache) consumedOf(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.consumed[name]
}

func newMemCache(bs int64) *memCache {
	return &memCache{bs: bs, blocks: map[memCacheKey][]byte{}, writes: map[memCacheKey]int{}, consumed: map[string]int{}}
}

type memCacheKey struct {
	name, version string
	idx           int64
}

func cacheKey(obj filecache.Key, idx int64) memCacheKey {
	return memCacheKey{obj.Name, obj.Version, idx}
}

func (c *memCache) blockLen(obj filecache.Key, idx int64) int64 {
	return min(c.bs, int64(obj.Size)-idx*c.bs)
}

func (c *memCache) BlockSize() int64 { return c.bs }

func (c *memCache) ReadBlocks(obj filecache.Key, first int64, p []byte, ok []bool) int {
	c.reads.Add(int64(len(ok)))
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(ok)
	n := 0
	for i := range ok {
		b, present := c.blocks[cacheKey(obj, first+int64(i))]
		off := int64(i) * c.bs
		if !present || off+int64(len(b)) > int64(len(p)) || i < len(ok)-1 && int64(len(b)) != c.bs {
			continue
		}
		copy(p[off:], b)
		ok[i] = true
		n++
	}
	return n
}

func (c *memCache) WriteBlocksCRC(obj filecache.Key, first int64, p []byte, crcs []uint32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refuse {
		return 0
	}
	n := 0
	for i := first; len(p) > 0; i++ {
		l := c.blockLen(obj, i)
		if int64(len(p)) < l {
			panic(fmt.Sprintf("WriteBlocks: block %d short: %d < %d", i, len(p), l))
		}
		if j := i - first; j < int64(len(crcs)) && crcs[j] != crc32.Checksum(p[:l], castagnoli) {
			panic(fmt.Sprintf("WriteBlocks: block %d: CRC %08x given, %08x computed", i, crcs[j], crc32.Checksum(p[:l], castagnoli)))
		}
		k := cacheKey(obj, i)
		c.blocks[k] = append([]byte(nil), p[:l]...)
		c.writes[k]++
		p = p[l:]
		n++
	}
	return n
}

func (c *memCache) HasBlock(obj filecache.Key, idx int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.blocks[cacheKey(obj, idx)]
	return ok
}

// maxWrites is the largest number of times any block was written.
func (c *memCache) maxWrites() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := 0
	for _, n := range c.writes {
		m = max(m, n)
	}
	return m
}

// sleepCtx is latency that honours cancellation.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
