package fs

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

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

	// In a directory a few spans long, most opens of a shuffled reader
	// soon fall near the range opened so far, but they do not cover it.
	// (Without that check, 30 to 76 of 200 files were opened ahead, with
	// three seeds.)
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

	y := newSmallFixtureWith(t, 100, 4096, func(b *testBucket) {
		b.put(smallName(6), make([]byte, aheadMinSize))
		b.put(smallName(7), nil)
	})
	y.openSmall(10) // the kernel has f010's pages now
	y.openSmall(80) // a run of its own, far away
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
