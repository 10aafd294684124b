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

// open opens d/name and returns its reader.
func (x *aheadFixture) open(name string) *endReader {
	x.t.Helper()
	e, err := lookUp(x.fs, x.dir, name)
	require.NoError(x.t, err)
	op := &fuseops.OpenFileOp{Inode: e.Child}
	require.NoError(x.t, x.fs.OpenFile(context.Background(), op))
	x.fs.mu.Lock()
	r := x.fs.files[op.Handle].reader.(*endReader)
	x.fs.mu.Unlock()
	return r
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
	assert.Empty(t, x.openedAhead(), "one file read is no order yet")
	r1 := x.open("1")
	r1.end()
	require.Equal(t, []string{"d/2"}, x.openedAhead(), "the first two files, opened first: 2 is opened ahead")
	r1.end()
	assert.Len(t, x.openedAhead(), 1, "once")

	r2 := x.open("2")
	assert.True(t, r2.ahead, "the open takes over the reader opened ahead")
	assert.False(t, r2.isClosed())
	r2.end()
	assert.Equal(t, []string{"d/2", "d/3"}, x.openedAhead(), "0, 1, 2: 3 is opened ahead")
	r3 := x.open("3")
	assert.True(t, r3.ahead)
	r3.end()
	assert.Equal(t, []string{"d/2", "d/3", "d/4"}, x.openedAhead(), "and so on")
	assert.Equal(t, uint64(3), x.fs.ahead.started.Load())
	assert.Equal(t, uint64(2), x.fs.ahead.taken.Load())

	// Out of order: 1 after 3 (4 was opened ahead, not taken yet).
	r1 = x.open("1")
	assert.False(t, r1.ahead)
	r1.end()
	assert.Len(t, x.openedAhead(), 3, "3 then 1 are not neighbours")
	x.open("2").end()
	assert.Len(t, x.openedAhead(), 3, "3, 1, 2: one step is not enough")

	// A reader of 3 whose readahead ends after another file was opened:
	// the directory's last open is not 3 any more.
	r3 = x.open("3")
	x.open("small")
	r3.end()
	assert.Len(t, x.openedAhead(), 3)
}

// Reading a file twice in a row (a probe, then the read) is one step.
func TestReadAheadAcrossFilesTwoOpensPerFile(t *testing.T) {
	x := newAheadFixture(t, "d/0", "d/1", "d/2", "d/3")
	x.list()
	for _, n := range []string{"0", "1"} {
		x.open(n)
		x.open(n).end()
	}
	assert.Equal(t, []string{"d/2"}, x.openedAhead())
}

// The first files opened in a directory but not its first files say
// nothing about order.
func TestReadAheadAcrossFilesFirstOpensInTheMiddle(t *testing.T) {
	x := newAheadFixture(t, "d/0", "d/1", "d/2", "d/3")
	x.list()
	x.open("1")
	x.open("2").end()
	assert.Empty(t, x.openedAhead())
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
	dir := make([]fuseops.InodeID, dirs)
	for d := range dirs {
		e, err := lookUp(x.fs, x.dir, fmt.Sprint(d))
		require.NoError(t, err)
		dir[d] = e.Child
		readDir(t, x.fs, e.Child, 1<<16, false)
	}
	for f := range files {
		for d := range dirs {
			e, err := lookUp(x.fs, dir[d], fmt.Sprint(f))
			require.NoError(t, err)
			op := &fuseops.OpenFileOp{Inode: e.Child}
			require.NoError(t, x.fs.OpenFile(context.Background(), op))
			x.fs.mu.Lock()
			r := x.fs.files[op.Handle].reader.(*endReader)
			x.fs.mu.Unlock()
			r.end()
		}
	}
	started, taken := x.fs.ahead.started.Load(), x.fs.ahead.taken.Load()
	assert.Positive(t, taken)
	assert.LessOrEqual(t, started-taken, uint64(aheadMax), "only the last round's may wait for nobody")
}

// An open ahead that loses the race with the reader's own open of that
// file is not left waiting for nobody.
func TestReadAheadAcrossFilesLosesRaceWithTheOpen(t *testing.T) {
	x := newAheadFixture(t, "d/0", "d/1", "d/2", "d/3")
	x.list()
	x.open("0")
	x.open("1")
	x.fs.cache.mu.Lock() // holds atEnd in its listing lookup
	done := make(chan struct{})
	go func() { x.fs.ahead.atEnd("d/1"); close(done) }()
	time.Sleep(10 * time.Millisecond)
	assert.Empty(t, x.openedAhead())
	x.fs.ahead.open("d/2", bucket.Object{Name: "d/2"}) // the reader's open of 2
	x.fs.cache.mu.Unlock()
	<-done
	assert.Empty(t, x.openedAhead(), "the reader moved on to 2 first")
}

func TestReadAheadAcrossFilesStoppedByDestroy(t *testing.T) {
	x := newAheadFixture(t, "d/0", "d/1", "d/2", "d/3")
	x.list()
	x.open("0")
	x.open("1").end()
	require.Len(t, x.openedAhead(), 1)
	x.fs.Destroy()
	assert.True(t, x.aheads[0].isClosed())
	x.fs.ahead.atEnd("d/2")
	assert.Len(t, x.openedAhead(), 1, "nothing opens after Destroy")
}
