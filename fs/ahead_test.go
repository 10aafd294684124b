package fs

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jacobsa/fuse/fuseops"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
)

// endReader is a ContentReader that says when its readahead reaches the
// end only when the test says so.
type endReader struct {
	ContentReader
	obj    bucket.Object
	ahead  bool
	mu     sync.Mutex
	atEnd  func()
	closed bool
	read   bool
}

func (r *endReader) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	r.mu.Lock()
	r.read = true
	r.mu.Unlock()
	return r.ContentReader.ReadAt(ctx, p, off)
}

// Unread is readahead.Handle's: opened ahead and not read since.
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

func (r *endReader) end() {
	r.mu.Lock()
	fn := r.atEnd
	r.mu.Unlock()
	if fn != nil {
		fn()
	}
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

type aheadFixture struct {
	t      *testing.T
	b      *testBucket
	fs     *fileSystem
	dir    fuseops.InodeID
	mu     sync.Mutex
	aheads []*endReader
}

func newAheadFixture(t *testing.T, names ...string) *aheadFixture {
	x := &aheadFixture{t: t, b: newTestBucket()}
	big := make([]byte, aheadMinSize)
	for _, n := range names {
		x.b.put(n, big)
	}
	x.b.put("d/small", []byte("small files are fetched whole"))
	x.fs = newTestFS(t, x.b, nil, func(c *Config) {
		c.Open = func(obj bucket.Object) ContentReader {
			return &endReader{ContentReader: &rangeReader{b: x.b, obj: obj}, obj: obj}
		}
		c.OpenAhead = func(obj bucket.Object) ContentReader {
			r := &endReader{ContentReader: &rangeReader{b: x.b, obj: obj}, obj: obj, ahead: true}
			x.mu.Lock()
			x.aheads = append(x.aheads, r)
			x.mu.Unlock()
			return r
		}
	})
	t.Cleanup(x.fs.ahead.stop)
	d, err := lookUp(x.fs, fuseops.RootInodeID, "d")
	require.NoError(t, err)
	x.dir = d.Child
	return x
}

func (x *aheadFixture) list() { readDir(x.t, x.fs, x.dir, 1<<16, false) }

// listPath lists the directory at path (from the root).
func (x *aheadFixture) listPath(path string) {
	e, err := walk(x.t, x.fs, path)
	require.NoError(x.t, err)
	readDir(x.t, x.fs, e.Child, 1<<16, false)
}

// open opens d/name and returns its reader.
func (x *aheadFixture) open(name string) *endReader {
	x.t.Helper()
	r, _ := x.openH(name)
	return r
}

// openH opens d/name and returns its reader and handle.
func (x *aheadFixture) openH(name string) (*endReader, fuseops.HandleID) {
	x.t.Helper()
	return x.openPath("d/" + name)
}

// openPath opens the file at path (from the root) and returns its reader
// and handle.
func (x *aheadFixture) openPath(path string) (*endReader, fuseops.HandleID) {
	x.t.Helper()
	e, err := walk(x.t, x.fs, path)
	require.NoError(x.t, err)
	op := &fuseops.OpenFileOp{Inode: e.Child}
	require.NoError(x.t, x.fs.OpenFile(context.Background(), op))
	x.fs.mu.Lock()
	r := x.fs.files[op.Handle].reader.(*endReader)
	x.fs.mu.Unlock()
	return r, op.Handle
}

func (x *aheadFixture) release(h fuseops.HandleID) {
	require.NoError(x.t, x.fs.ReleaseFileHandle(context.Background(), &fuseops.ReleaseFileHandleOp{Handle: h}))
}

func (x *aheadFixture) pending() int {
	x.fs.ahead.mu.Lock()
	defer x.fs.ahead.mu.Unlock()
	return len(x.fs.ahead.pending)
}

// blockOpenAhead makes the next opens ahead wait in openAhead until the
// returned release is closed; entered gets one value per call.
func (x *aheadFixture) blockOpenAhead() (entered chan struct{}, release chan struct{}) {
	inner := x.fs.ahead.openAhead
	entered, release = make(chan struct{}, 64), make(chan struct{})
	x.fs.ahead.openAhead = func(obj bucket.Object) ContentReader {
		entered <- struct{}{}
		<-release
		return inner(obj)
	}
	return entered, release
}

func (x *aheadFixture) openedAhead() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	var names []string
	for _, r := range x.aheads {
		names = append(names, r.obj.Name)
	}
	return names
}

func TestReadAheadAcrossFiles(t *testing.T) {
	x := newAheadFixture(t, "d/0", "d/1", "d/2", "d/3", "d/4", "d/5", "d/sub/x")
	x.list()

	r0 := x.open("0")
	r0.end()
	require.Equal(t, []string{"d/1"}, x.openedAhead(), "the listing's first file, opened first: 1 is opened ahead")
	r0.end()
	assert.Len(t, x.openedAhead(), 1, "once")
	r1 := x.open("1")
	assert.True(t, r1.ahead, "the open takes over the reader opened ahead")
	assert.False(t, r1.isClosed())
	r1.end()
	require.Equal(t, []string{"d/1", "d/2"}, x.openedAhead(), "the first two files, opened first: 2 is opened ahead")

	r2 := x.open("2")
	assert.True(t, r2.ahead)
	r2.end()
	assert.Equal(t, []string{"d/1", "d/2", "d/3"}, x.openedAhead(), "0, 1, 2: 3 is opened ahead")
	r3 := x.open("3")
	assert.True(t, r3.ahead)
	r3.end()
	assert.Equal(t, []string{"d/1", "d/2", "d/3", "d/4"}, x.openedAhead(), "and so on")
	assert.Equal(t, uint64(4), x.fs.ahead.started.Load())
	assert.Equal(t, uint64(3), x.fs.ahead.taken.Load())

	// Out of order: 1 after 3 (4 was opened ahead, not taken yet).
	r1 = x.open("1")
	assert.False(t, r1.ahead)
	r1.end()
	assert.Len(t, x.openedAhead(), 4, "3 then 1 are not neighbours")
	x.open("2").end()
	assert.Len(t, x.openedAhead(), 4, "3, 1, 2: one step is not enough")
	x.open("0").end()
	assert.Len(t, x.openedAhead(), 4, "the first file counts alone only if it was the first opened")

	// A reader of 3 whose readahead ends after another file was opened:
	// the directory's last open is not 3 any more.
	r3 = x.open("3")
	x.open("small")
	r3.end()
	assert.Len(t, x.openedAhead(), 4)
}

// Reading a file twice in a row (a probe, then the read) is one step.
func TestReadAheadAcrossFilesTwoOpensPerFile(t *testing.T) {
	x := newAheadFixture(t, "d/0", "d/1", "d/2", "d/3")
	x.list()
	x.open("0")
	x.open("0").end()
	assert.Equal(t, []string{"d/1"}, x.openedAhead())
	x.open("1")
	x.open("1").end()
	assert.Equal(t, []string{"d/1", "d/2"}, x.openedAhead())
}

// The first files opened in a directory but not its first files say
// nothing about order.
func TestReadAheadAcrossFilesFirstOpensInTheMiddle(t *testing.T) {
	x := newAheadFixture(t, "d/0", "d/1", "d/2", "d/3")
	x.list()
	x.open("1")
	x.open("2").end()
	assert.Empty(t, x.openedAhead())
	x.open("0").end()
	assert.Empty(t, x.openedAhead(), "the first file, but not the first opened")
}

func TestReadAheadAcrossFilesNeedsTheListing(t *testing.T) {
	x := newAheadFixture(t, "d/0", "d/1", "d/2", "d/3")
	x.fs.prefetch.enabled = true
	x.open("0").end()
	assert.Empty(t, x.openedAhead(), "without a listing nothing is known to come next")
	require.Eventually(t, func() bool { _, ok := x.fs.cache.listing("d"); return ok }, 5*time.Second, time.Millisecond,
		"a file read to its end lists its directory")
	x.open("1").end()
	assert.Equal(t, []string{"d/2"}, x.openedAhead(), "from the next boundary on")
	x.open("2")
	x.fs.cache.invalidate("d")
	x.open("1").end()
	x.fs.prefetch.stop() // wait for any listing
	_, ok := x.fs.cache.listing("d")
	assert.False(t, ok, "2 then 1: names going down start no listing")
	assert.Len(t, x.openedAhead(), 1)
}

// The first file opened in a directory, read on from its start, lists the
// directory in the background, so that its own end already opens the
// next file: listed at the end, it would come too late for that boundary.
// A probe lists nothing: a read or two at the start, or file(1)'s reads
// at the start and the end.
func TestReadAheadAcrossFilesFirstReadListsTheDirectory(t *testing.T) {
	read := func(x *aheadFixture, h fuseops.HandleID, off int64) {
		op := &fuseops.ReadFileOp{Handle: h, Offset: off, Size: 4096, Dst: make([]byte, 4096)}
		require.NoError(t, x.fs.ReadFile(context.Background(), op))
	}
	listed := func(x *aheadFixture) bool {
		x.fs.prefetch.wg.Wait() // any listing started (not stop: it would cancel it)
		_, ok := x.fs.cache.listing("d")
		return ok
	}
	const size = aheadListAfter + aheadListBand + 1<<20
	band := int64(aheadListAfter + 1<<20) // a read of one going on from the start
	fixture := func() *aheadFixture {
		x := newAheadFixture(t)
		for _, n := range []string{"d/0", "d/1", "d/2"} {
			x.b.put(n, make([]byte, size))
		}
		x.fs.prefetch.enabled = true
		return x
	}

	x := fixture()
	r0, h := x.openH("0")
	read(x, h, 0)
	read(x, h, aheadListAfter-4096)
	assert.False(t, listed(x), "a probe at the start lists nothing")
	read(x, h, band)
	require.Eventually(t, func() bool { _, ok := x.fs.cache.listing("d"); return ok }, 5*time.Second, time.Millisecond,
		"the first file opened, read on from its start, lists its directory")
	r0.end()
	assert.Equal(t, []string{"d/1"}, x.openedAhead(), "at its end the next file is opened ahead")

	x = fixture()
	_, h = x.openH("0")
	read(x, h, 0)
	read(x, h, size-4096)
	assert.False(t, listed(x), "nor does a read at the start and one at the end (file(1))")
	read(x, h, aheadListAfter+aheadListBand)
	assert.False(t, listed(x), "nor one past the band")

	x = fixture()
	_, h = x.openH("0")
	read(x, h, band)
	read(x, h, 0)
	assert.False(t, listed(x), "a read in the band counts only after one at the start")
	read(x, h, band+4096)
	assert.True(t, listed(x), "the next one does")

	for _, c := range []struct {
		openFirst, name string
		first           int64
		msg             string
	}{
		{"", "0", 4096, "a file never read at its start lists nothing"},
		{"2", "1", 0, "nor does the second file opened"},
		{"", "small", 0, "nor does a small file (fetched whole by its first read)"},
	} {
		x = fixture()
		if c.openFirst != "" {
			x.open(c.openFirst)
		}
		_, h = x.openH(c.name)
		read(x, h, c.first)
		read(x, h, band)
		assert.False(t, listed(x), c.msg)
	}

	x = fixture()
	x.list()
	lists := x.b.Stats().Lists
	_, h = x.openH("0")
	read(x, h, 0)
	read(x, h, band)
	x.fs.prefetch.wg.Wait()
	assert.Equal(t, lists, x.b.Stats().Lists, "a directory listed already is not listed again")

	x = fixture()
	require.True(t, x.fs.prefetch.sem.TryAcquire(prefetchParallel), "every listing slot taken")
	_, h = x.openH("0")
	read(x, h, 0)
	read(x, h, band)
	assert.False(t, listed(x), "no slot free: dropped")
	x.fs.prefetch.sem.Release(prefetchParallel)
	read(x, h, band+4096)
	assert.True(t, listed(x), "and tried again at the next read in the band")
}

func TestReadAheadAcrossFilesSkipsSmallFiles(t *testing.T) {
	x := newAheadFixture(t, "d/0", "d/1")
	x.list()
	x.open("0")
	x.open("1").end()
	assert.Empty(t, x.openedAhead(), "the next file (small) is fetched whole by its first read")
}

func TestReadAheadAcrossFilesUnusedIsClosed(t *testing.T) {
	x := newAheadFixture(t, "d/0", "d/1", "d/2")
	x.fs.ahead.wait = 10 * time.Millisecond
	x.list()
	x.open("0")
	x.open("1").end()
	require.Len(t, x.openedAhead(), 1)
	ahead := x.aheads[0]
	require.Eventually(t, ahead.isClosed, 5*time.Second, time.Millisecond, "nobody opened it: closed")
	assert.Equal(t, uint64(1), x.fs.ahead.unused.Load())
	assert.False(t, x.open("2").ahead, "a later open gets a reader of its own")
}

// A rewrite of the same size between the open ahead and the reader's open
// is told apart by its version.
func TestReadAheadAcrossFilesOtherVersion(t *testing.T) {
	x := newAheadFixture(t, "d/0", "d/1", "d/2")
	x.list()
	x.open("0")
	x.open("1").end()
	require.Len(t, x.openedAhead(), 1)
	old := x.aheads[0].obj
	x.b.put("d/2", make([]byte, aheadMinSize))
	x.fs.cache.invalidate("d/2")
	r := x.open("2")
	assert.False(t, r.ahead, "a new version is not served by the old one's reader")
	assert.Equal(t, old.Size, r.obj.Size)
	assert.NotEqual(t, old.Version, r.obj.Version)
	require.Eventually(t, x.aheads[0].isClosed, 5*time.Second, time.Millisecond)
}

// Readers of several directories in turn: when aheadMax files wait, a new
// one is not opened; the waiting ones are taken, none wasted.
func TestReadAheadAcrossFilesManyDirectories(t *testing.T) {
	const dirs, files = 6, 5
	var names []string
	for d := range dirs {
		for f := range files {
			names = append(names, fmt.Sprintf("d/%d/%d", d, f))
		}
	}
	x := newAheadFixture(t, names...)
	for d := range dirs {
		x.listPath(fmt.Sprintf("d/%d", d))
	}
	for f := range files {
		for d := range dirs {
			r, _ := x.openPath(fmt.Sprintf("d/%d/%d", d, f))
			r.end()
			require.LessOrEqual(t, x.pending(), aheadMax)
		}
	}
	started, taken := x.fs.ahead.started.Load(), x.fs.ahead.taken.Load()
	assert.Positive(t, taken)
	assert.LessOrEqual(t, started-taken, uint64(aheadMax), "only the last round's may wait for nobody")
}

// An open ahead that loses the race with the reader's own open of that
// file before it starts (the reader moved on while atEnd looked at the
// listing) is not left waiting for nobody; a reader's open while it runs
// waits for it and takes it.
func TestReadAheadAcrossFilesLosesRaceWithTheOpen(t *testing.T) {
	x := newAheadFixture(t, "d/0", "d/1", "d/2", "d/3")
	x.list()
	x.open("0")
	x.open("1")
	x.fs.cache.mu.Lock() // holds atEnd in its listing lookup
	done := make(chan struct{})
	go func() { x.fs.ahead.atEnd("d/1"); close(done) }()
	x.fs.ahead.open("d/2", bucket.Object{Name: "d/2"}) // the reader's open of 2
	x.fs.cache.mu.Unlock()
	<-done
	assert.Empty(t, x.openedAhead(), "the reader moved on to 2 first")

	// The reader's open of 2 while 2 is being opened ahead waits for that
	// and takes it: opened twice, it would be fetched twice.
	y := newAheadFixture(t, "d/0", "d/1", "d/2", "d/3")
	y.list()
	entered, release := y.blockOpenAhead()
	y.open("0")
	r1 := y.open("1")
	done = make(chan struct{})
	go func() { r1.end(); close(done) }()
	<-entered
	opened := make(chan *endReader)
	go func() { opened <- y.open("2") }()
	select {
	case <-opened:
		t.Fatal("the open did not wait for the open ahead")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-done
	r2 := <-opened
	assert.True(t, r2.ahead, "the reader took the file opened ahead")
	require.Len(t, y.openedAhead(), 1)
	assert.False(t, y.aheads[0].isClosed())
	assert.Zero(t, y.pending())
}

// Two ends of one file at once open the next file ahead once.
func TestReadAheadAcrossFilesOneOpenAtATime(t *testing.T) {
	x := newAheadFixture(t, "d/0", "d/1", "d/2", "d/3")
	x.list()
	entered, release := x.blockOpenAhead()
	x.open("0")
	x.open("1")
	done := make(chan struct{})
	go func() { x.fs.ahead.atEnd("d/1"); close(done) }()
	<-entered
	x.fs.ahead.atEnd("d/1") // returns: 2 is being opened
	close(release)
	<-done
	assert.Len(t, x.openedAhead(), 1)
	assert.Equal(t, 1, x.pending())
}

// Destroy while an open ahead runs: its reader is closed.
func TestReadAheadAcrossFilesDestroyDuringOpenAhead(t *testing.T) {
	x := newAheadFixture(t, "d/0", "d/1", "d/2", "d/3")
	x.list()
	entered, release := x.blockOpenAhead()
	x.open("0")
	r1 := x.open("1")
	done := make(chan struct{})
	go func() { r1.end(); close(done) }()
	<-entered
	x.fs.Destroy()
	close(release)
	<-done
	require.Len(t, x.openedAhead(), 1)
	assert.True(t, x.aheads[0].isClosed())
}

// A probe (open, close, no read) before the real read does not throw the
// file opened ahead away: it waits again for the next open.
func TestReadAheadAcrossFilesProbeThenRead(t *testing.T) {
	x := newAheadFixture(t, "d/0", "d/1", "d/2", "d/3")
	x.list()
	x.open("0")
	x.open("1").end()
	require.Equal(t, []string{"d/2"}, x.openedAhead())
	probe, h := x.openH("2")
	assert.True(t, probe.ahead)
	x.release(h)
	assert.False(t, probe.isClosed(), "kept for the next open")
	assert.Zero(t, x.fs.ahead.taken.Load(), "a probe does not count as taken")
	read, h := x.openH("2")
	assert.Same(t, probe, read, "the real read gets it")
	assert.Equal(t, uint64(1), x.fs.ahead.taken.Load())
	_, err := read.ReadAt(context.Background(), make([]byte, 10), 0)
	require.NoError(t, err)
	x.release(h)
	assert.True(t, read.isClosed(), "once read, a release closes it")
	assert.Zero(t, x.pending())
}

// When aheadMax files wait but the readers of some of their directories
// have moved on (stopped, or skipped the file), a new one takes the place
// of the oldest such, instead of being dropped for the rest of its wait.
func TestReadAheadAcrossFilesStaleMakeRoom(t *testing.T) {
	var names []string
	for d := range aheadMax + 1 {
		for f := range 4 {
			names = append(names, fmt.Sprintf("d/%d/%d", d, f))
		}
	}
	x := newAheadFixture(t, names...)
	open := func(d, f int) *endReader {
		r, _ := x.openPath(fmt.Sprintf("d/%d/%d", d, f))
		return r
	}
	for d := range aheadMax + 1 {
		x.listPath(fmt.Sprintf("d/%d", d))
	}
	for d := range aheadMax {
		open(d, 0)
		open(d, 1).end()
	}
	require.Equal(t, aheadMax, x.pending())
	d := aheadMax
	open(d, 0)
	open(d, 1).end()
	assert.Equal(t, aheadMax, x.pending(), "every reader is due: the new one is dropped")
	assert.Len(t, x.openedAhead(), aheadMax)

	open(0, 3) // directory 0's reader skips 2
	open(d, 2).end()
	require.Len(t, x.openedAhead(), aheadMax+1, "a place was free")
	assert.Eventually(t, x.aheads[0].isClosed, 5*time.Second, time.Millisecond, "directory 0's file waited for nobody")
	assert.Equal(t, aheadMax, x.pending())
}

func TestReadAheadAcrossFilesStoppedByDestroy(t *testing.T) {
	x := newAheadFixture(t, "d/0", "d/1", "d/2", "d/3")
	x.list()
	x.open("0")
	x.open("1").end()
	require.Len(t, x.openedAhead(), 1)
	x.fs.Destroy()
	assert.True(t, x.aheads[0].isClosed())
	x.fs.ahead.atEnd("d/1")
	assert.Len(t, x.openedAhead(), 1, "nothing opens after Destroy")
}

// A large file opened ahead with nothing to fetch (its window cached
// already, or no memory free) is closed at once, not kept waiting.
func TestReadAheadAcrossFilesNothingToFetch(t *testing.T) {
	x := newAheadFixture(t, "d/0", "d/1", "d/2", "d/3")
	x.list()
	inner := x.fs.ahead.openAhead
	x.fs.ahead.openAhead = func(obj bucket.Object) ContentReader {
		r := inner(obj).(*endReader)
		r.read = true // as readahead.Handle: not Unread
		return r
	}
	x.open("0")
	x.open("1").end()
	require.Len(t, x.openedAhead(), 1)
	assert.True(t, x.aheads[0].isClosed())
	assert.Zero(t, x.pending())
	assert.Zero(t, x.fs.ahead.started.Load())
}
