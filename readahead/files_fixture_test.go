package readahead

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/bucket/mem"
	"ferry/metadata"
	"ferry/ranges"
)

// The fixture of the Files tests plays package fs's part: a mem bucket
// and a metadata cache over it answer the Directories, a fake Content
// hands out endReaders, and the helpers open, read and release handles
// as fs's OpenFile, ReadFile and ReleaseFileHandle do.

// endReader is a Reader that reads the bucket directly and says when its
// readahead reaches the end only when the test says so (end).
type endReader struct {
	b      *mem.Bucket
	obj    bucket.Object
	ahead  bool
	mu     sync.Mutex
	atEnd  func()
	closed bool // GUARDED_BY(mu)
	read   bool // GUARDED_BY(mu)
}

var _ Reader = (*endReader)(nil)

// ReadAt is one pinned ranged read straight from the bucket.
func (r *endReader) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	r.mu.Lock()
	r.read = true
	r.mu.Unlock()
	if off >= int64(r.obj.Size) {
		return 0, io.EOF
	}
	rc, err := r.b.NewRangeReader(ctx, &bucket.ReadRequest{
		Name: r.obj.Name, Version: r.obj.Version,
		Range: bucket.ByteRange{Start: uint64(off), Limit: uint64(off) + uint64(len(p))},
	})
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	n, err := io.ReadFull(rc, p)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	return n, err
}

// Spliceable: there is no disk cache to splice from.
func (r *endReader) Spliceable(int64, int) (*os.File, int, func(), bool) { return nil, 0, nil, false }

func (r *endReader) ReadRandomly() (random, known bool) { return false, false }

// Unread is Handle's: opened ahead and not read since.
func (r *endReader) Unread() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ahead && !r.read
}

func (r *endReader) NotifyAtEnd(fn func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.atEnd = fn
}

// end runs what NotifyAtEnd set, as a stream draining at the end does.
func (r *endReader) end() {
	r.mu.Lock()
	fn := r.atEnd
	r.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// markRead makes the reader not Unread, as a read would, without reading.
func (r *endReader) markRead() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.read = true
}

func (r *endReader) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
}

func (r *endReader) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// fakeContent is the fixture's Content: endReaders, with a hook for
// OpenAhead and a settable answer for Cached.
type fakeContent struct {
	x *aheadFixture
}

var _ Content = fakeContent{}

func (c fakeContent) Open(obj bucket.Object) Reader { return &endReader{b: c.x.b, obj: obj} }

func (c fakeContent) OpenAhead(obj bucket.Object) Reader {
	c.x.mu.Lock()
	hook := c.x.openAheadHook
	c.x.mu.Unlock()
	return hook(obj)
}

func (c fakeContent) Cached(obj bucket.Object) bool {
	c.x.mu.Lock()
	cached := c.x.cached
	c.x.mu.Unlock()
	return cached != nil && cached(obj)
}

func (fakeContent) CachedBytes(bucket.Object) (int64, bool)         { return 0, false }
func (fakeContent) Whole(bucket.Object) (WholeFile, bool)           { return nil, false }
func (fakeContent) Unready(bucket.Object, int64) []ranges.ByteRange { return nil }

// fixtureDirs is the fixture's Directories: the metadata cache's
// listings, with knobs to hold Listing or make ListSoon busy, and
// ReadBefore from what the fixture's handles read.
type fixtureDirs struct {
	x *aheadFixture
	// hold, if not nil, gets a value from every Listing, which then
	// waits for release to be closed (blockListing). GUARDED_BY(x.mu)
	hold, release chan struct{}
	// busy makes ListSoon answer that the budget of listings is taken,
	// listing nothing; listSoons counts the ListSoon calls passed on to
	// the metadata cache.
	busy      atomic.Bool
	listSoons atomic.Int64
}

var _ Directories = (*fixtureDirs)(nil)

func (d *fixtureDirs) Listing(dir string) (*metadata.Listing, bool) {
	d.x.mu.Lock()
	hold, release := d.hold, d.release
	d.x.mu.Unlock()
	if hold != nil {
		select {
		case hold <- struct{}{}:
		default: // nobody counts the calls any more
		}
		<-release
	}
	return d.x.meta.Listing(dir)
}

func (d *fixtureDirs) ListSoon(dir string) bool {
	if d.busy.Load() {
		return true
	}
	d.listSoons.Add(1)
	return d.x.meta.ListSoon(dir)
}

func (d *fixtureDirs) ReadBefore(path string, obj bucket.Object) bool {
	d.x.mu.Lock()
	defer d.x.mu.Unlock()
	return d.x.readBefore[readKey{path, obj.Version}]
}

// readKey is a file read through the fixture in one version (what fs
// keeps on the inode of that version).
type readKey struct{ path, version string }

// fileHandle is one handle the fixture opened: fs's fileHandle.
type fileHandle struct {
	path string
	obj  bucket.Object
	r    Reader // fl.Open's
	read atomic.Bool
}

type aheadFixture struct {
	t    *testing.T
	b    *mem.Bucket
	meta *metadata.Cache
	dirs *fixtureDirs
	fl   *Files

	// mu is a leaf: Files calls ReadBefore with its own lock held.
	mu sync.Mutex
	// openAheadHook is what Content.OpenAhead does (newAhead unless a
	// test swaps it); cached answers Content.Cached.
	openAheadHook func(obj bucket.Object) Reader // GUARDED_BY(mu)
	cached        func(obj bucket.Object) bool   // GUARDED_BY(mu)
	aheads        []*endReader                   // GUARDED_BY(mu); every reader opened ahead
	readBefore    map[readKey]bool               // GUARDED_BY(mu)
}

// newAheadFixture has 8 MiB files of names (paths from the root) and
// d/small in a mem bucket, and reads ahead across files; nothing is
// listed yet, and lookup misses list nothing.
func newAheadFixture(t *testing.T, names ...string) *aheadFixture {
	return newAheadFixtureWith(t, nil, names...)
}

// newAheadFixtureWith is newAheadFixture; cfg, if not nil, changes the
// metadata cache's Config.
func newAheadFixtureWith(t *testing.T, cfg func(c *metadata.Config), names ...string) *aheadFixture {
	x := &aheadFixture{t: t, b: mem.New("bucket"), readBefore: make(map[readKey]bool)}
	big := make([]byte, aheadMinSize)
	for _, n := range names {
		x.put(n, big)
	}
	x.put("d/small", []byte("small files are fetched whole"))
	c := metadata.Config{Bucket: x.b, TTL: time.Minute, NegativeTTL: time.Minute, ListAfterMisses: -1}
	if cfg != nil {
		cfg(&c)
	}
	meta, err := metadata.New(c)
	require.NoError(t, err)
	t.Cleanup(meta.Close)
	x.meta = meta
	x.dirs = &fixtureDirs{x: x}
	x.openAheadHook = x.newAhead
	x.fl = NewFiles(fakeContent{x}, x.dirs, true)
	t.Cleanup(x.fl.Close)
	return x
}

// newAhead is the fixture's OpenAhead: an endReader, recorded in aheads.
func (x *aheadFixture) newAhead(obj bucket.Object) Reader {
	r := &endReader{b: x.b, obj: obj, ahead: true}
	x.mu.Lock()
	x.aheads = append(x.aheads, r)
	x.mu.Unlock()
	return r
}

// put stores data under name and returns the new object version.
func (x *aheadFixture) put(name string, data []byte) bucket.Object {
	o, err := x.b.Put(context.Background(), &bucket.PutRequest{Name: name, Data: data})
	require.NoError(x.t, err)
	return *o
}

func (x *aheadFixture) list() { x.listPath("d") }

// listPath lists the directory at path (from the root) to its end, as a
// reader of the directory does: the listing is cached then.
func (x *aheadFixture) listPath(path string) {
	x.t.Helper()
	l := x.meta.NewLister(path)
	for !l.Complete {
		require.NoError(x.t, x.meta.NextPage(context.Background(), l))
	}
}

// open opens d/name and returns its reader.
func (x *aheadFixture) open(name string) *endReader {
	x.t.Helper()
	r, _ := x.openH(name)
	return r
}

// openH opens d/name and returns its reader and handle.
func (x *aheadFixture) openH(name string) (*endReader, *fileHandle) {
	x.t.Helper()
	return x.openPath("d/" + name)
}

// openPath opens the file at path (from the root), in the version the
// metadata cache resolves it to, and returns its reader and handle.
func (x *aheadFixture) openPath(path string) (*endReader, *fileHandle) {
	x.t.Helper()
	e, err := x.meta.Resolve(context.Background(), path)
	require.NoError(x.t, err)
	require.Equal(x.t, metadata.File, e.Kind, path)
	h := &fileHandle{path: path, obj: e.Obj, r: x.fl.Open(path, e.Obj)}
	return h.r.(*file).Reader.(*endReader), h
}

// read reads 4 KiB of h at off, as fs's ReadFile does: the first read
// of a handle marks its file read before (ReadBefore).
func (x *aheadFixture) read(h *fileHandle, off int64) {
	x.t.Helper()
	if !h.read.Swap(true) {
		x.mu.Lock()
		x.readBefore[readKey{h.path, h.obj.Version}] = true
		x.mu.Unlock()
	}
	_, err := h.r.ReadAt(context.Background(), make([]byte, 4096), off)
	if err != nil && !errors.Is(err, io.EOF) {
		x.t.Error(err) // t.Error: also called from other goroutines
	}
}

// release ends h, as fs's ReleaseFileHandle does.
func (x *aheadFixture) release(h *fileHandle) { h.r.Close() }

// forgetFiles forgets that any file was read, as the kernel forgetting
// the file inodes does (their pages go with them).
func (x *aheadFixture) forgetFiles() {
	x.mu.Lock()
	defer x.mu.Unlock()
	clear(x.readBefore)
}

func (x *aheadFixture) pending() int {
	x.fl.mu.Lock()
	defer x.fl.mu.Unlock()
	return len(x.fl.pending)
}

// setOpenAhead makes Content.OpenAhead call fn.
func (x *aheadFixture) setOpenAhead(fn func(obj bucket.Object) Reader) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.openAheadHook = fn
}

// setCached makes Content.Cached answer fn.
func (x *aheadFixture) setCached(fn func(obj bucket.Object) bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.cached = fn
}

// blockOpenAhead makes the next opens ahead wait in OpenAhead until the
// returned release is closed; entered gets one value per call.
func (x *aheadFixture) blockOpenAhead() (entered chan struct{}, release chan struct{}) {
	x.mu.Lock()
	inner := x.openAheadHook
	x.mu.Unlock()
	entered, release = make(chan struct{}, 64), make(chan struct{})
	x.setOpenAhead(func(obj bucket.Object) Reader {
		entered <- struct{}{}
		<-release
		return inner(obj)
	})
	return entered, release
}

// blockListing makes every Listing wait until the returned release is
// closed; entered gets one value per call.
func (x *aheadFixture) blockListing() (entered chan struct{}, release chan struct{}) {
	x.mu.Lock()
	defer x.mu.Unlock()
	entered, release = make(chan struct{}, 64), make(chan struct{})
	x.dirs.hold, x.dirs.release = entered, release
	return entered, release
}

// openedAhead names the files opened ahead so far, in order.
func (x *aheadFixture) openedAhead() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	var names []string
	for _, r := range x.aheads {
		names = append(names, r.obj.Name)
	}
	return names
}

// ahead returns the i-th reader opened ahead.
func (x *aheadFixture) ahead(i int) *endReader {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.aheads[i]
}

// fakeClock is a clock for the metadata cache that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time // GUARDED_BY(mu)
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newSmallFixture is an aheadFixture whose directory d holds n small
// files d/f000, d/f001, ... of size bytes (and d/small), listed.
func newSmallFixture(t *testing.T, n, size int) *aheadFixture {
	return newSmallFixtureWith(t, n, size, nil, nil)
}

// newSmallFixtureWith is newSmallFixture; cfg, if not nil, changes the
// metadata cache's Config, and put, if not nil, changes the bucket before
// the listing.
func newSmallFixtureWith(t *testing.T, n, size int, cfg func(c *metadata.Config), put func(x *aheadFixture)) *aheadFixture {
	x := newAheadFixtureWith(t, cfg)
	data := make([]byte, size)
	for i := range n {
		x.put(smallName(i), data)
	}
	if put != nil {
		put(x)
	}
	x.list()
	return x
}

// newMixedFixture is an aheadFixture with dirs directories d/l0, d/l1,
// ... of 3 large files each, and 40 small files d/f000, ... in d, listed.
func newMixedFixture(t *testing.T, dirs int) *aheadFixture {
	var large []string
	for d := range dirs {
		for f := range 3 {
			large = append(large, fmt.Sprintf("d/l%d/%d", d, f))
		}
	}
	x := newAheadFixture(t, large...)
	for i := range 40 {
		x.put(smallName(i), []byte("small"))
	}
	x.list()
	return x
}

func smallName(i int) string { return fmt.Sprintf("d/f%03d", i) }

func smallNames(from, to int) []string {
	var names []string
	for i := from; i < to; i++ {
		names = append(names, smallName(i))
	}
	return names
}

// openSmall opens d/f<i>, reads its head (as the kernel does when it
// lacks the pages) and releases it.
func (x *aheadFixture) openSmall(i int) *endReader {
	x.t.Helper()
	return x.readPath(smallName(i), true)
}

// readPath opens path, reads its head if read (else the kernel had the
// pages, or the open was a probe) and releases it.
func (x *aheadFixture) readPath(path string, read bool) *endReader {
	x.t.Helper()
	r, h := x.openPath(path)
	if read {
		x.read(h, 0)
	}
	x.release(h)
	return r
}

// smallWaiting counts the small files waiting for readers.
func (x *aheadFixture) smallWaiting() int {
	x.fl.mu.Lock()
	defer x.fl.mu.Unlock()
	n := 0
	for _, p := range x.fl.pending {
		if p.small {
			n++
		}
	}
	return n
}
