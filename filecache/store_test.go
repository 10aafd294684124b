package filecache

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidateBlockSize(t *testing.T) {
	for _, bs := range []int64{4096, 65536, 128 << 10, 16 << 20} {
		assert.NoError(t, validateBlockSize(bs), bs)
	}
	for _, bs := range []int64{-4096, 1, 2048, 4095, 65535, 96 << 10, 32 << 20} {
		assert.ErrorIs(t, validateBlockSize(bs), ErrInvalid, bs)
		_, err := Open(Config{Dir: t.TempDir(), BlockSize: bs})
		assert.ErrorIs(t, err, ErrInvalid, bs)
	}
	_, err := Open(Config{Dir: ""})
	assert.ErrorIs(t, err, ErrInvalid)
}

func TestDefaults(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir})
	require.NoError(t, err)
	defer s.Close()
	assert.EqualValues(t, DefaultBlockSize, s.BlockSize())
	avail, _, err := realStatfs(dir)
	require.NoError(t, err)
	// 80% of free space: allow for other writers on the volume.
	assert.InDelta(t, 0.8*float64(avail), float64(s.Stats().LimitBytes), 0.01*float64(avail))
	fi, err := os.Stat(filepath.Join(dir, "v1"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
}

func TestReadWrite(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Config{Dir: dir}, hooks{})
	o := obj("train/../../etc/passwd", 5*testBS+100) // 6 blocks, the last 100 bytes

	p := make([]byte, testBS)
	assert.False(t, s.ReadBlock(o, 0, p))
	assert.False(t, s.HasBlock(o, 0))

	// Blocks 1..2 plus a partial third: the partial one is not stored.
	data := blocksData(o, 1, 3, testBS)
	assert.Equal(t, 2, s.WriteBlocks(o, 1, data[:2*testBS+10]))
	assert.Equal(t, 1, s.WriteBlocks(o, 5, blocksData(o, 5, 1, testBS))) // short final block
	s.checkInvariants(t)

	// ..XX...X: which blocks are present
	for i, want := range []bool{false, true, true, false, false, true} {
		assert.Equal(t, want, s.HasBlock(o, int64(i)), i)
		assert.Equal(t, want, readOK(t, s, o, int64(i)), i)
	}
	// Wrong length, out of range, other version or name: misses.
	assert.False(t, s.ReadBlock(o, 1, make([]byte, testBS-1)))
	assert.False(t, s.ReadBlock(o, 5, make([]byte, testBS)))
	assert.False(t, s.ReadBlock(o, 6, make([]byte, 100)))
	assert.False(t, s.ReadBlock(o, -1, p))
	o2 := o
	o2.Version = "v2"
	assert.False(t, s.ReadBlock(o2, 1, p))
	assert.Zero(t, s.WriteBlocks(o, 6, p))
	assert.Zero(t, s.WriteBlocks(o, 0, p[:10]))
	assert.Zero(t, s.WriteBlocks(obj("empty", 0), 0, nil))

	st := s.Stats()
	assert.EqualValues(t, 3, st.HitBlocks)
	assert.EqualValues(t, 2*testBS+100, st.HitBytes)
	assert.EqualValues(t, 3, st.WriteBlocks)
	assert.EqualValues(t, 1, st.Entries)
	assert.Equal(t, du(t, dir), st.UsedBytes)

	// Nothing but hashed names under Dir.
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		require.NoError(t, err)
		assert.NotContains(t, p, "passwd")
		if fi.Mode().IsRegular() && strings.Contains(p, "/data/") {
			assert.Len(t, fi.Name(), 64)
			assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
		}
		return nil
	})
}

func TestPersistAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	a, b := obj("a", 4*testBS), obj("b", 4*testBS)
	s := openT(t, Config{Dir: dir}, hooks{})
	require.Equal(t, 4, s.WriteBlocks(a, 0, blocksData(a, 0, 4, testBS)))
	require.Equal(t, 2, s.WriteBlocks(b, 1, blocksData(b, 1, 2, testBS)))
	require.True(t, readOK(t, s, a, 0)) // a is now the most recently used
	used := s.Stats().UsedBytes
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	assert.False(t, s.ReadBlock(a, 0, make([]byte, testBS)), "read after Close")
	assert.Zero(t, s.WriteBlocks(a, 0, blocksData(a, 0, 1, testBS)), "write after Close")

	s = openT(t, Config{Dir: dir}, hooks{})
	assert.Equal(t, used, s.Stats().UsedBytes)
	assert.EqualValues(t, 2, s.Stats().Entries)
	for i := int64(0); i < 4; i++ {
		assert.True(t, readOK(t, s, a, i))
		assert.Equal(t, i == 1 || i == 2, readOK(t, s, b, i))
	}
	require.NoError(t, s.Close())

	// The access order survived too: with room for one object, the
	// least recently used (b) goes first.
	s = openT(t, Config{Dir: dir, MaxSize: used - 1}, hooks{})
	assert.True(t, s.HasBlock(a, 0))
	assert.False(t, s.HasBlock(b, 1))
	assert.EqualValues(t, 1, s.Stats().Evictions)
	s.checkInvariants(t)

	// A different block size drops every entry.
	require.NoError(t, s.Close())
	s = openT(t, Config{Dir: dir, BlockSize: 2 * testBS}, hooks{})
	assert.Zero(t, s.Stats().Entries)
	<-s.tidied
	assert.Zero(t, du(t, dir))
}

func TestEvictionKeepsUnderCap(t *testing.T) {
	dir := t.TempDir()
	const limit = 20 * testBS
	s := openT(t, Config{Dir: dir, MaxSize: limit}, hooks{})
	var objs []Key
	for i := 0; i < 30; i++ {
		o := obj(fmt.Sprintf("o%d", i), 3*testBS+7)
		objs = append(objs, o)
		require.Equal(t, 4, s.WriteBlocks(o, 0, blocksData(o, 0, 4, testBS)))
		if i >= 1 {
			require.True(t, readOK(t, s, objs[0], 0), "keep o0 hot")
		}
		st := s.Stats()
		assert.LessOrEqual(t, st.UsedBytes, int64(limit))
		assert.LessOrEqual(t, du(t, dir), int64(limit)+testBS) // + rounding
		s.checkInvariants(t)
	}
	assert.True(t, s.HasBlock(objs[0], 0), "recently read object survives")
	assert.False(t, s.HasBlock(objs[1], 0), "least recently used is gone")
	assert.True(t, s.HasBlock(objs[29], 3))
	assert.Greater(t, s.Stats().Evictions, int64(20))

	// An object bigger than the cache stores what fits and evicts the rest.
	big := obj("big", 40*testBS)
	n := s.WriteBlocks(big, 0, blocksData(big, 0, 40, testBS))
	assert.Equal(t, 20, n)
	assert.LessOrEqual(t, s.Stats().UsedBytes, int64(limit))
	for i := int64(0); i < 40; i++ {
		assert.Equal(t, i < 20, readOK(t, s, big, i))
	}
	s.checkInvariants(t)
}

func TestMinFreeHonoured(t *testing.T) {
	dir := t.TempDir()
	// A fake 64-block volume whose free space shrinks as the cache grows,
	// with 16 blocks taken by someone else.
	const volume, other, minFree = 64 * testBS, 16 * testBS, 24 * testBS
	statfs := func(string) (int64, int64, error) { return volume - other - du(t, dir), volume, nil }
	s := openT(t, Config{Dir: dir, MaxSize: volume, MinFree: minFree}, hooks{statfs: statfs})
	for i := 0; i < 20; i++ {
		o := obj(fmt.Sprintf("o%d", i), 4*testBS)
		assert.Equal(t, 4, s.WriteBlocks(o, 0, blocksData(o, 0, 4, testBS)))
		free, _, _ := statfs("")
		assert.GreaterOrEqual(t, free, int64(minFree), "after write %d", i)
		s.checkInvariants(t)
	}
	// 64-16-24 = 24 blocks for the cache.
	assert.Equal(t, int64(24*testBS), s.Stats().UsedBytes)
	assert.Positive(t, s.Stats().Evictions)
}

func TestOrphanAndMissingFileCleanup(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Config{Dir: dir}, hooks{})
	a, b := obj("a", 2*testBS), obj("b", 2*testBS)
	require.Equal(t, 2, s.WriteBlocks(a, 0, blocksData(a, 0, 2, testBS)))
	require.Equal(t, 2, s.WriteBlocks(b, 0, blocksData(b, 0, 2, testBS)))
	bPath := s.pathFor(s.keyFor(b))
	require.NoError(t, s.Close())

	data := filepath.Join(dir, "v1", "data")
	outside := filepath.Join(t.TempDir(), "precious")
	require.NoError(t, os.WriteFile(outside, []byte("keep me"), 0o600))
	orphans := []string{
		filepath.Join(data, "ab", strings.Repeat("ab", 32)),
		filepath.Join(data, "ab", "tmp123"),
		filepath.Join(data, "junkdir", "file"),
		filepath.Join(data, "stray"),
	}
	for _, p := range orphans {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
		require.NoError(t, os.WriteFile(p, []byte("x"), 0o600))
	}
	link := filepath.Join(data, "cd", strings.Repeat("cd", 32))
	require.NoError(t, os.MkdirAll(filepath.Dir(link), 0o700))
	require.NoError(t, os.Symlink(outside, link))
	require.NoError(t, os.Remove(bPath)) // entry without a file

	s = openT(t, Config{Dir: dir}, hooks{})
	<-s.tidied // orphans are removed after Open returns
	for _, p := range append(orphans, link) {
		_, err := os.Lstat(p)
		assert.ErrorIs(t, err, os.ErrNotExist, p)
	}
	got, err := os.ReadFile(outside)
	require.NoError(t, err)
	assert.Equal(t, "keep me", string(got), "symlink target untouched")
	assert.EqualValues(t, 2, s.Stats().Entries, "entries are checked as they are used")
	assert.True(t, readOK(t, s, a, 1))
	assert.False(t, readOK(t, s, b, 0))
	assert.EqualValues(t, 1, s.Stats().Entries, "b, without its file, is dropped")
	assert.Equal(t, du(t, dir), s.Stats().UsedBytes)

	// The dropped entry stays dropped.
	require.NoError(t, s.Close())
	s = openT(t, Config{Dir: dir}, hooks{})
	assert.EqualValues(t, 1, s.Stats().Entries)
}

func TestCorruptIndexRecovery(t *testing.T) {
	for _, damage := range []string{"garbage", "truncated", "zeroed pages"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			s := openT(t, Config{Dir: dir}, hooks{})
			a := obj("a", 2*testBS)
			for i := 0; i < 50; i++ {
				o := obj(fmt.Sprintf("o%d", i), testBS)
				require.Equal(t, 1, s.WriteBlocks(o, 0, blocksData(o, 0, 1, testBS)))
			}
			require.Equal(t, 2, s.WriteBlocks(a, 0, blocksData(a, 0, 2, testBS)))
			require.NoError(t, s.Close())

			idx := filepath.Join(dir, "v1", "index.db")
			raw, err := os.ReadFile(idx)
			require.NoError(t, err)
			switch damage {
			case "garbage":
				raw = []byte("this is not a bbolt file at all, but it is long enough to look like one......")
			case "truncated":
				raw = raw[:len(raw)/3]
			case "zeroed pages":
				for i := 4096 * 2; i < len(raw); i++ {
					raw[i] = 0
				}
			}
			require.NoError(t, os.WriteFile(idx, raw, 0o600))

			rec := &recorder{}
			s = openT(t, Config{Dir: dir, Logger: slog.New(rec)}, hooks{})
			_, err = os.Stat(idx + ".corrupt")
			require.NoError(t, err, "moved aside")
			assert.Len(t, rec.errors(), 1, "and logged")
			assert.Zero(t, s.Stats().Entries)
			<-s.tidied
			assert.Zero(t, du(t, dir), "orphaned data removed")
			for i := int64(0); i < 2; i++ {
				readOK(t, s, a, i)
			}
			require.Equal(t, 2, s.WriteBlocks(a, 0, blocksData(a, 0, 2, testBS)))
			assert.True(t, readOK(t, s, a, 1))
			s.checkInvariants(t)
			require.NoError(t, s.Close())
			s = openT(t, Config{Dir: dir}, hooks{})
			assert.True(t, readOK(t, s, a, 0))
		})
	}
}

func TestGarbageIndexIsMovedAside(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "v1"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "v1", "index.db"), []byte(strings.Repeat("junk", 5000)), 0o600))
	s := openT(t, Config{Dir: dir}, hooks{})
	_, err := os.Stat(filepath.Join(dir, "v1", "index.db.corrupt"))
	assert.NoError(t, err)
	o := obj("a", testBS)
	assert.Equal(t, 1, s.WriteBlocks(o, 0, blockData(o, 0, testBS)))
}

func TestIndexLockedByAnotherStore(t *testing.T) {
	dir := t.TempDir()
	openT(t, Config{Dir: dir}, hooks{})
	_, err := Open(Config{Dir: dir})
	assert.Error(t, err, "two stores must not share a directory")
}

func TestCacheDirUnusable(t *testing.T) {
	dir := t.TempDir()
	rec := &recorder{}
	s := openT(t, Config{Dir: dir, Logger: slog.New(rec)}, hooks{})
	a, b := obj("a", 2*testBS), obj("b", 2*testBS)
	require.Equal(t, 2, s.WriteBlocks(a, 0, blocksData(a, 0, 2, testBS)))

	// The data directory becomes a regular file: nothing can be created
	// (root ignores chmod, but not ENOTDIR).
	data := filepath.Join(dir, "v1", "data")
	require.NoError(t, os.RemoveAll(data))
	require.NoError(t, os.WriteFile(data, nil, 0o600))
	assert.Zero(t, s.WriteBlocks(b, 0, blocksData(b, 0, 2, testBS)))
	assert.Zero(t, s.WriteBlocks(b, 0, blocksData(b, 0, 2, testBS)))
	assert.False(t, readOK(t, s, b, 0))
	assert.EqualValues(t, 2, s.Stats().WriteErrors)
	assert.Len(t, rec.errors(), 1)
	// a's file is still open, so its blocks may still be served; if not
	// served they must be misses, never wrong: readOK checks.
	readOK(t, s, a, 0)

	// Usable again: the next write recreates the directory.
	require.NoError(t, os.Remove(data))
	assert.Equal(t, 2, s.WriteBlocks(b, 0, blocksData(b, 0, 2, testBS)))
	assert.True(t, readOK(t, s, b, 1))
}

// The whole cache directory deleted under a running store: what is open
// still serves (checked), nothing is created again. A rebuilt directory
// would have neither the lock, so a second ferry could start on it and
// delete this one's new files as orphans, nor the index, which this store
// goes on committing to its deleted file (found by a review).
func TestCacheDirDeletedWhileRunning(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	rec := &recorder{}
	s := openT(t, Config{Dir: dir, Logger: slog.New(rec)}, hooks{maxOpen: 1})
	a, b := obj("a", 2*testBS), obj("b", 2*testBS)
	require.Equal(t, 2, s.WriteBlocks(a, 0, blocksData(a, 0, 2, testBS)))
	require.Equal(t, 2, s.WriteBlocks(b, 0, blocksData(b, 0, 2, testBS))) // closes a's file (maxOpen 1)
	require.NoError(t, os.RemoveAll(dir))

	assert.False(t, readOK(t, s, a, 0), "file gone: a miss")
	assert.False(t, s.HasBlock(a, 1), "and the entry is forgotten")
	assert.Zero(t, s.WriteBlocks(a, 0, blocksData(a, 0, 2, testBS)), "until its deletion is committed")
	require.NoError(t, s.flush())
	assert.Zero(t, s.WriteBlocks(a, 0, blocksData(a, 0, 2, testBS)), "no file is created again")
	assert.Zero(t, s.WriteBlocks(a, 0, blocksData(a, 0, 2, testBS)))
	assert.False(t, readOK(t, s, a, 1))
	assert.Positive(t, s.Stats().WriteErrors)
	assert.Len(t, rec.errors(), 2, "once each: the vanished file, the failed writes")
	_, err := os.Stat(dir)
	assert.ErrorIs(t, err, fs.ErrNotExist, "the directory is not rebuilt")
	// b's file was open when deleted: whatever it serves is checked.
	readOK(t, s, b, 0)

	// Another store may take the path now, with its own lock.
	s2 := openT(t, Config{Dir: dir}, hooks{})
	require.Equal(t, 2, s2.WriteBlocks(a, 0, blocksData(a, 0, 2, testBS)))
	c := obj("c", 2*testBS)
	assert.Zero(t, s.WriteBlocks(c, 0, blocksData(c, 0, 2, testBS)), "the first store stays out of it")
	assert.True(t, readOK(t, s2, a, 1))
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := openT(t, Config{Dir: t.TempDir(), MaxSize: 8 * testBS, Registerer: reg, Splice: true}, hooks{})
	o := obj("o", 2*testBS)
	require.Equal(t, 2, s.WriteBlocks(o, 0, blocksData(o, 0, 2, testBS)))
	readOK(t, s, o, 0)
	require.True(t, spliceOK(t, s, o, 10, 20))
	s.ReadBlock(obj("none", testBS), 0, make([]byte, testBS))
	w, ok := s.Whole(o)
	require.True(t, ok)
	require.True(t, w.Check())
	w.Release()
	q := obj("q", testBS)
	require.Equal(t, 1, s.WriteBlocks(q, 0, blocksData(q, 0, 1, testBS)))
	checkAsRead(t, s, q)
	readOK(t, s, q, 0)
	n, err := testutil.GatherAndCount(reg)
	require.NoError(t, err)
	assert.Equal(t, 25, n)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ferry_cache_min_free_bytes Free space the cache leaves on its volume (--cache-min-free): it evicts to keep it.
# TYPE ferry_cache_min_free_bytes gauge
ferry_cache_min_free_bytes 0
# HELP ferry_cache_hits_bytes_total Bytes served from the local cache.
# TYPE ferry_cache_hits_bytes_total counter
ferry_cache_hits_bytes_total 12288
# HELP ferry_cache_hits_total Blocks served from the local cache.
# TYPE ferry_cache_hits_total counter
ferry_cache_hits_total 3
# HELP ferry_cache_misses_total Blocks asked of the local cache and not found there (absent, evicted or corrupt).
# TYPE ferry_cache_misses_total counter
ferry_cache_misses_total 1
# HELP ferry_cache_written_bytes_total Bytes stored in the local cache.
# TYPE ferry_cache_written_bytes_total counter
ferry_cache_written_bytes_total 12288
# HELP ferry_cache_misses_bytes_total Bytes asked of the local cache and not found there.
# TYPE ferry_cache_misses_bytes_total counter
ferry_cache_misses_bytes_total 4096
# HELP ferry_cache_limit_bytes Cache size limit.
# TYPE ferry_cache_limit_bytes gauge
ferry_cache_limit_bytes 32768
# HELP ferry_cache_whole_checks_total Cached files read whole and checked against their CRC32Cs before the kernel reads them directly (passthrough): once per file per mount, and again after the file changed; with passthrough, files a fetch wrote whole through the page cache (under 4 KiB, or up to 1 MiB on a volume without O_DIRECT) as soon as it has.
# TYPE ferry_cache_whole_checks_total counter
ferry_cache_whole_checks_total 1
# HELP ferry_cache_whole_checked_bytes_total Bytes of those checks.
# TYPE ferry_cache_whole_checked_bytes_total counter
ferry_cache_whole_checked_bytes_total 8192
# HELP ferry_cache_read_checks_total Cached files too large to check at an open, found whole and good by reads through ferry that covered every block, so that later opens may be passthrough.
# TYPE ferry_cache_read_checks_total counter
ferry_cache_read_checks_total 1
# HELP ferry_cache_spliced_bytes_total Of the bytes served from the local cache, those handed out to be sent from the cache file without ferry checking them again (spliced to the kernel, or copied where no pipe fits): blocks read and checked against their CRC32Cs earlier in the mount, in a file unchanged since.
# TYPE ferry_cache_spliced_bytes_total counter
ferry_cache_spliced_bytes_total 4096
# HELP ferry_cache_entries Object versions in the local cache.
# TYPE ferry_cache_entries gauge
ferry_cache_entries 2
`), "ferry_cache_entries", "ferry_cache_spliced_bytes_total", "ferry_cache_hits_bytes_total", "ferry_cache_misses_bytes_total", "ferry_cache_limit_bytes", "ferry_cache_min_free_bytes",
		"ferry_cache_hits_total", "ferry_cache_misses_total", "ferry_cache_written_bytes_total",
		"ferry_cache_whole_checks_total", "ferry_cache_whole_checked_bytes_total", "ferry_cache_read_checks_total"))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)
	require.NoError(t, s.Close())
	// Close unregisters, so the directory can be reopened in-process.
	s2, err := Open(Config{Dir: s.root, BlockSize: testBS, Registerer: reg})
	require.NoError(t, err)
	require.NoError(t, s2.Close())
	assert.False(t, errors.Is(err, ErrInvalid))
}

func TestFailedCommitIsRetried(t *testing.T) {
	dir := t.TempDir()
	var fail error
	h := hooks{syncData: func(*os.File) error { return fail }}
	s := openT(t, Config{Dir: dir, MaxSize: 3 * testBS}, h)
	s.flushMu.Lock()
	s.syncEvery = 0 // sync before every commit, so a failing sync fails it
	s.flushMu.Unlock()
	a, b := obj("a", 2*testBS), obj("b", 2*testBS)
	require.Equal(t, 2, s.WriteBlocks(a, 0, blocksData(a, 0, 2, testBS)))
	require.NoError(t, s.flush())

	fail = syscall.EIO
	require.Equal(t, 2, s.WriteBlocks(b, 0, blocksData(b, 0, 2, testBS))) // evicts a
	assert.ErrorIs(t, s.flush(), syscall.EIO)
	assert.Zero(t, s.WriteBlocks(a, 0, blocksData(a, 0, 1, testBS)), "a's deletion is not committed yet")

	fail = nil
	require.NoError(t, s.flush())
	s.checkInvariants(t)
	require.NoError(t, s.Close())
	s = openT(t, Config{Dir: dir, MaxSize: 3 * testBS}, hooks{})
	assert.True(t, readOK(t, s, b, 1), "retried commit recorded b")
	assert.False(t, s.HasBlock(a, 0), "and a's deletion")
}

func TestBucketIDsShareADir(t *testing.T) {
	dir := t.TempDir()
	o := obj("same/name", 2*testBS)
	s := openT(t, Config{Dir: dir, BucketID: "gs://a"}, hooks{})
	require.Equal(t, 2, s.WriteBlocks(o, 0, blocksData(o, 0, 2, testBS)))
	require.NoError(t, s.Close())

	s = openT(t, Config{Dir: dir, BucketID: "gs://b", MaxSize: 3 * testBS}, hooks{})
	assert.False(t, s.HasBlock(o, 0), "another bucket's object of the same name is not ours")
	assert.EqualValues(t, 1, s.Stats().Entries, "but its space is counted")
	other := obj("other", 2*testBS)
	require.Equal(t, 2, s.WriteBlocks(other, 0, blocksData(other, 0, 2, testBS)))
	assert.EqualValues(t, 1, s.Stats().Evictions, "and it is evicted like any entry")
	s.checkInvariants(t)
	require.NoError(t, s.Close())

	s = openT(t, Config{Dir: dir, BucketID: "gs://a"}, hooks{})
	assert.False(t, s.HasBlock(o, 0))
	assert.False(t, s.HasBlock(other, 0), "b's object is not a's")
}

// TestEntryStaysSmall: the in-memory entry, one per cached object (a
// million and more on a large cache), stays in the 384-byte size class:
// its small fields packed together, its data file's path computed, not
// kept.
func TestEntryStaysSmall(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(entry{}), uintptr(384))
}
