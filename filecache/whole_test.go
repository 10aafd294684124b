package filecache

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/ranges"
)

// wholeOK calls Whole and Check and, if the file passes, compares every
// byte of it; then releases it. Returns whether it passed.
func wholeOK(t *testing.T, s *Store, o Key) bool {
	t.Helper()
	w, ok := s.Whole(o)
	if !ok {
		assert.Nil(t, w)
		return false
	}
	defer w.Release()
	if !w.Check() {
		return false
	}
	got, err := io.ReadAll(io.NewSectionReader(w.File(), 0, 1<<40))
	require.NoError(t, err)
	require.Equal(t, blocksData(o, 0, numBlocks(o.Size, testBS), testBS), got, "Whole(%s) handed out other bytes", o.Name)
	return true
}

// corruptAt writes a byte into o's data file that differs from the one
// there, as another process (or a bad disk write) would.
func corruptAt(t *testing.T, s *Store, o Key, off int64) {
	t.Helper()
	f, err := os.OpenFile(s.pathFor(s.keyFor(o)), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, 1)
	_, err = f.ReadAt(b, off)
	require.NoError(t, err)
	b[0] ^= 0x5a
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
}

func TestWholeOnlyWhenEveryBlockIsCached(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir()}, hooks{})
	o := obj("o", 3*testBS+100) // a short last block
	assert.False(t, wholeOK(t, s, o), "nothing cached")
	require.Equal(t, 3, s.WriteBlocks(o, 0, blocksData(o, 0, 3, testBS)))
	assert.False(t, wholeOK(t, s, o), "the last block is missing")
	require.Equal(t, 1, s.WriteBlocks(o, 3, blocksData(o, 3, 1, testBS)))
	assert.True(t, wholeOK(t, s, o))
	assert.EqualValues(t, 1, s.Stats().WholeChecks)
	assert.EqualValues(t, o.Size, s.Stats().WholeCheckedBytes)

	// Unchanged since: handed out without reading it again.
	assert.True(t, wholeOK(t, s, o))
	assert.EqualValues(t, 1, s.Stats().WholeChecks)

	// Another version of the name is another file.
	o2 := Key{Name: "o", Size: o.Size, Version: "v2"}
	assert.False(t, wholeOK(t, s, o2))
	assert.False(t, wholeOK(t, s, Key{Name: "empty", Version: "v1"}))
	s.checkInvariants(t)

	// A new process in the same boot trusts the check (checked.go);
	// after a reboot it checks again.
	require.NoError(t, s.Close())
	assert.False(t, wholeOK(t, s, o), "closed")
	s = openT(t, Config{Dir: s.root}, hooks{})
	assert.True(t, wholeOK(t, s, o))
	assert.Zero(t, s.Stats().WholeChecks)
	require.NoError(t, s.Close())
	s = openT(t, Config{Dir: s.root}, hooks{bootID: func() string { return "another boot" }})
	assert.True(t, wholeOK(t, s, o))
	assert.EqualValues(t, 1, s.Stats().WholeChecks)
}

// A byte changed in the data file after it was checked is found at the
// next Whole, even with its mtime put back: the block is dropped (so the
// reader's own read fetches it again), counted, and nothing is handed out.
func TestWholeChecksAgainAfterTheFileChanged(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir()}, hooks{})
	o := obj("o", 5*testBS)
	require.Equal(t, 5, s.WriteBlocks(o, 0, blocksData(o, 0, 5, testBS)))
	require.True(t, wholeOK(t, s, o))

	path := s.pathFor(s.keyFor(o))
	st, err := os.Stat(path)
	require.NoError(t, err)
	// A kernel without fine-grained timestamps (before 6.13) moves the
	// ctime only at its next clock tick; let one pass, so the write below
	// is seen there too.
	time.Sleep(20 * time.Millisecond)
	corruptAt(t, s, o, 2*testBS+7)
	require.NoError(t, os.Chtimes(path, time.Time{}, st.ModTime()))

	assert.False(t, wholeOK(t, s, o))
	assert.False(t, s.HasBlock(o, 2), "the bad block is dropped")
	assert.True(t, s.HasBlock(o, 1))
	assert.True(t, s.HasBlock(o, 3))
	assert.EqualValues(t, 1, s.Stats().CorruptBlocks)
	assert.False(t, wholeOK(t, s, o), "not whole any more")
	s.checkInvariants(t)

	require.Equal(t, 1, s.WriteBlocks(o, 2, blocksData(o, 2, 1, testBS)))
	assert.True(t, wholeOK(t, s, o), "whole again once the block is fetched again")
	assert.EqualValues(t, 2, s.Stats().WholeChecks)
	s.checkInvariants(t)
}

// appendTo appends to o's data file behind the store's back.
func appendTo(t *testing.T, s *Store, o Key, more string) {
	t.Helper()
	f, err := os.OpenFile(s.pathFor(s.keyFor(o)), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(more)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// A file cut short behind the store's back is never handed out: its
// length is the object's only when whole.
func TestWholeRefusesATruncatedFile(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir()}, hooks{})
	o := obj("o", 4*testBS)
	require.Equal(t, 4, s.WriteBlocks(o, 0, blocksData(o, 0, 4, testBS)))
	require.NoError(t, os.Truncate(s.pathFor(s.keyFor(o)), 2*testBS))
	assert.False(t, wholeOK(t, s, o))
	// The blocks past the end are dropped at once.
	assert.False(t, s.HasBlock(o, 2))
	assert.False(t, s.HasBlock(o, 3))
	assert.True(t, readOK(t, s, o, 1))
	assert.EqualValues(t, 2, s.Stats().CorruptBlocks)
	s.checkInvariants(t)

	// One appended to is not handed out either (the kernel would read
	// past the object's end), and its blocks stay.
	p := obj("p", 2*testBS)
	require.Equal(t, 2, s.WriteBlocks(p, 0, blocksData(p, 0, 2, testBS)))
	appendTo(t, s, p, "more")
	assert.False(t, wholeOK(t, s, p))
	assert.True(t, readOK(t, s, p, 1))
}

// A file handed out is read for as long as it is held: eviction passes
// it by (the cache stays within its limit by storing less), and if it is
// dropped all the same, its file stays, and counts against the limit,
// until released.
func TestWholeHoldsTheFileAgainstEviction(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Config{Dir: dir, MaxSize: 6 * testBS}, hooks{})
	a, b := obj("a", 4*testBS), obj("b", 4*testBS)
	require.Equal(t, 4, s.WriteBlocks(a, 0, blocksData(a, 0, 4, testBS)))
	aPath := s.pathFor(s.keyFor(a))
	w, ok := s.Whole(a)
	require.True(t, ok)
	require.True(t, w.Check())

	// b does not push a out: only 2 of its blocks fit beside it.
	assert.Equal(t, 2, s.WriteBlocks(b, 0, blocksData(b, 0, 4, testBS)))
	assert.True(t, s.HasBlock(a, 0), "a held file was evicted")
	assert.LessOrEqual(t, du(t, dir), int64(6*testBS))

	// Dropped while held: the file stays, and still counts.
	n, _ := s.Drop(func(name string) bool { return name == "a" })
	require.Equal(t, 1, n)
	assert.False(t, s.HasBlock(a, 0))
	_, err := os.Stat(aPath)
	require.NoError(t, err, "a held file is not unlinked")
	got := make([]byte, 4*testBS)
	_, err = w.File().ReadAt(got, 0)
	require.NoError(t, err)
	assert.Equal(t, blocksData(a, 0, 4, testBS), got)
	assert.True(t, w.Check(), "the held file's bytes are still right")
	assert.Zero(t, s.WriteBlocks(b, 2, blocksData(b, 2, 2, testBS)), "the dropped file still takes its room")
	assert.LessOrEqual(t, du(t, dir), int64(6*testBS))

	w.Release()
	w.Release() // once only
	_, err = os.Stat(aPath)
	assert.ErrorIs(t, err, os.ErrNotExist, "unlinked once released")
	assert.Equal(t, 2, s.WriteBlocks(b, 2, blocksData(b, 2, 2, testBS)), "its room is free once released")
	assert.False(t, wholeOK(t, s, a))
	require.NoError(t, s.flush())
	s.checkInvariants(t)
	assert.Equal(t, du(t, dir), s.Stats().UsedBytes)
}

// Two holds of one entry, dropped: its bytes count until the last is
// released, once; then the name can be cached again.
func TestWholeTwoHoldsDropped(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Config{Dir: dir, MaxSize: 8 * testBS}, hooks{})
	a, b := obj("a", 4*testBS), obj("b", 4*testBS)
	require.Equal(t, 4, s.WriteBlocks(a, 0, blocksData(a, 0, 4, testBS)))
	w1, ok := s.Whole(a)
	require.True(t, ok)
	w2, ok := s.Whole(a)
	require.True(t, ok)
	require.True(t, w1.Check())
	n, _ := s.Drop(func(name string) bool { return name == "a" })
	require.Equal(t, 1, n)
	assert.Zero(t, s.WriteBlocks(a, 0, blocksData(a, 0, 4, testBS)), "not cached again while its file is held")
	w1.Release()
	assert.Equal(t, 4, s.WriteBlocks(b, 0, blocksData(b, 0, 4, testBS)))
	assert.Zero(t, s.WriteBlocks(a, 0, blocksData(a, 0, 4, testBS)), "no room: a's file still counts")
	assert.LessOrEqual(t, du(t, dir), int64(8*testBS))
	w2.Release()
	require.NoError(t, s.flush())
	assert.Equal(t, 4, s.WriteBlocks(a, 0, blocksData(a, 0, 4, testBS)), "cached again once released")
	assert.True(t, wholeOK(t, s, a))
	require.NoError(t, s.flush())
	s.checkInvariants(t)
	assert.Equal(t, du(t, dir), s.Stats().UsedBytes)
}

// A file written while Check reads it is not passed, even if the bytes
// already read were changed (their CRCs were right when read).
func TestWholeWrittenDuringTheCheck(t *testing.T) {
	var s *Store
	o := obj("o", 200*testBS) // several check buffers
	h := hooks{}
	h.duringCheck = func() {
		s.hooks.duringCheck = nil
		corruptAt(t, s, o, 5) // in the first buffer, read already
		// Make the change show in the stamp on a kernel whose ctime
		// moves only at clock ticks (before 6.13) too.
		require.NoError(t, os.Chtimes(s.pathFor(s.keyFor(o)), time.Time{}, time.Unix(1e9, 0)))
	}
	s = openT(t, Config{Dir: t.TempDir(), MaxSize: 1 << 20}, h)
	require.Equal(t, 200, s.WriteBlocks(o, 0, blocksData(o, 0, 200, testBS)))
	w, ok := s.Whole(o)
	require.True(t, ok)
	assert.False(t, w.Check())
	w.Release()
	assert.False(t, wholeOK(t, s, o), "the next check finds the bad block")
	assert.False(t, s.HasBlock(o, 0))
	assert.EqualValues(t, 1, s.Stats().CorruptBlocks)
}

// checkAsRead hands o out, asks for its reads to check it, and gives it
// back; it returns whether o was Checked before.
func checkAsRead(t *testing.T, s *Store, o Key) bool {
	t.Helper()
	w, ok := s.Whole(o)
	require.True(t, ok)
	defer w.Release()
	checked := w.Checked()
	w.CheckAsRead()
	return checked
}

// isChecked reports Checked of o, handed out whole.
func isChecked(t *testing.T, s *Store, o Key) bool {
	t.Helper()
	w, ok := s.Whole(o)
	if !ok {
		return false
	}
	defer w.Release()
	return w.Checked()
}

// Reads through the store that cover a file asked to be checked by
// them (in runs and single blocks, in any order, some twice) leave it
// Checked: the next Check reads nothing. Reads before the request do
// not count, nor do they without one.
func TestCheckAsRead(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir()}, hooks{})
	o := obj("o", 6*testBS+10)
	require.Equal(t, 7, s.WriteBlocks(o, 0, blocksData(o, 0, 7, testBS)))
	for i := range int64(7) {
		require.True(t, readOK(t, s, o, i))
	}
	assert.False(t, isChecked(t, s, o), "read whole, but not asked to count")

	assert.False(t, checkAsRead(t, s, o))
	p := make([]byte, 4*testBS)
	ok := make([]bool, 4)
	require.Equal(t, 4, s.ReadBlocks(o, 2, p, ok))
	require.True(t, readOK(t, s, o, 6))
	require.True(t, readOK(t, s, o, 2))
	require.True(t, readOK(t, s, o, 0))
	assert.False(t, isChecked(t, s, o), "block 1 not read yet")
	require.True(t, readOK(t, s, o, 1))
	assert.True(t, isChecked(t, s, o))
	assert.EqualValues(t, 1, s.Stats().ReadChecks)

	require.True(t, wholeOK(t, s, o))
	assert.Zero(t, s.Stats().WholeChecks, "Check read nothing")
	s.checkInvariants(t)

	// Written to since (the same byte put back): no longer Checked, and
	// Check reads it whole again.
	time.Sleep(20 * time.Millisecond) // a ctime tick on kernels before 6.13
	corruptAt(t, s, o, 5)
	corruptAt(t, s, o, 5)
	assert.False(t, isChecked(t, s, o))
	require.True(t, wholeOK(t, s, o))
	assert.EqualValues(t, 1, s.Stats().WholeChecks)

	// A new process in the same boot knows it (checked.go); one after a
	// reboot does not.
	require.NoError(t, s.Close())
	s = openT(t, Config{Dir: s.root}, hooks{})
	assert.True(t, isChecked(t, s, o))
	require.NoError(t, s.Close())
	s = openT(t, Config{Dir: s.root}, hooks{bootID: func() string { return "another boot" }})
	assert.False(t, isChecked(t, s, o))
}

// A file written to while its reads check it is not Checked when they
// are done (the write came after some of them), even if the write put
// the same byte back; reads covering it again, unchanged, check it.
func TestCheckAsReadSeesAWriteBetweenReads(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir()}, hooks{})
	o := obj("o", 4*testBS)
	require.Equal(t, 4, s.WriteBlocks(o, 0, blocksData(o, 0, 4, testBS)))
	checkAsRead(t, s, o)
	require.True(t, readOK(t, s, o, 0))
	require.True(t, readOK(t, s, o, 1))
	// A kernel without fine-grained timestamps (before 6.13) moves the
	// ctime only at its next clock tick.
	time.Sleep(20 * time.Millisecond)
	corruptAt(t, s, o, 7)
	corruptAt(t, s, o, 7) // the same byte back
	require.True(t, readOK(t, s, o, 2))
	require.True(t, readOK(t, s, o, 3))
	assert.False(t, isChecked(t, s, o))
	assert.Zero(t, s.Stats().ReadChecks)

	for i := range int64(4) {
		require.True(t, readOK(t, s, o, i))
	}
	assert.True(t, isChecked(t, s, o), "read whole again since the write")
	assert.EqualValues(t, 1, s.Stats().ReadChecks)
	s.checkInvariants(t)
}

// A bad block found by the reads ends the check: the block is dropped,
// the file is no longer whole, and once it is whole again its reads
// count only if asked again.
func TestCheckAsReadEndsAtABadBlock(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir()}, hooks{})
	o := obj("o", 4*testBS)
	require.Equal(t, 4, s.WriteBlocks(o, 0, blocksData(o, 0, 4, testBS)))
	checkAsRead(t, s, o)
	require.True(t, readOK(t, s, o, 0))
	corruptAt(t, s, o, 2*testBS+1)
	assert.False(t, readOK(t, s, o, 2))
	assert.EqualValues(t, 1, s.Stats().CorruptBlocks)
	require.Equal(t, 1, s.WriteBlocks(o, 2, blocksData(o, 2, 1, testBS)))
	for range 2 {
		for i := range int64(4) {
			require.True(t, readOK(t, s, o, i))
		}
	}
	assert.False(t, isChecked(t, s, o))

	checkAsRead(t, s, o)
	for i := range int64(4) {
		require.True(t, readOK(t, s, o, i))
	}
	assert.True(t, isChecked(t, s, o))
	s.checkInvariants(t)
}

// Readers at once, each reading blocks in its own order: the file ends
// up Checked, once (run with -race).
func TestCheckAsReadConcurrentReaders(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir()}, hooks{})
	const n = 64
	o := obj("o", n*testBS)
	require.Equal(t, n, s.WriteBlocks(o, 0, blocksData(o, 0, n, testBS)))
	checkAsRead(t, s, o)
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			for _, i := range rng.Perm(n) {
				p := make([]byte, 2*testBS)
				ok := make([]bool, 2)
				k := min(int64(i), n-2)
				if s.ReadBlocks(o, k, p, ok) != 2 || !bytes.Equal(p, blocksData(o, k, 2, testBS)) {
					t.Errorf("read of blocks %d, %d failed", k, k+1)
				}
			}
		}()
	}
	wg.Wait()
	assert.True(t, isChecked(t, s, o))
	assert.EqualValues(t, 1, s.Stats().ReadChecks)
	s.checkInvariants(t)
}

// The stamp a read check ends with is compared with one taken before its
// first read: a write right after a read (of the block just found good)
// leaves the file unchecked.
func TestCheckAsReadStampBeforeTheRead(t *testing.T) {
	var s *Store
	o := obj("o", 2*testBS)
	var once sync.Once
	s = openT(t, Config{Dir: t.TempDir()}, hooks{afterRead: func() {
		once.Do(func() {
			time.Sleep(20 * time.Millisecond) // a ctime tick on kernels before 6.13
			corruptAt(t, s, o, 9)
		})
	}})
	require.Equal(t, 2, s.WriteBlocks(o, 0, blocksData(o, 0, 2, testBS)))
	checkAsRead(t, s, o)
	require.True(t, readOK(t, s, o, 0), "read before the write")
	require.True(t, readOK(t, s, o, 1))
	assert.False(t, isChecked(t, s, o), "block 0 changed after it was read")
	assert.False(t, wholeOK(t, s, o))
	assert.EqualValues(t, 1, s.Stats().CorruptBlocks)
}

// A data file longer than its object (appended to behind the store's
// back) is never Checked, whatever its reads found: the kernel would
// read past the object's end.
func TestCheckAsReadRefusesALongerFile(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir()}, hooks{})
	o := obj("o", 2*testBS)
	require.Equal(t, 2, s.WriteBlocks(o, 0, blocksData(o, 0, 2, testBS)))
	appendTo(t, s, o, "more")
	checkAsRead(t, s, o)
	for range 2 {
		require.True(t, readOK(t, s, o, 0))
		require.True(t, readOK(t, s, o, 1))
	}
	assert.False(t, isChecked(t, s, o))
	assert.False(t, wholeOK(t, s, o))
	s.checkInvariants(t)
}

// Unready names the blocks missing, or, while reads check a whole file,
// those not yet counted, as merged byte ranges, within a bound; reading
// them makes the object whole, then checked.
func TestUnready(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir()}, hooks{})
	o := obj("o", 9*testBS+100) // 10 blocks, the last short
	assert.Nil(t, s.Unready(o, 1<<30), "nothing cached")
	require.Equal(t, 7, s.WriteBlocks(o, 1, blocksData(o, 1, 7, testBS)))
	assert.Equal(t, []ranges.ByteRange{{Start: 0, Limit: testBS}, {Start: 8 * testBS, Limit: 9*testBS + 100}}, s.Unready(o, 1<<30))
	assert.Equal(t, []ranges.ByteRange{{Start: 0, Limit: testBS}, {Start: 8 * testBS, Limit: 9*testBS + 100}}, s.Unready(o, 2*testBS+100))
	assert.Nil(t, s.Unready(o, 2*testBS+99), "more than max")
	require.Equal(t, 2, s.WriteBlocks(o, 8, blocksData(o, 8, 2, testBS)))
	require.Equal(t, 1, s.WriteBlocks(o, 0, blocksData(o, 0, 1, testBS)))
	assert.Nil(t, s.Unready(o, 1<<30), "whole, and no check asked for")

	checkAsRead(t, s, o)
	assert.Nil(t, s.Unready(o, 1<<30), "no read has started the check")
	require.True(t, readOK(t, s, o, 4))
	require.True(t, readOK(t, s, o, 5))
	assert.Equal(t, []ranges.ByteRange{{Start: 0, Limit: 4 * testBS}, {Start: 6 * testBS, Limit: 9*testBS + 100}}, s.Unready(o, 1<<30))
	for _, r := range s.Unready(o, 1<<30) {
		for i := int64(r.Start) / testBS; i*testBS < int64(r.Limit); i++ {
			require.True(t, readOK(t, s, o, i))
		}
	}
	assert.True(t, isChecked(t, s, o))
	assert.Nil(t, s.Unready(o, 1<<30))

	// Long runs of ready blocks are skipped a word at a time; the block
	// just past such a word is still seen.
	big := obj("big", 200*testBS)
	require.Equal(t, 64, s.WriteBlocks(big, 0, blocksData(big, 0, 64, testBS)))
	require.Equal(t, 135, s.WriteBlocks(big, 65, blocksData(big, 65, 135, testBS)))
	assert.Equal(t, []ranges.ByteRange{{Start: 64 * testBS, Limit: 65 * testBS}}, s.Unready(big, 1<<30))
	s.checkInvariants(t)
}

// A check asked for while another ends (its last block counted, its
// final stamp not yet taken) does not count the file a second time.
func TestCheckAsReadAskedWhileOneEnds(t *testing.T) {
	var s *Store
	o := obj("o", 3*testBS)
	var once sync.Once
	s = openT(t, Config{Dir: t.TempDir()}, hooks{readCheckEnding: func() {
		once.Do(func() {
			assert.False(t, checkAsRead(t, s, o), "not Checked yet")
			require.True(t, readOK(t, s, o, 1))
		})
	}})
	require.Equal(t, 3, s.WriteBlocks(o, 0, blocksData(o, 0, 3, testBS)))
	checkAsRead(t, s, o)
	for i := range int64(3) {
		require.True(t, readOK(t, s, o, i))
	}
	assert.True(t, isChecked(t, s, o))
	s.checkInvariants(t)
	for i := range int64(3) {
		require.True(t, readOK(t, s, o, i))
	}
	assert.EqualValues(t, 1, s.Stats().ReadChecks)
	s.checkInvariants(t)
}

// One read per byte: a reader of the whole file through the store, asked
// to check it (CheckAsRead), reads each byte of the data file once, and
// the file is then Checked: Check reads nothing more. CheckAsRead
// reports a check asked for before and not done; Check ends it.
func TestCheckAsReadReadsEachByteOnce(t *testing.T) {
	s := openT(t, Config{Dir: t.TempDir()}, hooks{})
	o := obj("o", 9*testBS+77)
	require.Equal(t, 10, s.WriteBlocks(o, 0, blocksData(o, 0, 10, testBS)))

	w, ok := s.Whole(o)
	require.True(t, ok)
	assert.False(t, w.Checked())
	assert.False(t, w.CheckAsRead(), "nothing asked before")
	assert.True(t, w.CheckAsRead(), "asked, not done")
	w.Release()

	// Sequential reads of 3 blocks, the last one short: every block once.
	for first := int64(0); first < 10; first += 3 {
		n := min(3, 10-first)
		p := make([]byte, s.spanOf(o, first, int(n)))
		okb := make([]bool, n)
		require.EqualValues(t, n, s.ReadBlocks(o, first, p, okb))
		require.Equal(t, blocksData(o, first, n, testBS), p)
	}
	assert.EqualValues(t, o.Size, s.Stats().HitBytes, "each byte read once")
	assert.EqualValues(t, 1, s.Stats().ReadChecks)

	w, ok = s.Whole(o)
	require.True(t, ok)
	assert.True(t, w.Checked())
	assert.True(t, w.Check())
	assert.Zero(t, s.Stats().WholeChecks, "Check read nothing")
	assert.Zero(t, s.Stats().WholeCheckedBytes)
	assert.False(t, w.CheckAsRead(), "the reads' check is done")
	w.Release()

	// A pending check ends with a Check that reads the file whole.
	time.Sleep(20 * time.Millisecond) // a ctime tick on kernels before 6.13
	corruptAt(t, s, o, 5)
	corruptAt(t, s, o, 5) // the same byte back
	w, ok = s.Whole(o)
	require.True(t, ok)
	assert.False(t, w.Checked(), "changed since")
	assert.True(t, w.CheckAsRead(), "asked above, not done")
	assert.True(t, w.Check())
	assert.EqualValues(t, 1, s.Stats().WholeChecks)
	assert.False(t, w.CheckAsRead(), "Check ended the pending one")
	w.Release()
	s.checkInvariants(t)
}
