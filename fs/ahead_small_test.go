package fs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
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
		x.b.put(smallName(i), []byte("small"))
	}
	x.list()
	return x
}

func smallName(i int) string { return fmt.Sprintf("d/f%03d", i) }

// openSmall opens d/f<i>, reads its head through ReadFile (as the kernel
// does when it lacks the pages) and releases it.
func (x *aheadFixture) openSmall(i int) *endReader {
	x.t.Helper()
	return x.readPath(smallName(i), true)
}

// readPath opens path, reads its head through ReadFile if read (else the
// kernel had the pages, or the open was a probe) and releases it.
func (x *aheadFixture) readPath(path string, read bool) *endReader {
	x.t.Helper()
	r, h := x.openPath(path)
	if read {
		op := &fuseops.ReadFileOp{Handle: h, Size: 4096, Dst: make([]byte, 4096)}
		require.NoError(x.t, x.fs.ReadFile(context.Background(), op))
	}
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
	// (Without the coverage check, 150 of these 200 files were opened
	// ahead.)
	z := newSmallFixture(t, 200, 4096)
	for _, i := range rnd.Perm(200) {
		z.openSmall(i)
	}
	assert.LessOrEqual(t, len(z.openedAhead()), 2, "a shuffled reader of a smaller directory")

	// The same with a probe before each read: one step per file.
	w := newSmallFixture(t, 200, 4096)
	for _, i := range rnd.Perm(200) {
		w.readPath(smallName(i), false)
		w.openSmall(i)
	}
	assert.LessOrEqual(t, len(w.openedAhead()), 2, "a shuffled reader probing each file first")
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

	y := newSmallFixtureWith(t, 100+50*smallRunsPerDir, 4096, func(b *testBucket) {
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
	// A probe of the next file (released unread) leaves it waiting again:
	// a file taken stays counted until its first read or release, so
	// nothing took its place meanwhile.
	r, h := y.openPath(smallName(4))
	assert.True(t, r.ahead)
	y.release(h)
	assert.False(t, r.isClosed(), "waits again")
	assert.True(t, y.openSmall(4).ahead, "the read takes it")
	assert.Len(t, y.openedAhead(), smallAheadBytes/(6<<20), "its place is free only once it is released")
	y.openSmall(5)
	assert.Len(t, y.openedAhead(), smallAheadBytes/(6<<20)+1)
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
	require.Len(t, names, 1, "the rest given up unopened")
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
		x.readPath(smallName(50), false)
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

	// A probe of a file opened ahead, released while another handle of it
	// is open: that one has its own reader, so the file does not wait
	// again.
	r, h := x.openPath(smallName(6))
	require.True(t, r.ahead)
	_, h2 := x.openPath(smallName(6))
	x.release(h)
	assert.True(t, r.isClosed())
	x.release(h2)
}

// A second pass through a directory on the same mount fetches nothing
// ahead: the kernel may have the files' pages, and ferry cannot tell.
// Once it forgets the inodes (their pages go with them), files are
// fetched ahead again.
func TestReadAheadSmallFilesSecondEpoch(t *testing.T) {
	x := newSmallFixture(t, 100, 4096)
	for i := range 100 {
		x.openSmall(i)
	}
	first := len(x.openedAhead())
	require.Positive(t, first)
	for i := range 100 {
		x.openSmall(i)
	}
	assert.Len(t, x.openedAhead(), first, "read before")
	x.forgetFiles()
	served := 0
	for i := range 100 {
		if x.openSmall(i).ahead {
			served++
		}
	}
	assert.Greater(t, served, 90, "the inodes forgotten")
}

// A loader that probes each file (an open and a close) before reading it:
// the probe leaves the file waiting, the read takes it.
func TestReadAheadSmallFilesProbeThenRead(t *testing.T) {
	x := newSmallFixture(t, 100, 4096)
	served := 0
	for i := 0; i < 100; i += 2 { // probes of two files, then their reads
		x.readPath(smallName(i), false)
		x.readPath(smallName(i+1), false)
		for _, j := range []int{i, i + 1} {
			if x.readPath(smallName(j), true).ahead {
				served++
			}
		}
	}
	assert.Greater(t, served, 90, "reads served by files fetched ahead")
	assert.Equal(t, x.fs.ahead.started.Load(), x.fs.ahead.taken.Load()+uint64(x.pending()), "each taken or still waiting")
}

// Small files waiting do not take the places of large ones, nor are they
// evicted to make room for them.
func TestReadAheadSmallFilesAndLargeOnes(t *testing.T) {
	x := newMixedFixture(t, 5)
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
	x.fs.ahead.maxBytes = (smallAhead + 1) * 4096 // and the one taken
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

// Control.Cached tells a file opened ahead, and not yet taken by an
// open, from one the cache held before its reader came (ferry warm reads
// the first kind, and counts only the second as already cached).
func TestReadAheadSmallFilesCachedSaysOpenedAhead(t *testing.T) {
	x := newSmallFixture(t, 40, 4096)
	x.fs.cachedBytes = func(obj bucket.Object) int64 { return int64(obj.Size) }
	ctl := NewControl()
	ctl.bind(x.fs)
	ask := func(i int) (bool, error) {
		cf, err := ctl.Cached(context.Background(), smallName(i))
		return cf.OpenedAhead, err
	}
	ahead := func(i int) bool {
		t.Helper()
		got, err := ask(i)
		require.NoError(t, err)
		return got
	}
	for i := range smallRunMin {
		x.openSmall(i)
	}
	first, last := smallRunMin, smallRunMin+smallAhead-1
	require.Equal(t, smallNames(first, last+1), x.openedAhead())
	assert.False(t, ahead(0), "opened by its reader")
	assert.True(t, ahead(first))
	assert.True(t, ahead(last))
	assert.False(t, ahead(last+1), "past the files opened ahead")

	// A file being opened ahead may yet be given up (cached whole, or
	// nothing to fetch): the answer waits for the opening to end.
	a := x.fs.ahead
	a.mu.Lock()
	a.opening[smallName(last+1)] = true
	a.mu.Unlock()
	got := make(chan bool, 1)
	go func() { v, _ := ask(last + 1); got <- v }()
	select {
	case <-got:
		t.Fatal("answered while the file was being opened ahead")
	case <-time.After(50 * time.Millisecond):
	}
	a.mu.Lock()
	a.doneOpeningLocked(smallName(last + 1)) // given up: not waiting
	a.mu.Unlock()
	assert.False(t, <-got)

	assert.True(t, x.openSmall(first).ahead)
	assert.False(t, ahead(first), "taken by an open")

	// The name holds a newer version than the one opened ahead.
	x.b.put(smallName(last), []byte("rewritten"))
	x.fs.cache.mu.Lock()
	l := x.fs.cache.listings["d"]
	l.exp = expiry{at: time.Now().Add(-time.Second)}
	x.fs.cache.listings["d"] = l
	x.fs.cache.mu.Unlock()
	x.list()
	assert.False(t, ahead(last), "opened ahead in another version")
	assert.True(t, ahead(last-1))

	// Without reading ahead, nothing is opened ahead.
	bare := newTestFS(t, x.b, nil, func(c *Config) {
		c.CachedBytes = func(obj bucket.Object) int64 { return 0 }
	})
	ctl2 := NewControl()
	ctl2.bind(bare)
	cf, err := ctl2.Cached(context.Background(), smallName(first+1))
	require.NoError(t, err)
	assert.False(t, cf.OpenedAhead)
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

// A second pass through a small directory (the inodes forgotten) begins
// a new run: its files are opened ahead again.
func TestReadAheadSmallFilesSmallDirectorySecondEpoch(t *testing.T) {
	for _, n := range []int{20, 30, 60} {
		x := newSmallFixture(t, n, 4096)
		for i := range n {
			x.openSmall(i)
		}
		x.forgetFiles()
		first := len(x.openedAhead())
		for i := range n {
			x.openSmall(i)
		}
		assert.Greater(t, len(x.openedAhead())-first, n/2, "%d files", n)
	}
}

// 8 readers taking files from a shared counter, in two directories at
// once, for two epochs: every file opened ahead is taken and none is left
// waiting. In the second epoch nothing is opened ahead, unless the kernel
// forgot the inodes in between.
func TestReadAheadSmallFilesEightReaders(t *testing.T) {
	for _, forget := range []bool{true, false} {
		x := newAheadFixture(t)
		const n = 200
		for d := range 2 {
			for i := range n {
				x.b.put(fmt.Sprintf("d/%d/f%03d", d, i), make([]byte, 4096))
			}
			x.listPath(fmt.Sprintf("d/%d", d))
		}
		var served atomic.Int64
		var opened [2]int
		for epoch := range 2 {
			var wg sync.WaitGroup
			for d := range 2 {
				var next atomic.Int64
				for range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
							if x.readPath(fmt.Sprintf("d/%d/f%03d", d, i), true).ahead && epoch == 0 {
								served.Add(1)
							}
						}
					}()
				}
			}
			wg.Wait()
			opened[epoch] = len(x.openedAhead())
			if forget {
				x.forgetFiles()
			}
		}
		assert.Zero(t, x.pending(), "left waiting for nobody")
		assert.Equal(t, x.fs.ahead.started.Load(), x.fs.ahead.taken.Load())
		assert.Greater(t, served.Load(), int64(n), "epoch 1: served ahead, of %d opens", 2*n)
		if forget {
			assert.Greater(t, opened[1]-opened[0], n, "epoch 2, the inodes forgotten: opened ahead")
		} else {
			assert.Equal(t, opened[0], opened[1], "epoch 2: nothing read before is opened ahead")
		}
	}
}

// Workers each reading their own batches of a directory in order (batch k
// to worker k%W), W and the batches small or far apart: served ahead.
// (Four or more workers with batches of 16 to 32 files are not: their
// fronts neither make one run nor runs of their own.)
func TestReadAheadSmallFilesBatchedWorkers(t *testing.T) {
	for _, c := range []struct{ workers, batch int }{{2, 16}, {2, 64}, {4, 8}, {4, 64}, {8, 64}, {8, 256}} {
		x := newSmallFixture(t, 1000, 4096)
		const n = 1000
		served := 0
		nb := (n + c.batch - 1) / c.batch
		for round := 0; round < (nb+c.workers-1)/c.workers; round++ {
			for j := range c.batch {
				for k := range c.workers {
					if b := round*c.workers + k; b < nb && b*c.batch+j < n && x.openSmall(b*c.batch+j).ahead {
						served++
					}
				}
			}
		}
		assert.Greater(t, served, 900, "%+v", c)
		assert.LessOrEqual(t, len(x.openedAhead()), served+1, "%+v: fetched for nobody", c)
	}
}

// A few late opens in epoch 1 leave a short run behind; a second pass
// (the inodes forgotten) that meets it on its way keeps its own run.
func TestReadAheadSmallFilesStaleRunMet(t *testing.T) {
	late := map[int]bool{20: true, 40: true, 50: true, 64: true}
	x := newSmallFixture(t, 200, 4096)
	for i := range 200 {
		if !late[i] {
			x.openSmall(i)
		}
	}
	for _, i := range []int{20, 40, 50, 64} {
		x.openSmall(i)
	}
	x.forgetFiles()
	missed := 0
	for i := range 200 {
		if !x.openSmall(i).ahead {
			missed++
		}
	}
	assert.Equal(t, smallRunMin, missed, "only the opens before the run")
}

// A loader that probes each file before reading it, with files large
// enough to reach the byte bound: the probe leaves the file waiting, and
// the read takes it.
func TestReadAheadSmallFilesProbeThenReadAtTheBound(t *testing.T) {
	x := newSmallFixture(t, 60, 6<<20)
	served := 0
	for i := range 60 {
		x.readPath(smallName(i), false)
		if x.readPath(smallName(i), true).ahead {
			served++
		}
	}
	assert.Greater(t, served, 50)
	assert.LessOrEqual(t, len(x.openedAhead()), served+1, "fetched for nobody, then again")
}

// Small files being opened ahead (counted, not yet waiting) do not let
// more than aheadMax large files wait.
func TestReadAheadSmallFilesLargeBoundWhileOpening(t *testing.T) {
	x := newMixedFixture(t, 6)
	inner := x.fs.ahead.openAhead
	entered, release := make(chan struct{}, 64), make(chan struct{})
	x.fs.ahead.openAhead = func(obj bucket.Object) ContentReader {
		if obj.Size < aheadMinSize {
			entered <- struct{}{}
			<-release
		}
		return inner(obj)
	}
	for i := range 3 {
		x.openSmall(i)
	}
	done := make(chan struct{})
	go func() { x.openSmall(3); close(done) }() // 16 small files being opened
	<-entered
	for d := range 6 {
		x.listPath(fmt.Sprintf("d/l%d", d))
		x.openPath(fmt.Sprintf("d/l%d/0", d))
		r, _ := x.openPath(fmt.Sprintf("d/l%d/1", d))
		r.end()
	}
	assert.Equal(t, aheadMax, x.pending(), "only large files wait yet")
	close(release)
	<-done
}

// Readers that stalled while the others went on (their files opened last)
// make a run of their own, behind the front: without a disk cache the
// files after them, read already, are not fetched again.
func TestReadAheadSmallFilesStragglers(t *testing.T) {
	x := newSmallFixture(t, 100, 4096)
	for i := range 100 {
		if i < 40 || i > 43 {
			x.openSmall(i)
		}
	}
	started := x.fs.ahead.started.Load()
	for i := 40; i <= 43; i++ {
		x.openSmall(i)
	}
	assert.Equal(t, started, x.fs.ahead.started.Load(), "read already")
}

// Readers that keep their handles open (mmap, a cache of open files) do
// not hold places once they have read: reading ahead goes on, in their
// directory and in others.
func TestReadAheadSmallFilesHandlesKeptOpen(t *testing.T) {
	x := newAheadFixture(t)
	for d := range 2 {
		for i := range 200 {
			x.b.put(fmt.Sprintf("d/%d/f%03d", d, i), make([]byte, 4096))
		}
		x.listPath(fmt.Sprintf("d/%d", d))
	}
	served := 0
	for i := range 200 {
		r, h := x.openPath(fmt.Sprintf("d/0/f%03d", i))
		op := &fuseops.ReadFileOp{Handle: h, Size: 4096, Dst: make([]byte, 4096)}
		require.NoError(t, x.fs.ReadFile(context.Background(), op))
		if r.ahead {
			served++
		}
	}
	assert.Greater(t, served, 190, "kept open")
	served = 0
	for i := range 200 {
		if x.readPath(fmt.Sprintf("d/1/f%03d", i), true).ahead {
			served++
		}
	}
	assert.Greater(t, served, 190, "another directory")
}

// A file waiting in an old version when its directory is listed with a
// new one is replaced by the new version.
func TestReadAheadSmallFilesNewVersionWhileWaiting(t *testing.T) {
	x := newSmallFixture(t, 100, 4096)
	for i := range 51 {
		x.openSmall(i)
	}
	old := x.openedAhead()
	for i := range 100 {
		x.b.put(smallName(i), make([]byte, 4096)) // new versions
	}
	x.fs.cache.invalidate("d")
	x.list()
	served := 0
	for i := range 100 {
		if x.openSmall(i).ahead {
			served++
		}
	}
	assert.Greater(t, served, 90)
	for _, r := range x.aheads[:len(old)] {
		// Closed in the background (never under the aheader's lock).
		assert.Eventually(t, r.isClosed, 5*time.Second, time.Millisecond, r.obj.Name)
	}
}

// ferry invalidate forgets the files opened ahead under its path: after
// `invalidate --data`, a waiting file's bytes would otherwise be served
// without going through the emptied disk cache (found by a review: a
// second `ferry warm` reported files it read as missing from the cache).
func TestInvalidateDropsFilesOpenedAhead(t *testing.T) {
	x := newSmallFixture(t, 100, 4096)
	for i := range 51 {
		x.openSmall(i)
	}
	waitingReaders := func() []ContentReader {
		x.fs.ahead.mu.Lock()
		defer x.fs.ahead.mu.Unlock()
		var rs []ContentReader
		for _, p := range x.fs.ahead.pending {
			rs = append(rs, p.r)
		}
		return rs
	}
	waiting := waitingReaders()
	require.NotEmpty(t, waiting)

	res, err := x.fs.invalidate(t.Context(), "elsewhere")
	require.NoError(t, err)
	assert.Zero(t, res.CacheItems, "nothing under another path")
	assert.Len(t, waitingReaders(), len(waiting))

	res, err = x.fs.invalidate(t.Context(), "d")
	require.NoError(t, err)
	assert.GreaterOrEqual(t, res.CacheItems, len(waiting))
	assert.Empty(t, waitingReaders())
	for _, r := range waiting {
		assert.True(t, r.(*endReader).isClosed(), r.(*endReader).obj.Name)
	}
	x.list()
	assert.False(t, x.openSmall(51).ahead, "the next open fetches again")
}

// Without versions, a rewrite of the same size is told by Updated.
func TestSameObject(t *testing.T) {
	a := bucket.Object{Name: "a", Size: 3, Updated: time.Unix(1, 0)}
	b := a
	assert.True(t, sameObject(a, b))
	b.Updated = time.Unix(2, 0)
	assert.False(t, sameObject(a, b))
	a.Version, b.Version = "v1", "v1"
	assert.True(t, sameObject(a, b), "a version says it all")
	b.Version = "v2"
	assert.False(t, sameObject(a, b))
}

// forgetFiles drops every kernel reference to the file inodes, as the
// kernel does under memory pressure (their pages go with them).
func (x *aheadFixture) forgetFiles() {
	x.fs.mu.Lock()
	defer x.fs.mu.Unlock()
	for id, in := range x.fs.inodes {
		if !in.dir {
			x.fs.forget(id, in.lookups)
		}
	}
}

// A second pass through a directory of more than 17 files begins a new
// run, once the kernel has forgotten the inodes or the files have new
// versions (nothing of them can be in its page cache then).
func TestReadAheadSmallFilesSecondPassAfterChange(t *testing.T) {
	for _, n := range []int{20, 33, 60} {
		for _, change := range []string{"forgotten", "rewritten"} {
			x := newSmallFixture(t, n, 4096)
			for i := range n {
				x.openSmall(i)
			}
			if change == "forgotten" {
				x.forgetFiles()
			} else {
				for i := range n {
					x.b.put(smallName(i), []byte("new version, new size"))
				}
				x.fs.cache.invalidate("d")
				x.list()
			}
			served := 0
			for i := range n {
				if x.openSmall(i).ahead {
					served++
				}
			}
			assert.Greater(t, served, n/2, "%d files, %s", n, change)
		}
	}
}

// 8 readers from a shared counter, with stalls and probes, for 3 epochs,
// with and without the kernel forgetting the inodes in between: every
// file opened ahead is taken, but the one after the last file.
func TestReadAheadSmallFilesStress(t *testing.T) {
	for trial := range 4 {
		x := newSmallFixture(t, 300, 4096)
		var served atomic.Int64
		for epoch := range 3 {
			var next atomic.Int64
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rnd := rand.New(rand.NewPCG(uint64(trial), uint64(w*10+epoch)))
					for i := int(next.Add(1) - 1); i < 300; i = int(next.Add(1) - 1) {
						if rnd.IntN(4) == 0 {
							x.readPath(smallName(i), false) // a probe
						}
						r, h := x.openPath(smallName(i))
						if rnd.IntN(20) == 0 {
							time.Sleep(time.Duration(rnd.IntN(3000)) * time.Microsecond)
						}
						op := &fuseops.ReadFileOp{Handle: h, Size: 4096, Dst: make([]byte, 4096)}
						if err := x.fs.ReadFile(context.Background(), op); err != nil {
							t.Error(err)
						}
						x.release(h)
						if r.ahead {
							served.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if trial%2 == 0 {
				x.forgetFiles()
			}
		}
		if trial%2 == 0 {
			assert.Greater(t, served.Load(), int64(600), "trial %d: 3 epochs, the inodes forgotten after each", trial)
		} else {
			assert.Greater(t, served.Load(), int64(200), "trial %d", trial)
		}
		assert.Equal(t, x.fs.ahead.started.Load(), x.fs.ahead.taken.Load()+uint64(x.pending()))
		x.fs.ahead.mu.Lock()
		for _, p := range x.fs.ahead.pending {
			assert.Equal(t, "d/small", p.path, "trial %d: waiting for nobody", trial)
		}
		x.fs.ahead.mu.Unlock()
	}
}

// A file the disk cache holds whole is not opened ahead at all.
func TestReadAheadSmallFilesCachedSkipped(t *testing.T) {
	x := newSmallFixture(t, 40, 4096)
	x.fs.cached = func(obj bucket.Object) bool { return obj.Name == smallName(5) }
	for i := range 4 {
		x.openSmall(i)
	}
	want := slices.DeleteFunc(smallNames(4, 4+smallAhead), func(n string) bool { return n == smallName(5) })
	assert.Equal(t, want, x.openedAhead())
}
