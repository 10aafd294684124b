package file

import (
	"cmp"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"ferry/bucket"
)

// coldFile writes size random bytes to name under a new root, flushes
// them and drops them from the page cache, so that what a read brings
// back in is what it made the kernel read from the disk. It skips where
// the temporary directory keeps its pages (tmpfs).
func coldFile(t *testing.T, name string, size int) (b *Bucket, path string, data []byte) {
	t.Helper()
	dir := t.TempDir()
	path = filepath.Join(dir, name)
	data = make([]byte, size)
	rand.Read(data)
	require.NoError(t, os.WriteFile(path, data, 0o644))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Sync())
	require.NoError(t, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED))
	if n := residentBytes(t, path); n != 0 {
		t.Skipf("%s keeps %d bytes in the page cache after POSIX_FADV_DONTNEED (tmpfs?): nothing to count", dir, n)
	}
	b, _ = newBucket(t, dir)
	return b, path, data
}

// residentBytes is how much of path is in the page cache, read or being
// read (cachestat(2)).
func residentBytes(t *testing.T, path string) int64 {
	return residentIn(t, path, 0, 0)
}

// residentIn is how much of [off, off+n) of path is in the page cache (n
// 0: to the end). Other tests may drop the page cache at any time
// (drop_caches), so a count can only be trusted to be no more than what
// was read: tests assert what lies outside the ranges read is 0, and
// what lies inside is at most the range.
func residentIn(t *testing.T, path string, off, n int64) int64 {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var st unix.Cachestat_t
	err = unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{Off: uint64(off), Len: uint64(n)}, &st, 0)
	if errors.Is(err, unix.ENOSYS) {
		t.Skip("no cachestat(2) in this kernel (before 6.5): nothing to count with")
	}
	require.NoError(t, err)
	return int64(st.Cache) * int64(os.Getpagesize())
}

// requireOnly asserts that of path's size bytes only pages within the
// page-rounded ranges are in the page cache.
func requireOnly(t *testing.T, path string, size int64, ranges [][2]int64, msg string) {
	t.Helper()
	page := int64(os.Getpagesize())
	at := int64(0)
	for _, rg := range ranges {
		start, limit := rg[0]/page*page, (rg[1]+page-1)/page*page
		if start > at {
			require.Zero(t, residentIn(t, path, at, start-at), "%s: bytes in [%d, %d), outside what was read", msg, at, start)
		}
		require.LessOrEqual(t, residentIn(t, path, start, limit-start), limit-start, msg)
		at = max(at, limit)
	}
	if at < size {
		require.Zero(t, residentIn(t, path, at, size-at), "%s: bytes in [%d, %d), past what was read", msg, at, size)
	}
}

// readBlocks reads [start, limit) of name as readahead's fetcher does: a
// ranged reader read 64 KiB (a cache block) at a time.
func readBlocks(t *testing.T, b *Bucket, name string, start, limit int64) []byte {
	t.Helper()
	r, err := b.NewRangeReader(t.Context(), &bucket.ReadRequest{Name: name,
		Range: bucket.ByteRange{Start: uint64(start), Limit: uint64(limit)}})
	require.NoError(t, err)
	defer r.Close()
	out := make([]byte, 0, limit-start)
	block := make([]byte, 64<<10)
	for int64(len(out)) < limit-start {
		n, err := io.ReadFull(r, block[:min(int64(len(block)), limit-start-int64(len(out)))])
		require.NoError(t, err)
		out = append(out, block[:n]...)
	}
	return out
}

// TestRangedReadReadsOnlyItsRange counts the bytes a ranged read brings
// into the page cache from a cold file: the range, and not the kernel's
// readahead past its end (read_ahead_kb, 8 MiB on some disks), which a
// reader of sparse random ranges pays for and never uses.
func TestRangedReadReadsOnlyItsRange(t *testing.T) {
	const size = 48 << 20
	b, path, data := coldFile(t, "obj", size)
	ranges := []struct{ start, limit int64 }{
		{20 << 20, 21 << 20},             // a random 1 MiB read
		{3<<20 + 4096, 3<<20 + 4096 + 5}, // a few bytes
		{30 << 20, 46 << 20},             // a long range, past any single advice
	}
	var read [][2]int64
	for _, rg := range ranges {
		got := readBlocks(t, b, "obj", rg.start, rg.limit)
		require.Equal(t, data[rg.start:rg.limit], got)
		read = append(read, [2]int64{rg.start, rg.limit})
		slices.SortFunc(read, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
		requireOnly(t, path, size, read, fmt.Sprintf("page cache after reading %v", rg))
	}
}

// devOf is the device path's file is on.
func devOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st))
	return st.Dev
}

// TestRangedReadAsksAhead checks that a long range has its pages asked
// for ahead of the reads, as the kernel's readahead would have had them,
// up to the device's read_ahead_kb past the read and no further.
func TestRangedReadAsksAhead(t *testing.T) {
	const size = 40 << 20
	b, path, data := coldFile(t, "obj", size)
	ahead := b.aheads.of(devOf(t, path))
	if ahead == 0 || ahead > 8<<20 {
		t.Skipf("read_ahead_kb of the temporary directory's disk is %d KiB", ahead>>10)
	}
	const start, limit = 4 << 20, 36 << 20
	r, err := b.NewRangeReader(t.Context(), &bucket.ReadRequest{Name: "obj",
		Range: bucket.ByteRange{Start: start, Limit: limit}})
	require.NoError(t, err)
	defer r.Close()
	block := make([]byte, 64<<10)
	_, err = io.ReadFull(r, block)
	require.NoError(t, err)
	require.Equal(t, data[start:start+len(block)], block)
	// After the first block, the next read_ahead_kb are asked for (in the
	// page cache or on their way), and nothing else.
	requireOnly(t, path, size, [][2]int64{{start, start + int64(len(block)) + ahead}}, "after the first block")
	require.Greater(t, residentIn(t, path, start+int64(len(block)), ahead), ahead/2,
		"the next read_ahead_kb after the first block are asked for")
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Equal(t, data[start+len(block):limit], rest)
	requireOnly(t, path, size, [][2]int64{{start, limit}}, "the range, and nothing past its end")
}

// TestRangedReadWithoutReadahead reads a range where the reader asks for
// nothing ahead (read_ahead_kb 0 on the device): the kernel's readahead
// stays off for the descriptor all the same, so only the range is read,
// though the disk's own read_ahead_kb is larger.
func TestRangedReadWithoutReadahead(t *testing.T) {
	b, path, data := coldFile(t, "obj", 24<<20)
	b.aheads.mu.Lock()
	b.aheads.dev = map[uint64]int64{devOf(t, path): 0}
	b.aheads.mu.Unlock()
	got := readBlocks(t, b, "obj", 8<<20, 9<<20)
	require.Equal(t, data[8<<20:9<<20], got)
	requireOnly(t, path, 24<<20, [][2]int64{{8 << 20, 9 << 20}}, "without readahead")
}
