package readahead

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/metadata"
)

// Reading ahead across files, large files (files.go), through the
// fixture of files_fixture_test.go.

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
	assert.Equal(t, uint64(4), x.fl.Stats().Started)
	assert.Equal(t, uint64(3), x.fl.Stats().Taken)

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

// listInBackground turns on the metadata cache's background listings
// after lookup misses (the default 3), as fs's directory prefetch was in
// the tests that turned it on.
func listInBackground(c *metadata.Config) { c.ListAfterMisses = 0 }

func TestReadAheadAcrossFilesNeedsTheListing(t *testing.T) {
	x := newAheadFixtureWith(t, listInBackground, "d/0", "d/1", "d/2", "d/3")
	x.open("0").end()
	assert.Empty(t, x.openedAhead(), "without a listing nothing is known to come next")
	require.Eventually(t, func() bool { _, ok := x.meta.Listing("d"); return ok }, 5*time.Second, time.Millisecond,
		"a file read to its end lists its directory")
	x.open("1").end()
	assert.Equal(t, []string{"d/2"}, x.openedAhead(), "from the next boundary on")
	x.open("2")
	x.meta.Invalidate("d")
	x.open("1").end()
	x.meta.Close() // wait for any listing
	_, ok := x.meta.Listing("d")
	assert.False(t, ok, "2 then 1: names going down start no listing")
	assert.Len(t, x.openedAhead(), 1)
}

// listed reports whether d has a fresh listing, once any listing that
// Files asked for has ended (in this fixture every ListSoon that is not
// made busy lists the directory).
func (x *aheadFixture) listed() bool {
	x.t.Helper()
	if x.dirs.listSoons.Load() > 0 {
		require.Eventually(x.t, func() bool { _, ok := x.meta.Listing("d"); return ok }, 5*time.Second, time.Millisecond)
	}
	_, ok := x.meta.Listing("d")
	return ok
}

// The first file opened in a directory, read on from its start, lists the
// directory in the background, so that its own end already opens the
// next file: listed at the end, it would come too late for that boundary.
// A probe lists nothing: a read or two at the start, or file(1)'s reads
// at the start and the end.
func TestReadAheadAcrossFilesFirstReadListsTheDirectory(t *testing.T) {
	const size = aheadListAfter + aheadListBand + 1<<20
	band := int64(aheadListAfter + 1<<20) // a read of one going on from the start
	fixture := func(t *testing.T) *aheadFixture {
		x := newAheadFixtureWith(t, listInBackground)
		for _, n := range []string{"d/0", "d/1", "d/2"} {
			x.put(n, make([]byte, size))
		}
		return x
	}

	t.Run("read on", func(t *testing.T) {
		x := fixture(t)
		r0, h := x.openH("0")
		x.read(h, 0)
		x.read(h, aheadListAfter-4096)
		assert.False(t, x.listed(), "a probe at the start lists nothing")
		x.read(h, band)
		require.Eventually(t, func() bool { _, ok := x.meta.Listing("d"); return ok }, 5*time.Second, time.Millisecond,
			"the first file opened, read on from its start, lists its directory")
		r0.end()
		assert.Equal(t, []string{"d/1"}, x.openedAhead(), "at its end the next file is opened ahead")
	})

	t.Run("probes", func(t *testing.T) {
		x := fixture(t)
		_, h := x.openH("0")
		x.read(h, 0)
		x.read(h, size-4096)
		assert.False(t, x.listed(), "nor does a read at the start and one at the end (file(1))")
		x.read(h, aheadListAfter+aheadListBand)
		assert.False(t, x.listed(), "nor one past the band")

		x = fixture(t)
		_, h = x.openH("0")
		x.read(h, band)
		x.read(h, 0)
		assert.False(t, x.listed(), "a read in the band counts only after one at the start")
		x.read(h, band+4096)
		assert.True(t, x.listed(), "the next one does")
	})

	t.Run("not the first", func(t *testing.T) {
		for _, c := range []struct {
			openFirst, name string
			first           int64
			msg             string
		}{
			{"", "0", 4096, "a file never read at its start lists nothing"},
			{"2", "1", 0, "nor does the second file opened"},
			{"", "small", 0, "nor does a small file (fetched whole by its first read)"},
		} {
			x := fixture(t)
			if c.openFirst != "" {
				x.open(c.openFirst)
			}
			_, h := x.openH(c.name)
			x.read(h, c.first)
			x.read(h, band)
			assert.False(t, x.listed(), c.msg)
		}
	})

	t.Run("listed already", func(t *testing.T) {
		x := fixture(t)
		x.list()
		lists := x.b.Stats().Lists
		_, h := x.openH("0")
		x.read(h, 0)
		x.read(h, band)
		x.meta.Close() // waits for any listing
		assert.Zero(t, x.dirs.listSoons.Load())
		assert.Equal(t, lists, x.b.Stats().Lists, "a directory listed already is not listed again")
	})

	// The listing budget busy: fixtureDirs.busy stands for fs's prefetch
	// semaphore taken whole.
	t.Run("budget busy", func(t *testing.T) {
		x := fixture(t)
		x.dirs.busy.Store(true)
		_, h := x.openH("0")
		x.read(h, 0)
		x.read(h, band)
		assert.False(t, x.listed(), "no slot free: dropped")
		x.dirs.busy.Store(false)
		x.read(h, band+4096)
		assert.True(t, x.listed(), "and tried again at the next read in the band")
	})
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
	x.fl.wait = 10 * time.Millisecond
	x.list()
	x.open("0")
	x.open("1").end()
	require.Len(t, x.openedAhead(), 1)
	ahead := x.ahead(0)
	require.Eventually(t, ahead.isClosed, 5*time.Second, time.Millisecond, "nobody opened it: closed")
	assert.Equal(t, uint64(1), x.fl.Stats().Unused)
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
	old := x.ahead(0).obj
	x.put("d/2", make([]byte, aheadMinSize))
	x.meta.Invalidate("d/2")
	r := x.open("2")
	assert.False(t, r.ahead, "a new version is not served by the old one's reader")
	assert.Equal(t, old.Size, r.obj.Size)
	assert.NotEqual(t, old.Version, r.obj.Version)
	require.Eventually(t, x.ahead(0).isClosed, 5*time.Second, time.Millisecond)
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
	st := x.fl.Stats()
	assert.Positive(t, st.Taken)
	assert.LessOrEqual(t, st.Started-st.Taken, uint64(aheadMax), "only the last round's may wait for nobody")
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
	// Held in its listing lookup (fs's cache lock held, before the move).
	entered, release := x.blockListing()
	done := make(chan struct{})
	go func() { x.fl.atEnd("d/1"); close(done) }()
	<-entered
	x.fl.take("d/2", bucket.Object{Name: "d/2"}) // the reader's open of 2
	close(release)
	<-done
	assert.Empty(t, x.openedAhead(), "the reader moved on to 2 first")

	// The reader's open of 2 while 2 is being opened ahead waits for that
	// and takes it: opened twice, it would be fetched twice.
	y := newAheadFixture(t, "d/0", "d/1", "d/2", "d/3")
	y.list()
	entered, release = y.blockOpenAhead()
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
	assert.False(t, y.ahead(0).isClosed())
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
	go func() { x.fl.atEnd("d/1"); close(done) }()
	<-entered
	x.fl.atEnd("d/1") // returns: 2 is being opened
	close(release)
	<-done
	assert.Len(t, x.openedAhead(), 1)
	assert.Equal(t, 1, x.pending())
}

// Close (fs's Destroy) while an open ahead runs: its reader is closed.
func TestReadAheadAcrossFilesDestroyDuringOpenAhead(t *testing.T) {
	x := newAheadFixture(t, "d/0", "d/1", "d/2", "d/3")
	x.list()
	entered, release := x.blockOpenAhead()
	x.open("0")
	r1 := x.open("1")
	done := make(chan struct{})
	go func() { r1.end(); close(done) }()
	<-entered
	x.fl.Close()
	close(release)
	<-done
	require.Len(t, x.openedAhead(), 1)
	assert.True(t, x.ahead(0).isClosed())
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
	assert.Zero(t, x.fl.Stats().Taken, "a probe does not count as taken")
	read, h := x.openH("2")
	assert.Same(t, probe, read, "the real read gets it")
	assert.Equal(t, uint64(1), x.fl.Stats().Taken)
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
	assert.Eventually(t, x.ahead(0).isClosed, 5*time.Second, time.Millisecond, "directory 0's file waited for nobody")
	assert.Equal(t, aheadMax, x.pending())
}

// Close (fs's Destroy) closes the files opened ahead, and nothing is
// opened ahead after it.
func TestReadAheadAcrossFilesStoppedByDestroy(t *testing.T) {
	x := newAheadFixture(t, "d/0", "d/1", "d/2", "d/3")
	x.list()
	x.open("0")
	x.open("1").end()
	require.Len(t, x.openedAhead(), 1)
	x.fl.Close()
	assert.True(t, x.ahead(0).isClosed())
	x.fl.atEnd("d/1")
	assert.Len(t, x.openedAhead(), 1, "nothing opens after Destroy")
}

// A large file opened ahead with nothing to fetch (its window cached
// already, or no memory free) is closed at once, not kept waiting.
func TestReadAheadAcrossFilesNothingToFetch(t *testing.T) {
	x := newAheadFixture(t, "d/0", "d/1", "d/2", "d/3")
	x.list()
	x.setOpenAhead(func(obj bucket.Object) Reader {
		r := x.newAhead(obj).(*endReader)
		r.markRead() // as Handle: not Unread
		return r
	})
	x.open("0")
	x.open("1").end()
	require.Len(t, x.openedAhead(), 1)
	assert.True(t, x.ahead(0).isClosed())
	assert.Zero(t, x.pending())
	assert.Zero(t, x.fl.Stats().Started)
}
