package fs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jacobsa/fuse/fuseops"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
)

// newSmallFixture is an aheadFixture whose directory d holds n small
// files d/f000, d/f001, ... of size bytes (and d/small), listed.
func newSmallFixture(t *testing.T, n, size int) *aheadFixture {
	return newSmallFixtureWith(t, n, size, nil)
}

// newSmallFixtureWith is newSmallFixture; put, if not nil, changes the
// bucket before the listing.
func newSmallFixtureWith(t *testing.T, n, size int, put func(b *testBucket)) *aheadFixture {
	x := newAheadFixture(t)
	data := make([]byte, size)
	for i := range n {
		x.b.put(smallName(i), data)
	}
	if put != nil {
		put(x.b)
	}
	x.list()
	return x
}

func smallName(i int) string { return fmt.Sprintf("d/f%03d", i) }

// openSmall opens d/f<i> and releases it, as a reader that read it whole.
func (x *aheadFixture) openSmall(i int) *endReader {
	x.t.Helper()
	r, h := x.openPath(smallName(i))
	r.mu.Lock()
	r.read = true
	r.mu.Unlock()
	x.release(h)
	return r
}

func smallNames(from, to int) []string {
	var names []string
	for i := from; i < to; i++ {
		names = append(names, smallName(i))
	}
	return names
}

// Opens in listing order make a run; from its smallRunMin-th open, the
// smallAhead files after the furthest open are opened ahead, each once,
// and taken by the readers' opens.
func TestReadAheadSmallFiles(t *testing.T) {
	x := newSmallFixture(t, 100, 4096)
	for i := range smallRunMin - 1 {
		x.openSmall(i)
	}
	assert.Empty(t, x.openedAhead(), "not a run yet")
	x.openSmall(smallRunMin - 1)
	assert.Equal(t, smallNames(smallRunMin, smallRunMin+smallAhead), x.openedAhead())
	for i := smallRunMin; i < 50; i++ {
		assert.True(t, x.openSmall(i).ahead, "file %d taken", i)
	}
	assert.Equal(t, smallNames(smallRunMin, 50+smallAhead), x.openedAhead(), "each once, in order")
	assert.Equal(t, smallAhead, x.pending())
	assert.Equal(t, uint64(50-smallRunMin), x.fs.ahead.taken.Load())
}

// Eight readers in a row open their files out of order within a few
// places, and still make a run; a shuffled reader of a large directory
// does not.
func TestReadAheadSmallFilesOrder(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	x := newSmallFixture(t, 200, 4096)
	order := make([]int, 64)
	for i := range order {
		order[i] = i
	}
	for i := 0; i < len(order); i += 8 {
		rnd.Shuffle(8, func(a, b int) { order[i+a], order[i+b] = order[i+b], order[i+a] })
	}
	taken := 0
	for _, i := range order {
		if x.openSmall(i).ahead {
			taken++
		}
	}
	assert.Greater(t, taken, 40, "readers in a row take files opened ahead")

	y := newSmallFixture(t, 1000, 4096)
	for _, i := range rnd.Perm(1000)[:300] {
		y.openSmall(i)
	}
	assert.Empty(t, y.openedAhead(), "a shuffled reader makes no run")

	// In a directory a few spans long, many opens of a shuffled reader
	// fall near the front of a run, but they do not cover its range.
	// (Over 5 seeds, none of 1000 files was opened ahead; without the
	// coverage check, 282.)
	z := newSmallFixture(t, 200, 4096)
	for _, i := range rnd.Perm(200) {
		z.openSmall(i)
	}
	assert.LessOrEqual(t, len(z.openedAhead()), 2, "a shuffled reader of a smaller directory")
}

// Nothing is opened ahead without a listing, for large files, for empty
// ones, or for files the kernel may have in its page cache.
func TestReadAheadSmallFilesSkips(t *testing.T) {
	x := newAheadFixture(t)
	for i := range 20 {
		x.b.put(smallName(i), []byte("x"))
	}
	for i := range 10 {
		x.openSmall(i)
	}
	assert.Empty(t, x.openedAhead(), "no listing")

	y := newSmallFixtureWith(t, 300, 4096, func(b *testBucket) {
		b.put(smallName(6), make([]byte, aheadMinSize))
		b.put(smallName(7), nil)
	})
	y.openSmall(10) // the kernel has f010's pages now
	for i := range smallRunsPerDir {
		y.openSmall(100 + 50*i) // runs of their own, far away: 10's run is forgotten
	}
	for i := range 4 {
		y.openSmall(i)
	}
	want := slices.DeleteFunc(smallNames(4, 4+smallAhead), func(n string) bool {
		return n == smallName(6) || n == smallName(7) || n == smallName(10)
	})
	assert.Equal(t, want, y.openedAhead())
}

// At most smallAheadMax files and smallAheadBytes bytes wait for readers;
// a file of a run that ended gives its place up to a new one.
func TestReadAheadSmallFilesBounds(t *testing.T) {
	x := newSmallFixture(t, 600, 4096)
	// Runs of 4 opens each, far apart, leave their files waiting.
	for run := 0; run < 12; run++ {
		for i := range 4 {
			x.openSmall(run*50 + i)
		}
		x.fs.ahead.mu.Lock()
		assert.LessOrEqual(t, x.fs.ahead.smallFiles, smallAheadMax)
		x.fs.ahead.mu.Unlock()
	}
	assert.Equal(t, smallAheadMax, x.pending())
	assert.Greater(t, len(x.openedAhead()), smallAheadMax, "ended runs gave their places up")
	assert.Positive(t, x.fs.ahead.unused.Load())

	y := newSmallFixture(t, 20, 6<<20) // 16 ahead would be 96 MiB
	for i := range 4 {
		y.openSmall(i)
	}
	assert.Len(t, y.openedAhead(), smallAheadBytes/(6<<20))
	y.fs.ahead.mu.Lock()
	assert.LessOrEqual(t, y.fs.ahead.smallBytes, int64(smallAheadBytes))
	y.fs.ahead.mu.Unlock()
	// The next open, taking one, makes room for one more; so if it was a
	// probe (released unread), there is no room for it to wait again.
	r, h := y.openPath(smallName(4))
	assert.True(t, r.ahead)
	assert.Len(t, y.openedAhead(), smallAheadBytes/(6<<20)+1)
	y.release(h)
	assert.True(t, r.isClosed(), "no room to wait again")
	y.fs.ahead.mu.Lock()
	assert.LessOrEqual(t, y.fs.ahead.smallBytes, int64(smallAheadBytes))
	y.fs.ahead.mu.Unlock()
}

// Random opens over several directories keep the books: smallFiles and
// smallBytes are those of the small files waiting, within their bounds.
func TestReadAheadSmallFilesAccounting(t *testing.T) {
	x := newAheadFixture(t)
	rnd := rand.New(rand.NewPCG(3, 4))
	for d := range 3 {
		for i := range 60 {
			x.b.put(fmt.Sprintf("d/%d/f%03d", d, i), make([]byte, 1+rnd.IntN(3<<20)))
		}
		x.listPath(fmt.Sprintf("d/%d", d))
	}
	check := func() {
		x.t.Helper()
		x.fs.ahead.mu.Lock()
		defer x.fs.ahead.mu.Unlock()
		n, bytes := 0, int64(0)
		for _, p := range x.fs.ahead.pending {
			if p.small {
				n++
				bytes += int64(p.obj.Size)
			}
		}
		require.Equal(t, n, x.fs.ahead.smallFiles)
		require.Equal(t, bytes, x.fs.ahead.smallBytes)
		require.LessOrEqual(t, n, smallAheadMax)
		require.LessOrEqual(t, bytes, int64(smallAheadBytes))
	}
	next := [3]int{}
	for range 600 {
		d := rnd.IntN(3)
		i := next[d]
		if rnd.IntN(4) == 0 {
			i = rnd.IntN(60) // a jump
		}
		next[d] = (i + 1) % 60
		r, h := x.openPath(fmt.Sprintf("d/%d/f%03d", d, i))
		if rnd.IntN(3) > 0 { // else a probe: released unread
			r.mu.Lock()
			r.read = true
			r.mu.Unlock()
		}
		x.release(h)
		check()
	}
	assert.Positive(t, x.fs.ahead.taken.Load())
	x.fs.ahead.stop()
	check()
}

// A reader's open of a small file being opened ahead waits for it and
// takes it.
func TestReadAheadSmallFilesOpenWaits(t *testing.T) {
	x := newSmallFixture(t, 40, 4096)
	entered, release := x.blockOpenAhead()
	for i := range 3 {
		x.openSmall(i)
	}
	go x.openSmall(3) // starts opening 4.. ahead, blocked
	<-entered
	opened := make(chan *endReader)
	go func() { opened <- x.openSmall(4) }()
	select {
	case <-opened:
		t.Fatal("the open did not wait for the open ahead")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	assert.True(t, (<-opened).ahead)
}

// Files being opened ahead when the file system stops are closed, not
// left waiting.
func TestReadAheadSmallFilesStopWhileOpening(t *testing.T) {
	x := newSmallFixture(t, 40, 4096)
	entered, release := x.blockOpenAhead()
	for i := range 3 {
		x.openSmall(i)
	}
	done := make(chan struct{})
	go func() { x.openSmall(3); close(done) }()
	<-entered
	x.fs.ahead.stop()
	close(release)
	<-done
	names := x.openedAhead()
	require.Len(t, names, smallAhead)
	for _, r := range x.aheads {
		assert.True(t, r.isClosed(), r.obj.Name)
	}
	x.fs.ahead.mu.Lock()
	defer x.fs.ahead.mu.Unlock()
	assert.Zero(t, x.fs.ahead.smallFiles)
	assert.Zero(t, x.fs.ahead.smallBytes)
	assert.Empty(t, x.fs.ahead.pending)
}

// A file opened ahead with nothing to fetch (cached already, or no memory
// free) is closed at once, not kept waiting or counted.
func TestReadAheadSmallFilesNothingToFetch(t *testing.T) {
	x := newSmallFixture(t, 40, 4096)
	inner := x.fs.ahead.openAhead
	x.fs.ahead.openAhead = func(obj bucket.Object) ContentReader {
		r := inner(obj).(*endReader)
		if obj.Name == smallName(5) {
			r.read = true // as readahead.Handle: not Unread
		}
		return r
	}
	for i := range 4 {
		x.openSmall(i)
	}
	require.Len(t, x.openedAhead(), smallAhead)
	assert.True(t, x.aheads[1].isClosed(), x.aheads[1].obj.Name)
	assert.Equal(t, smallAhead-1, x.pending())
	assert.Equal(t, uint64(smallAhead-1), x.fs.ahead.started.Load())
	x.fs.ahead.mu.Lock()
	assert.Equal(t, smallAhead-1, x.fs.ahead.smallFiles)
	x.fs.ahead.mu.Unlock()
	assert.False(t, x.openSmall(5).ahead)
}

// smallWaiting counts the small files waiting for readers.
func (x *aheadFixture) smallWaiting() int {
	x.fs.ahead.mu.Lock()
	defer x.fs.ahead.mu.Unlock()
	n := 0
	for _, p := range x.fs.ahead.pending {
		if p.small {
			n++
		}
	}
	return n
}

// The bytes of small files waiting are bounded by Config.AheadBytes (a
// share of the readahead memory, so that they do not push one another
// out of it).
func TestReadAheadSmallFilesMemoryShare(t *testing.T) {
	x := newAheadFixture(t)
	x.fs.ahead.stop()
	x.fs.ahead = newAheader(x.fs, x.fs.ahead.openAhead, 1<<20)
	for i := range 40 {
		x.b.put(smallName(i), make([]byte, 256<<10))
	}
	x.list()
	for i := range 4 {
		x.openSmall(i)
	}
	assert.Equal(t, smallNames(4, 8), x.openedAhead())
	assert.Equal(t, int64(smallAheadBytes), newAheader(x.fs, nil, 0).maxBytes)
	assert.Equal(t, int64(smallAheadBytes), newAheader(x.fs, nil, 1<<40).maxBytes)
}

// Several opens of one file (a probe then a read, or workers opening one
// index file) are one step of a run.
func TestReadAheadSmallFilesRepeatedOpens(t *testing.T) {
	x := newSmallFixture(t, 100, 4096)
	for range 8 {
		x.openSmall(50)
	}
	x.openSmall(51)
	assert.Empty(t, x.openedAhead())
}

// A file a reader has open is not opened ahead: the reader has its own
// handle, and nobody would take it.
func TestReadAheadSmallFilesSkipsHeldFiles(t *testing.T) {
	x := newSmallFixture(t, 40, 4096)
	for i := range 3 {
		x.openSmall(i)
	}
	// A reader's open of 5, not yet counted in the run (as when another
	// reader's open of 3 comes in between).
	x.fs.ahead.open(smallName(5), x.b.put(smallName(5), make([]byte, 4096)))
	x.openSmall(3)
	want := slices.DeleteFunc(smallNames(4, 4+smallAhead), func(n string) bool { return n == smallName(5) })
	assert.Equal(t, want, x.openedAhead())
	x.fs.ahead.handleReleased(smallName(5))
}

// A second epoch through the same directory fetches nothing ahead while
// the kernel keeps the files' pages; once a file opened with its pages
// kept is read from ferry, the pages are gone, and files are fetched
// ahead again.
func TestReadAheadSmallFilesSecondEpoch(t *testing.T) {
	x := newSmallFixture(t, 100, 4096)
	for i := range 100 {
		x.openSmall(i)
	}
	first := len(x.openedAhead())
	require.Positive(t, first)
	for i := range 4 {
		x.openSmall(i)
	}
	assert.Len(t, x.openedAhead(), first, "the kernel has the pages")
	_, h := x.openPath(smallName(4))
	op := &fuseops.ReadFileOp{Handle: h, Size: 4096, Dst: make([]byte, 4096)}
	require.NoError(t, x.fs.ReadFile(context.Background(), op))
	x.release(h)
	x.openSmall(5)
	// (The files the run passed over meanwhile are not looked at again.)
	assert.Equal(t, smallNames(21, 22), x.openedAhead()[first:], "read from ferry: fetched ahead again")
}

// Small files waiting do not take the places of large ones, nor are they
// evicted to make room for them.
func TestReadAheadSmallFilesAndLargeOnes(t *testing.T) {
	var large []string
	for d := range 5 {
		for f := range 3 {
			large = append(large, fmt.Sprintf("d/l%d/%d", d, f))
		}
	}
	x := newAheadFixture(t, large...)
	for i := range 40 {
		x.b.put(smallName(i), []byte("small"))
	}
	x.list()
	for i := range 4 {
		x.openSmall(i)
	}
	require.Equal(t, smallAhead, x.smallWaiting())
	// Five directories of large files: a large file is opened ahead in
	// each of the first four, the places of large files are full then,
	// and the small files stay.
	for d := range 5 {
		x.listPath(fmt.Sprintf("d/l%d", d))
		x.openPath(fmt.Sprintf("d/l%d/0", d))
		r, _ := x.openPath(fmt.Sprintf("d/l%d/1", d))
		r.end()
		if d == 0 {
			assert.Equal(t, smallAhead+1, x.pending(), "a large file opened ahead too")
		}
	}
	x.fs.ahead.mu.Lock()
	assert.LessOrEqual(t, x.fs.ahead.largeLocked(), aheadMax)
	x.fs.ahead.mu.Unlock()
	assert.Equal(t, smallAhead, x.smallWaiting())
}

// A small file its readers went past by smallSpan entries without opening
// it gives its place up when a new one needs it.
func TestReadAheadSmallFilesSkippedGivesWay(t *testing.T) {
	x := newSmallFixture(t, 100, 4096)
	x.fs.ahead.maxBytes = smallAhead * 4096
	for i := range 4 {
		x.openSmall(i)
	}
	require.Equal(t, smallAhead, x.smallWaiting())
	var skipped *endReader
	for _, r := range x.aheads {
		if r.obj.Name == smallName(10) {
			skipped = r
		}
	}
	require.NotNil(t, skipped)
	for i := 4; i < 10+smallSpan+2; i++ {
		if i != 10 {
			x.openSmall(i)
		}
	}
	assert.Eventually(t, skipped.isClosed, 10*time.Second, time.Millisecond, "readers went past it")
	assert.Positive(t, x.fs.ahead.unused.Load())
	assert.Contains(t, x.openedAhead(), smallName(10+smallSpan+1+smallAhead))
}

// Without a fresh listing nothing is fetched ahead.
func TestReadAheadSmallFilesStaleListing(t *testing.T) {
	x := newSmallFixture(t, 40, 4096)
	x.fs.cache.mu.Lock()
	l := x.fs.cache.listings["d"]
	l.exp = expiry{at: time.Now().Add(-time.Second)}
	x.fs.cache.listings["d"] = l
	x.fs.cache.mu.Unlock()
	for i := range 8 {
		x.openSmall(i)
	}
	assert.Empty(t, x.openedAhead())
}

// Two readers, each through its own part of one directory, make a run
// each.
func TestReadAheadSmallFilesTwoRunsInOneDirectory(t *testing.T) {
	x := newSmallFixture(t, 300, 4096)
	for i := range 8 {
		assert.Equal(t, i >= smallRunMin, x.openSmall(i).ahead, "file %d", i)
		assert.Equal(t, i >= smallRunMin, x.openSmall(200+i).ahead, "file %d", 200+i)
	}
}
