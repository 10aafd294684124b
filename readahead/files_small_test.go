package readahead

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/metadata"
)

// Reading ahead across files, runs of small files (files_small.go),
// through the fixture of files_fixture_test.go.

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
	assert.Equal(t, uint64(50-smallRunMin), x.fl.Stats().Taken)
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
		x.put(smallName(i), []byte("x"))
	}
	for i := range 10 {
		x.openSmall(i)
	}
	assert.Empty(t, x.openedAhead(), "no listing")

	y := newSmallFixtureWith(t, 100+50*smallRunsPerDir, 4096, nil, func(x *aheadFixture) {
		x.put(smallName(6), make([]byte, aheadMinSize))
		x.put(smallName(7), nil)
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

// At most smallAheadMax files wait for readers; a file of a run that
// ended gives its place up to a new one. (The byte bound, smallAheadBytes,
// is gone: its half of this test now bounds the count with maxSmall.)
func TestReadAheadSmallFilesBounds(t *testing.T) {
	x := newSmallFixture(t, 600, 4096)
	// Runs of 4 opens each, far apart, leave their files waiting.
	for run := 0; run < 12; run++ {
		for i := range 4 {
			x.openSmall(run*50 + i)
		}
		x.fl.mu.Lock()
		assert.LessOrEqual(t, x.fl.smallFiles, smallAheadMax)
		x.fl.mu.Unlock()
	}
	assert.Equal(t, smallAheadMax, x.pending())
	assert.Greater(t, len(x.openedAhead()), smallAheadMax, "ended runs gave their places up")
	assert.Positive(t, x.fl.Stats().Unused)

	// Room for fewer files than a run wants (as 64 MiB of 6 MiB files
	// were under the byte bound).
	const room = 10
	y := newSmallFixture(t, 20, 4096)
	y.fl.maxSmall = room
	for i := range 4 {
		y.openSmall(i)
	}
	assert.Len(t, y.openedAhead(), room)
	y.fl.mu.Lock()
	assert.LessOrEqual(t, y.fl.smallFiles, room)
	y.fl.mu.Unlock()
	// A probe of the next file (released unread) leaves it waiting again:
	// a file taken stays counted until its first read or release, so
	// nothing took its place meanwhile.
	r, h := y.openPath(smallName(4))
	assert.True(t, r.ahead)
	y.release(h)
	assert.False(t, r.isClosed(), "waits again")
	assert.True(t, y.openSmall(4).ahead, "the read takes it")
	assert.Len(t, y.openedAhead(), room, "its place is free only once it is released")
	y.openSmall(5)
	assert.Len(t, y.openedAhead(), room+1)
	y.fl.mu.Lock()
	assert.LessOrEqual(t, y.fl.smallFiles, room)
	y.fl.mu.Unlock()
}

// Random opens over several directories keep the books: smallFiles is
// the count of the small files waiting, within its bound. (It checked
// smallBytes too, against the byte bound, now gone; maxSmall makes the
// count bound bite instead.)
func TestReadAheadSmallFilesAccounting(t *testing.T) {
	const room = 16
	x := newAheadFixture(t)
	x.fl.maxSmall = room
	rnd := rand.New(rand.NewPCG(3, 4))
	for d := range 3 {
		for i := range 60 {
			x.put(fmt.Sprintf("d/%d/f%03d", d, i), make([]byte, 1+rnd.IntN(64<<10)))
		}
		x.listPath(fmt.Sprintf("d/%d", d))
	}
	check := func() {
		x.t.Helper()
		x.fl.mu.Lock()
		defer x.fl.mu.Unlock()
		n := 0
		for _, p := range x.fl.pending {
			if p.small {
				n++
			}
		}
		require.Equal(t, n, x.fl.smallFiles)
		require.LessOrEqual(t, n, room)
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
			r.markRead()
		}
		x.release(h)
		check()
	}
	assert.Positive(t, x.fl.Stats().Taken)
	x.fl.Close()
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

// Files being opened ahead when Files is closed (fs's Destroy) are
// closed, not left waiting.
func TestReadAheadSmallFilesStopWhileOpening(t *testing.T) {
	x := newSmallFixture(t, 40, 4096)
	entered, release := x.blockOpenAhead()
	for i := range 3 {
		x.openSmall(i)
	}
	done := make(chan struct{})
	go func() { x.openSmall(3); close(done) }()
	<-entered
	x.fl.Close()
	close(release)
	<-done
	names := x.openedAhead()
	require.Len(t, names, 1, "the rest given up unopened")
	assert.True(t, x.ahead(0).isClosed(), names[0])
	x.fl.mu.Lock()
	defer x.fl.mu.Unlock()
	assert.Zero(t, x.fl.smallFiles)
	assert.Empty(t, x.fl.pending)
}

// A file opened ahead with nothing to fetch (cached already, or no memory
// free) is closed at once, not kept waiting or counted.
func TestReadAheadSmallFilesNothingToFetch(t *testing.T) {
	x := newSmallFixture(t, 40, 4096)
	x.setOpenAhead(func(obj bucket.Object) Reader {
		r := x.newAhead(obj).(*endReader)
		if obj.Name == smallName(5) {
			r.markRead() // as Handle: not Unread
		}
		return r
	})
	for i := range 4 {
		x.openSmall(i)
	}
	require.Len(t, x.openedAhead(), smallAhead)
	assert.True(t, x.ahead(1).isClosed(), x.ahead(1).obj.Name)
	assert.Equal(t, smallAhead-1, x.pending())
	assert.Equal(t, uint64(smallAhead-1), x.fl.Stats().Started)
	x.fl.mu.Lock()
	assert.Equal(t, smallAhead-1, x.fl.smallFiles)
	x.fl.mu.Unlock()
	assert.False(t, x.openSmall(5).ahead)
}

// The small files waiting are bounded by their count, maxSmall
// (smallAheadMax unless a test sets it). This tested the byte bound,
// Config.AheadBytes, now gone: memory is the Fetcher's one budget, where
// files opened ahead take only free memory and never one another's
// (TestOpenAheadSmallObjectsTakeOnlyFreeMemory).
func TestReadAheadSmallFilesMemoryShare(t *testing.T) {
	x := newAheadFixture(t)
	x.fl.maxSmall = 4
	for i := range 40 {
		x.put(smallName(i), make([]byte, 256<<10))
	}
	x.list()
	for i := range 4 {
		x.openSmall(i)
	}
	assert.Equal(t, smallNames(4, 8), x.openedAhead())
	fl := NewFiles(fakeContent{x}, x.dirs, true)
	defer fl.Close()
	assert.Equal(t, smallAheadMax, fl.maxSmall, "the default")
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
	x.fl.take(smallName(5), x.put(smallName(5), make([]byte, 4096)))
	x.openSmall(3)
	want := slices.DeleteFunc(smallNames(4, 4+smallAhead), func(n string) bool { return n == smallName(5) })
	assert.Equal(t, want, x.openedAhead())
	x.fl.handleReleased(smallName(5))

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
	st := x.fl.Stats()
	assert.Equal(t, st.Started, st.Taken+uint64(x.pending()), "each taken or still waiting")
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
	x.fl.mu.Lock()
	assert.LessOrEqual(t, x.fl.largeLocked(), aheadMax)
	x.fl.mu.Unlock()
	assert.Equal(t, smallAhead, x.smallWaiting())
}

// A small file its readers went past by smallSpan entries without opening
// it gives its place up when a new one needs it. (Room is made scarce
// with maxSmall, where it was with a byte bound of as many 4 KiB files.)
func TestReadAheadSmallFilesSkippedGivesWay(t *testing.T) {
	x := newSmallFixture(t, 100, 4096)
	x.fl.maxSmall = smallAhead + 1 // and the one taken
	for i := range 4 {
		x.openSmall(i)
	}
	require.Equal(t, smallAhead, x.smallWaiting())
	var skipped *endReader
	for i, n := range x.openedAhead() {
		if n == smallName(10) {
			skipped = x.ahead(i)
		}
	}
	require.NotNil(t, skipped)
	for i := 4; i < 10+smallSpan+2; i++ {
		if i != 10 {
			x.openSmall(i)
		}
	}
	assert.Eventually(t, skipped.isClosed, 10*time.Second, time.Millisecond, "readers went past it")
	assert.Positive(t, x.fl.Stats().Unused)
	assert.Contains(t, x.openedAhead(), smallName(10+smallSpan+1+smallAhead))
}

// withClock gives the metadata cache clock as its clock.
func withClock(clock *fakeClock) func(c *metadata.Config) {
	return func(c *metadata.Config) { c.Now = clock.Now }
}

// OpenedAhead tells a file opened ahead, and not yet taken by an open,
// from one the cache held before its reader came (ferry warm reads the
// first kind, and counts only the second as already cached). This asked
// fs's Control.Cached, whose OpenedAhead is this answer; a stale listing
// was made by editing the cache's expiry, now by moving its clock.
func TestReadAheadSmallFilesCachedSaysOpenedAhead(t *testing.T) {
	clock := newFakeClock()
	x := newSmallFixtureWith(t, 40, 4096, withClock(clock), nil)
	resolve := func(i int) bucket.Object {
		t.Helper()
		e, err := x.meta.Resolve(context.Background(), smallName(i))
		require.NoError(t, err)
		return e.Obj
	}
	ahead := func(i int) bool {
		t.Helper()
		return x.fl.OpenedAhead(smallName(i), resolve(i))
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
	fl := x.fl
	fl.mu.Lock()
	fl.opening[smallName(last+1)] = true
	fl.mu.Unlock()
	got := make(chan bool, 1)
	obj := resolve(last + 1)
	go func() { got <- fl.OpenedAhead(smallName(last+1), obj) }()
	select {
	case <-got:
		t.Fatal("answered while the file was being opened ahead")
	case <-time.After(50 * time.Millisecond):
	}
	fl.mu.Lock()
	fl.doneOpeningLocked(smallName(last + 1)) // given up: not waiting
	fl.mu.Unlock()
	assert.False(t, <-got)

	assert.True(t, x.openSmall(first).ahead)
	assert.False(t, ahead(first), "taken by an open")

	// The name holds a newer version than the one opened ahead.
	x.put(smallName(last), []byte("rewritten"))
	clock.advance(2 * time.Minute) // the listing is stale
	x.list()
	assert.False(t, ahead(last), "opened ahead in another version")
	assert.True(t, ahead(last-1))

	// Without reading ahead, nothing is opened ahead.
	bare := NewFiles(fakeContent{x}, x.dirs, false)
	defer bare.Close()
	assert.False(t, bare.OpenedAhead(smallName(first+1), resolve(first+1)))
}

// Without a fresh listing nothing is fetched ahead. (The listing was made
// stale by editing the cache's expiry, now by moving its clock.)
func TestReadAheadSmallFilesStaleListing(t *testing.T) {
	clock := newFakeClock()
	x := newSmallFixtureWith(t, 40, 4096, withClock(clock), nil)
	clock.advance(2 * time.Minute)
	_, ok := x.meta.Listing("d")
	require.False(t, ok, "stale")
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

// A loader that probes each file before reading it, with room for fewer
// files than a run wants: the probe leaves the file waiting, and the read
// takes it. (Room was made scarce with 6 MiB files against the byte
// bound, 10 of them; now with maxSmall.)
func TestReadAheadSmallFilesProbeThenReadAtTheBound(t *testing.T) {
	x := newSmallFixture(t, 60, 4096)
	x.fl.maxSmall = 10
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
	entered, release := make(chan struct{}, 64), make(chan struct{})
	x.setOpenAhead(func(obj bucket.Object) Reader {
		if obj.Size < aheadMinSize {
			entered <- struct{}{}
			<-release
		}
		return x.newAhead(obj)
	})
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

// Readers that keep their handles open (mmap, a cache of open files) do
// not hold places once they have read: reading ahead goes on, in their
// directory and in others.
func TestReadAheadSmallFilesHandlesKeptOpen(t *testing.T) {
	x := newAheadFixture(t)
	for d := range 2 {
		for i := range 200 {
			x.put(fmt.Sprintf("d/%d/f%03d", d, i), make([]byte, 4096))
		}
		x.listPath(fmt.Sprintf("d/%d", d))
	}
	served := 0
	for i := range 200 {
		r, h := x.openPath(fmt.Sprintf("d/0/f%03d", i))
		x.read(h, 0)
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

// A file the disk cache holds whole is not opened ahead at all.
func TestReadAheadSmallFilesCachedSkipped(t *testing.T) {
	x := newSmallFixture(t, 40, 4096)
	x.setCached(func(obj bucket.Object) bool { return obj.Name == smallName(5) })
	for i := range 4 {
		x.openSmall(i)
	}
	want := slices.DeleteFunc(smallNames(4, 4+smallAhead), func(n string) bool { return n == smallName(5) })
	assert.Equal(t, want, x.openedAhead())
}

// Small objects opened ahead (as Files opens runs of small files) take
// only free memory: once those opened first fill the budget, the next
// ones fetch nothing, and are not Unread (Files closes them), rather than
// push the first ones out, whose readers still find their bytes in
// memory. A stream being read may still take that memory (victimLocked).
func TestOpenAheadSmallObjectsTakeOnlyFreeMemory(t *testing.T) {
	b := newFakeBucket()
	f := newTestFetcher(t, Config{Bucket: b, Cache: newMemCache(64 * KiB), MemoryLimit: 4 * MiB,
		BlockSize: 64 * KiB, PartSize: 1 * MiB, StartWindow: 2 * MiB, MaxWindow: 2 * MiB})
	openBatch := func(name string) []*Handle {
		var hs []*Handle
		for i := range 4 {
			h := f.openAhead(b.put(fmt.Sprintf("%s%d", name, i), 1*MiB))
			t.Cleanup(h.Close)
			hs = append(hs, h)
		}
		return hs
	}
	first := openBatch("first") // 4 MiB: the whole budget
	require.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.resident.Len() == 4
	}, 10*time.Second, time.Millisecond, "the first batch arrived and is kept")
	for _, h := range first {
		assert.True(t, h.Unread())
	}
	require.Len(t, b.requests(), 4)

	for _, h := range openBatch("second") {
		assert.False(t, h.Unread(), "%s: nothing fetched, nothing taken from the first batch", h.obj.Name)
	}
	assert.Len(t, b.requests(), 4, "the second batch fetched nothing")
	assert.Equal(t, int64(4*MiB), f.Stats().AheadBytes)

	sequential(t, b, first[0], 256*KiB)
	sequential(t, b, first[1], 256*KiB)
	st := f.Stats()
	assert.Len(t, b.requests(), 4, "the first batch's readers fetched nothing")
	assert.Equal(t, int64(2*MiB), st.PrefetchHitBytes, "from memory")
	assert.Zero(t, st.CacheHitBytes)

	// A stream being read takes what first2 and first3 hold.
	h := f.open(b.put("stream", 16*MiB))
	sequential(t, b, h, 256*KiB)
	h.Close()
	f.mu.Lock()
	for e := f.resident.Front(); e != nil; e = e.Next() {
		p := e.Value.(*part)
		assert.NotContains(t, []*Handle{first[2], first[3]}, p.owner, "kept for nobody while the stream read")
	}
	f.mu.Unlock()
	// What the stream took was in the cache too. (The stream itself may
	// read some of its own bytes back from the cache, when its parts go
	// to the next one before its reader gets there: count first2's.)
	hits := f.Stats().CacheHitBytes
	sequential(t, b, first[2], 256*KiB)
	assert.Len(t, b.ranges("first2"), 1, "fetched once")
	assert.Equal(t, int64(1*MiB), f.Stats().CacheHitBytes-hits)
}
