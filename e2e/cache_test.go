package e2e

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	ferryfs "ferry/fs"
)

// dataset stages n objects of size bytes under dir/ and returns them.
func dataset(t *testing.T, s *store, dir string, n, size int) map[string][]byte {
	t.Helper()
	objs := map[string][]byte{}
	var wg sync.WaitGroup
	for i := range n {
		name := fmt.Sprintf("%s/obj%03d", dir, i)
		data := content(s.url+name, size)
		objs[name] = data
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.put(t, name, data)
		}()
	}
	wg.Wait()
	return objs
}

// readAll reads every object through the mount, 4 at a time, and checks
// each byte.
func readAll(t *testing.T, m *mounted, objs map[string][]byte) {
	t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	errs := make(chan error, len(objs))
	for name, want := range objs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			got, err := os.ReadFile(filepath.Join(m.dir, name))
			if err != nil {
				errs <- err
				return
			}
			if sha256.Sum256(got) != sha256.Sum256(want) {
				errs <- fmt.Errorf("%s: content differs (first difference at %d)", name, firstDiff(got, want))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// Small files read in listing order by 4 readers are fetched ahead of
// them, each once, in one request, with and without a disk cache, and
// every byte is right.
func TestReadAheadSmallFiles(t *testing.T) {
	for _, withCache := range []bool{false, true} {
		t.Run(map[bool]string{false: "no cache", true: "cache"}[withCache], func(t *testing.T) {
			s := newStore(t, "gcs")
			const n = 60
			objs := dataset(t, s, "small", n, 100<<10+7)
			args := []string{"--metrics-addr", freeAddr(t)}
			if withCache {
				args = append(args, "--cache-dir", t.TempDir())
			}
			m := mount(t, s, args...)
			ents, err := os.ReadDir(filepath.Join(m.dir, "small"))
			require.NoError(t, err)
			require.Len(t, ents, n)
			var next atomic.Int64
			g := new(errgroup.Group)
			for range 4 {
				g.Go(func() error {
					for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
						name := "small/" + ents[i].Name()
						got, err := os.ReadFile(filepath.Join(m.dir, name))
						if err != nil {
							return err
						}
						if !bytes.Equal(got, objs[name]) {
							return fmt.Errorf("%s: content differs (first difference at %d)", name, firstDiff(got, objs[name]))
						}
					}
					return nil
				})
			}
			require.NoError(t, g.Wait())
			assert.Equal(t, float64(n), storeReads(t, m), "one request per file")
			started := m.metric(t, "ferry_fs_files_read_ahead_total", nil)
			assert.GreaterOrEqual(t, started, float64(n/2), "files opened ahead of their readers")
			assert.Equal(t, started, m.metric(t, "ferry_fs_files_read_ahead_taken_total", nil),
				"every file opened ahead was taken: the directory was read to its end")
			assert.Positive(t, m.metric(t, "ferry_readahead_ahead_bytes_total", nil))
		})
	}
}

// storeReads is how many ranged reads ferry sent to the store.
func storeReads(t *testing.T, m *mounted) float64 {
	return m.metric(t, "ferry_store_requests_total", map[string]string{"op": "read"})
}

// TestCacheServesLaterEpochs: epoch 2 makes no store reads; neither does
// a fresh mount on the same cache directory.
func TestCacheServesLaterEpochs(t *testing.T) {
	for _, kind := range []string{"gcs", "s3"} {
		t.Run(kind, func(t *testing.T) {
			s := newStore(t, kind)
			objs := dataset(t, s, "train", 6, 5<<20+12345)
			small := dataset(t, s, "small", 20, 100<<10)
			cacheDir := t.TempDir()
			args := []string{"--cache-dir", cacheDir, "--metadata-ttl", "-1", "--metrics-addr", freeAddr(t)}
			m := mount(t, s, args...)

			readAll(t, m, objs)
			readAll(t, m, small)
			require.Positive(t, storeReads(t, m))

			dropCaches(t)
			reads, served := storeReads(t, m), s.bytesServed()
			readAll(t, m, objs)
			readAll(t, m, small)
			assert.Equal(t, reads, storeReads(t, m), "epoch 2 read from the store")
			assert.Equal(t, served, s.bytesServed(), "epoch 2 moved bytes from the store")
			// From the disk cache: through ferry, or read by the kernel
			// from the cache files (passthrough, TestPassthroughWarmReads).
			assert.Positive(t, m.metric(t, "ferry_cache_hits_bytes_total", nil)+m.metric(t, "ferry_fs_passthrough_opens_total", nil))

			// Restart on the same cache: metadata is fetched again, data
			// is not.
			m.unmount(t)
			dropCaches(t)
			args[len(args)-1] = freeAddr(t)
			m2 := mount(t, s, args...)
			served = s.bytesServed()
			readAll(t, m2, objs)
			readAll(t, m2, small)
			assert.Zero(t, storeReads(t, m2), "a fresh mount on a warm cache read data from the store")
			assert.Less(t, s.bytesServed()-served, int64(256<<10), "only listings may come from the store")
		})
	}
}

// cacheDataFiles lists the cache's data files.
func cacheDataFiles(t *testing.T, cacheDir string) []string {
	var files []string
	err := filepath.WalkDir(cacheDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && filepath.Base(filepath.Dir(filepath.Dir(p))) == "data" {
			files = append(files, p)
		}
		return nil
	})
	require.NoError(t, err)
	return files
}

// filledCache stages three 3 MiB objects, reads them once through a
// mount with a cache, and unmounts: the cache then holds one data file per
// object, ready to be damaged.
func filledCache(t *testing.T, s *store) (objs map[string][]byte, cacheDir string, files []string) {
	t.Helper()
	objs = dataset(t, s, "d", 3, 3<<20)
	cacheDir = t.TempDir()
	m := mount(t, s, "--cache-dir", cacheDir)
	readAll(t, m, objs)
	m.unmount(t)
	files = cacheDataFiles(t, cacheDir)
	require.Len(t, files, 3)
	return objs, cacheDir, files
}

// TestCorruptCacheBlockIsRefetched: a flipped byte in a cache file is
// detected by its CRC, never served, and fetched again.
func TestCorruptCacheBlockIsRefetched(t *testing.T) {
	s := newStore(t, "s3")
	objs, cacheDir, files := filledCache(t, s)
	for _, f := range files {
		fh, err := os.OpenFile(f, os.O_RDWR, 0)
		require.NoError(t, err)
		b := make([]byte, 1)
		for _, off := range []int64{100, 2<<20 + 7} {
			_, err = fh.ReadAt(b, off)
			require.NoError(t, err)
			b[0] ^= 0xff
			_, err = fh.WriteAt(b, off)
			require.NoError(t, err)
		}
		require.NoError(t, fh.Close())
	}
	dropCaches(t)

	m2 := mount(t, s, "--cache-dir", cacheDir, "--metrics-addr", freeAddr(t))
	readAll(t, m2, objs)
	assert.Equal(t, float64(6), m2.metric(t, "ferry_cache_corrupt_blocks_total", nil), "each flipped block detected once")
	assert.Positive(t, storeReads(t, m2), "corrupt blocks must be fetched again")
	// And the repaired cache now serves them.
	dropCaches(t)
	reads := storeReads(t, m2)
	readAll(t, m2, objs)
	assert.Equal(t, reads, storeReads(t, m2))
}

// TestPassthroughWarmReads: one read per byte. The second epoch of
// objects held whole in the cache is read through ferry, whose reads
// check each block as they serve it (the cache's hits are every byte,
// once, and nothing is read whole to check it); the third is read by the
// kernel from the cache files (passthrough): no store read, no check,
// every byte right. A byte flipped in a cache file while mounted is
// caught (the file changed since its check, so its next open goes
// through ferry), never served, and fetched again; once the reads have
// checked the file again it is passthrough again. A new ferry process
// on the same cache, in the same boot, opens the files passthrough at
// once, but for one whose ctime moved in between: that one is read
// through ferry and checked once more. With --cache-passthrough=false
// every read goes through ferry.
func TestPassthroughWarmReads(t *testing.T) {
	s := newStore(t, "gcs")
	objs := dataset(t, s, "d", 4, 3<<20+5)
	var total float64
	for _, data := range objs {
		total += float64(len(data))
	}
	cacheDir := t.TempDir()
	m := mount(t, s, "--cache-dir", cacheDir, "--metadata-ttl", "-1", "--metrics-addr", freeAddr(t))
	readAll(t, m, objs)
	dropCaches(t)
	reads := storeReads(t, m)
	hits := m.metric(t, "ferry_cache_hits_bytes_total", nil)
	readAll(t, m, objs)
	assert.Equal(t, reads, storeReads(t, m), "epoch 2 read from the store")
	if m.metric(t, "ferry_cache_read_checks_total", nil) == 0 {
		// Only a kernel without it is a reason to skip.
		expected, why := ferryfs.PassthroughExpected()
		require.False(t, expected, "no file checked by its reads (%s); log in %s", why, m.log)
		t.Skip("the kernel offers no FUSE passthrough: " + why)
	}
	assert.EqualValues(t, len(objs), m.metric(t, "ferry_cache_read_checks_total", nil))
	assert.Zero(t, m.metric(t, "ferry_fs_passthrough_opens_total", nil), "epoch 2 is read through ferry")
	assert.Zero(t, m.metric(t, "ferry_cache_whole_checks_total", nil), "nothing read whole to check it")
	assert.Equal(t, hits+total, m.metric(t, "ferry_cache_hits_bytes_total", nil), "each byte read from the cache once")

	// Epoch 3: passthrough, with nothing read at the opens.
	dropCaches(t)
	hits = m.metric(t, "ferry_cache_hits_bytes_total", nil)
	readAll(t, m, objs)
	assert.EqualValues(t, len(objs), m.metric(t, "ferry_fs_passthrough_opens_total", nil))
	assert.Zero(t, m.metric(t, "ferry_cache_whole_checks_total", nil))
	assert.Equal(t, hits, m.metric(t, "ferry_cache_hits_bytes_total", nil), "passthrough reads reached ferry")

	files := cacheDataFiles(t, cacheDir)
	require.Len(t, files, len(objs))
	fh, err := os.OpenFile(files[0], os.O_RDWR, 0)
	require.NoError(t, err)
	b := make([]byte, 1)
	_, err = fh.ReadAt(b, 1<<20+3)
	require.NoError(t, err)
	b[0] ^= 0x01
	_, err = fh.WriteAt(b, 1<<20+3)
	require.NoError(t, err)
	require.NoError(t, fh.Close())
	dropCaches(t)
	opens := m.metric(t, "ferry_fs_passthrough_opens_total", nil)
	readAll(t, m, objs)
	assert.EqualValues(t, 1, m.metric(t, "ferry_cache_corrupt_blocks_total", nil))
	assert.Greater(t, storeReads(t, m), reads, "the flipped block is fetched again")
	assert.EqualValues(t, opens+float64(len(objs)-1), m.metric(t, "ferry_fs_passthrough_opens_total", nil),
		"the changed file through ferry, the others passthrough")

	// Repaired, and checked again by the reads of the next epoch:
	// passthrough again from the one after.
	dropCaches(t)
	readAll(t, m, objs)
	dropCaches(t)
	reads = storeReads(t, m)
	opens = m.metric(t, "ferry_fs_passthrough_opens_total", nil)
	readAll(t, m, objs)
	assert.Equal(t, reads, storeReads(t, m))
	assert.EqualValues(t, opens+float64(len(objs)), m.metric(t, "ferry_fs_passthrough_opens_total", nil))
	assert.EqualValues(t, len(objs)+1, m.metric(t, "ferry_cache_read_checks_total", nil))
	assert.Zero(t, m.metric(t, "ferry_cache_whole_checks_total", nil))
	m.unmount(t)

	// A new process in the same boot trusts the last one's checks: the
	// files unchanged since are passthrough at their first open, with
	// nothing read or checked. One whose times were set to what they
	// were (only its ctime moves) is checked again by its reads.
	fi, err := os.Stat(files[1])
	require.NoError(t, err)
	require.NoError(t, os.Chtimes(files[1], fi.ModTime(), fi.ModTime()))
	m2 := mount(t, s, "--cache-dir", cacheDir, "--metadata-ttl", "-1", "--metrics-addr", freeAddr(t))
	dropCaches(t)
	readAll(t, m2, objs)
	assert.Zero(t, storeReads(t, m2))
	assert.EqualValues(t, len(objs)-1, m2.metric(t, "ferry_fs_passthrough_opens_total", nil))
	assert.EqualValues(t, 1, m2.metric(t, "ferry_cache_read_checks_total", nil))
	assert.Zero(t, m2.metric(t, "ferry_cache_whole_checks_total", nil))
	assert.Equal(t, total/float64(len(objs)), m2.metric(t, "ferry_cache_hits_bytes_total", nil), "the touched file read from the cache once")
	dropCaches(t)
	readAll(t, m2, objs)
	assert.EqualValues(t, 2*len(objs)-1, m2.metric(t, "ferry_fs_passthrough_opens_total", nil))
	assert.Equal(t, total/float64(len(objs)), m2.metric(t, "ferry_cache_hits_bytes_total", nil), "passthrough reads reached ferry")
	assert.Zero(t, m2.metric(t, "ferry_cache_whole_checks_total", nil))
	m2.unmount(t)

	m3 := mount(t, s, "--cache-dir", cacheDir, "--metadata-ttl", "-1", "--metrics-addr", freeAddr(t), "--cache-passthrough=false")
	readAll(t, m3, objs)
	assert.Zero(t, m3.metric(t, "ferry_fs_passthrough_opens_total", nil))
	assert.Zero(t, storeReads(t, m3))
	assert.Positive(t, m3.metric(t, "ferry_cache_hits_bytes_total", nil))
}

// TestPassthroughSmallFilesCheckedAsWritten: files under 4 KiB, written
// to the cache through the page cache, are read back and checked as
// their fetch writes them, so the second epoch is passthrough from the
// first open: no read through ferry, no check by reads, nothing from the
// store.
func TestPassthroughSmallFilesCheckedAsWritten(t *testing.T) {
	if expected, why := ferryfs.PassthroughExpected(); !expected {
		t.Skip("the kernel offers no FUSE passthrough, and nothing is checked as written: " + why)
	}
	s := newStore(t, "gcs")
	objs := dataset(t, s, "d", 12, 3000)
	m := mount(t, s, "--cache-dir", t.TempDir(), "--metadata-ttl", "-1", "--metrics-addr", freeAddr(t))
	readAll(t, m, objs)
	// The cache writes what a fetch got after handing it to the reader.
	assert.Eventually(t, func() bool {
		return m.metric(t, "ferry_cache_whole_checks_total", nil) == float64(len(objs))
	}, 10*time.Second, 20*time.Millisecond, "each checked as written")
	dropCaches(t)
	reads := storeReads(t, m)
	hits := m.metric(t, "ferry_cache_hits_bytes_total", nil)
	// Files read ahead may be whole, and passthrough, by their first open.
	opens := m.metric(t, "ferry_fs_passthrough_opens_total", nil)
	readAll(t, m, objs)
	assert.EqualValues(t, len(objs), m.metric(t, "ferry_fs_passthrough_opens_total", nil)-opens, "epoch 2 is passthrough; log in %s", m.log)
	assert.Zero(t, m.metric(t, "ferry_cache_read_checks_total", nil))
	assert.EqualValues(t, len(objs), m.metric(t, "ferry_cache_whole_checks_total", nil))
	assert.Equal(t, hits, m.metric(t, "ferry_cache_hits_bytes_total", nil), "no read through ferry")
	assert.Equal(t, reads, storeReads(t, m))
}

// TestPassthroughLargeFileAfterReadCheck: a file too large to check at an
// open (over 1 GiB) is read through ferry, whose reads check it as they
// go; what the reader skipped (its first MiB here) ferry reads when the
// handle is released, and the next epoch is passthrough, with no check
// read at all.
func TestPassthroughLargeFileAfterReadCheck(t *testing.T) {
	s := newStore(t, "file")
	// Sparse, with random bytes here and there: holes read fast, and the
	// cache stores every byte.
	src := filepath.Join(strings.TrimPrefix(s.url, "file://"), "big.bin")
	f, err := os.Create(src)
	require.NoError(t, err)
	const size = 1<<30 + 3<<20 + 17
	require.NoError(t, f.Truncate(size))
	for i, off := range []int64{0, 300 << 20, 1<<30 - 5, size - 1<<20} {
		_, err := f.WriteAt(content(fmt.Sprint("big", i), 1<<20), off)
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())
	want := sumFile(t, src)

	m := mount(t, s, "--cache-dir", t.TempDir(), "--metadata-ttl", "-1", "--metrics-addr", freeAddr(t))
	path := filepath.Join(m.dir, "big.bin")
	require.Equal(t, want, sumFile(t, path), "epoch 1")
	dropCaches(t)
	require.Equal(t, sumRange(t, src, 1<<20), sumRange(t, path, 1<<20), "epoch 2, from 1 MiB on")
	require.Eventually(t, func() bool { return m.metric(t, "ferry_fs_passthrough_readied_total", nil) == 1 },
		10*time.Second, 10*time.Millisecond, "the first MiB read when the handle was released")
	if m.metric(t, "ferry_cache_read_checks_total", nil) == 0 {
		expected, why := ferryfs.PassthroughExpected()
		require.False(t, expected, "epoch 2 did not check the file (%s); log in %s", why, m.log)
		t.Skip("the kernel offers no FUSE passthrough: " + why)
	}
	assert.Zero(t, m.metric(t, "ferry_fs_passthrough_opens_total", nil), "a large file unchecked at its open")
	reads, hits := storeReads(t, m), m.metric(t, "ferry_cache_hits_bytes_total", nil)

	dropCaches(t)
	require.Equal(t, want, sumFile(t, path), "epoch 3")
	assert.EqualValues(t, 1, m.metric(t, "ferry_fs_passthrough_opens_total", nil))
	assert.Zero(t, m.metric(t, "ferry_cache_whole_checks_total", nil), "checked again at the open")
	assert.Equal(t, hits, m.metric(t, "ferry_cache_hits_bytes_total", nil), "passthrough reads reached ferry")
	assert.Equal(t, reads, storeReads(t, m))
}

// sumFile is the SHA-256 of a file's bytes, read in 1 MiB pieces.
func sumFile(t *testing.T, path string) string {
	t.Helper()
	return sumRange(t, path, 0)
}

// sumRange is the SHA-256 of a file's bytes from off to its end.
func sumRange(t *testing.T, path string, off int64) string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.CopyBuffer(h, io.NewSectionReader(f, off, 1<<62), make([]byte, 1<<20))
	require.NoError(t, err)
	return fmt.Sprintf("%x", h.Sum(nil))
}

// TestPassthroughAfterReadyingTheRest: a reader that skips the head of a
// file (a header it never needs) leaves it one block short of whole in
// the disk cache; ferry fetches that block when the handle is released,
// so the file is whole: the next open reads it through ferry, checking
// it, and the one after is passthrough.
func TestPassthroughAfterReadyingTheRest(t *testing.T) {
	s := newStore(t, "gcs")
	objs := dataset(t, s, "d", 1, 6<<20+12345)
	m := mount(t, s, "--cache-dir", t.TempDir(), "--metadata-ttl", "-1", "--metrics-addr", freeAddr(t))
	for name, want := range objs {
		f, err := os.Open(filepath.Join(m.dir, name))
		require.NoError(t, err)
		got, err := io.ReadAll(io.NewSectionReader(f, 100<<10, 1<<62))
		require.NoError(t, err)
		require.NoError(t, f.Close())
		require.Equal(t, want[100<<10:], got)
	}
	require.Eventually(t, func() bool { return m.metric(t, "ferry_fs_passthrough_readied_total", nil) == 1 },
		10*time.Second, 10*time.Millisecond, "log in %s", m.log)
	assert.EqualValues(t, 64<<10, m.metric(t, "ferry_fs_passthrough_readied_bytes_total", nil), "the block before 100 KiB")
	reads := storeReads(t, m)
	// The first open of the file, whole now, reads it through ferry and
	// checks it as it reads; the next is passthrough.
	for range 2 {
		dropCaches(t)
		readAll(t, m, objs)
	}
	if m.metric(t, "ferry_fs_passthrough_opens_total", nil) == 0 {
		expected, why := ferryfs.PassthroughExpected()
		require.False(t, expected, "no passthrough open (%s); log in %s", why, m.log)
		t.Skip("the kernel offers no FUSE passthrough: " + why)
	}
	assert.EqualValues(t, 1, m.metric(t, "ferry_fs_passthrough_opens_total", nil))
	assert.EqualValues(t, 1, m.metric(t, "ferry_cache_read_checks_total", nil), "the first whole read checked it")
	assert.Equal(t, reads, storeReads(t, m))
}

// TestCacheStaysUnderItsCap: reading 256 MiB through a 64 MiB cache keeps
// the cache's allocated bytes under the cap, and every byte is right.
func TestCacheStaysUnderItsCap(t *testing.T) {
	s := newStore(t, "s3")
	objs := dataset(t, s, "big", 16, 16<<20)
	cacheDir := t.TempDir()
	m := mount(t, s, "--cache-dir", cacheDir, "--cache-size", "64MiB", "--metrics-addr", freeAddr(t))
	var peak int64
	for name, want := range objs {
		readAll(t, m, map[string][]byte{name: want})
		peak = max(peak, allocated(t, cacheDir))
	}
	t.Logf("peak cache data: %.1f MiB", float64(peak)/(1<<20))
	// The cap counts allocated bytes; allow one 4 KiB fs block per file.
	assert.LessOrEqual(t, peak, int64(64<<20)+16*4096)
	assert.Positive(t, m.metric(t, "ferry_cache_evictions_total", nil))
	readAll(t, m, objs)
}

// allocated sums the blocks the cache's data files occupy.
func allocated(t *testing.T, cacheDir string) int64 {
	var n int64
	for _, f := range cacheDataFiles(t, cacheDir) {
		var st syscall.Stat_t
		if err := syscall.Stat(f, &st); err == nil {
			n += st.Blocks * 512
		}
	}
	return n
}

// TestMemoryLimitHolds: 32 sequential readers at once, no disk cache
// (readahead must keep everything in memory), --memory-limit 256MiB: the
// accounted peak stays within the limit and the process's peak RSS within
// the limit plus 96 MiB.
func TestMemoryLimitHolds(t *testing.T) {
	s := newStore(t, "s3")
	const n, size = 32, 24 << 20
	names := make([]string, n)
	sums := make([][32]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		names[i] = fmt.Sprintf("streams/s%02d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			data := content(names[i], size)
			sums[i] = sha256.Sum256(data)
			s.put(t, names[i], data)
		}()
	}
	wg.Wait()
	const limit = 256 << 20
	m := mount(t, s, "--memory-limit", "256MiB", "--metrics-addr", freeAddr(t))

	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Open(filepath.Join(m.dir, names[i]))
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			h := sha256.New()
			if _, err := io.CopyBuffer(h, f, make([]byte, 1<<20)); err != nil {
				errs <- err
				return
			}
			if [32]byte(h.Sum(nil)) != sums[i] {
				errs <- fmt.Errorf("%s: content differs", names[i])
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	peak := m.metric(t, "ferry_readahead_budget_peak_bytes", nil)
	hwm := m.vmHWM(t)
	t.Logf("accounted peak %.0f MiB, VmHWM %.0f MiB, limit %d MiB", peak/(1<<20), float64(hwm)/(1<<20), limit>>20)
	assert.Positive(t, peak)
	assert.LessOrEqual(t, peak, float64(limit))
	assert.LessOrEqual(t, hwm, int64(limit+96<<20))
}

// TestReadAheadAcrossFiles: a directory listed, then its files read whole
// in listing order (a training loader's first epoch), stopping one file
// short. Files are opened ahead of their readers and taken over by the
// readers' opens, every byte is right, nothing is fetched twice, and what
// the reader never asked for is at most the last file's first window.
func TestReadAheadAcrossFiles(t *testing.T) {
	s := newStore(t, "gcs")
	const size = 24<<20 + 4321
	objs := dataset(t, s, "shards", 5, size)
	m := mount(t, s, "--cache-dir", t.TempDir(), "--metrics-addr", freeAddr(t))
	ents, err := os.ReadDir(filepath.Join(m.dir, "shards"))
	require.NoError(t, err)
	require.Len(t, ents, 5)
	served := s.bytesServed()
	for _, e := range ents[:4] {
		name := "shards/" + e.Name()
		requireSameFile(t, filepath.Join(m.dir, name), objs[name])
	}
	taken := m.metric(t, "ferry_fs_files_read_ahead_taken_total", nil)
	started := m.metric(t, "ferry_fs_files_read_ahead_total", nil)
	assert.GreaterOrEqual(t, taken, 1.0, "no file was read ahead of its reader")
	assert.Positive(t, m.metric(t, "ferry_readahead_ahead_bytes_total", nil), "nothing fetched before a reader came")
	// The 5th may have been opened ahead; nobody takes it.
	assert.LessOrEqual(t, started, taken+1)
	// Let the 5th file's window arrive, if it was opened ahead.
	settled := s.bytesServed()
	require.Eventually(t, func() bool {
		now := s.bytesServed()
		defer func() { settled = now }()
		return now == settled
	}, 30*time.Second, 300*time.Millisecond)
	window := int64(size / 4) // a 24 MiB file's first window
	assert.LessOrEqual(t, s.bytesServed()-served, int64(4*size)+window+256<<10, "bytes fetched twice, or more than one window for nobody")
}

// readRecords reads 256 KiB records of the object at each offset, 4 at a
// time through one handle per object, as a random-access data loader
// does, and checks each byte.
func readRecords(t *testing.T, m *mounted, objs map[string][]byte, offs []int64) {
	t.Helper()
	const rec = 256 << 10
	for name, want := range objs {
		f, err := os.Open(filepath.Join(m.dir, name))
		require.NoError(t, err)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 4)
		for _, off := range offs {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				p := make([]byte, rec)
				n, err := f.ReadAt(p, off)
				if n < rec && !assert.ErrorIs(t, err, io.EOF) {
					return
				}
				assert.True(t, bytes.Equal(want[off:off+int64(n)], p[:n]), "%s at %d: wrong bytes", name, off)
			}()
		}
		wg.Wait()
		require.NoError(t, f.Close())
	}
}

// TestSplicedRandomRecords: records read at random, once to fill the
// cache and once more to check its blocks, are then answered by splicing
// from the cache files, with the files opened for direct I/O: no store
// read, and every byte right. A byte flipped in a cache file while
// mounted is caught (the file changed since its blocks were checked),
// never served, and fetched again. With --cache-passthrough=false
// nothing is spliced.
func TestSplicedRandomRecords(t *testing.T) {
	s := newStore(t, "gcs")
	objs := dataset(t, s, "shards", 2, 32<<20)
	// Unaligned records 2 MiB apart, shuffled: none is within readahead's
	// gap tolerance (1 MiB) of another, so no readahead fetches more.
	offs := make([]int64, 0, 16)
	for i := range int64(16) {
		offs = append(offs, (i*7)%16*(2<<20)+300000+i*37)
	}
	cacheDir := t.TempDir()
	m := mount(t, s, "--cache-dir", cacheDir, "--metadata-ttl", "-1", "--metrics-addr", freeAddr(t))
	readRecords(t, m, objs, offs) // fills the cache
	dropCaches(t)
	reads := storeReads(t, m)
	readRecords(t, m, objs, offs) // checks the blocks
	assert.Equal(t, reads, storeReads(t, m), "epoch 2 read from the store")
	assert.Zero(t, m.metric(t, "ferry_fs_spliced_reads_total", nil), "spliced before any block was checked")
	if m.metric(t, "ferry_fs_direct_opens_total", nil) == 0 {
		t.Logf("no direct opens: the kernel lacks FUSE_DIRECT_IO_ALLOW_MMAP (log in %s)", m.log)
	}
	dropCaches(t)
	readRecords(t, m, objs, offs)
	assert.Equal(t, reads, storeReads(t, m), "epoch 3 read from the store")
	spliced := m.metric(t, "ferry_fs_spliced_reads_total", nil)
	assert.Positive(t, spliced)
	assert.Positive(t, m.metric(t, "ferry_cache_spliced_bytes_total", nil))

	// A byte of a record, flipped behind ferry's back.
	files := cacheDataFiles(t, cacheDir)
	require.Len(t, files, len(objs))
	fh, err := os.OpenFile(files[0], os.O_RDWR, 0)
	require.NoError(t, err)
	b := make([]byte, 1)
	_, err = fh.ReadAt(b, offs[3]+1000)
	require.NoError(t, err)
	b[0] ^= 0x01
	_, err = fh.WriteAt(b, offs[3]+1000)
	require.NoError(t, err)
	require.NoError(t, fh.Close())
	dropCaches(t)
	readRecords(t, m, objs, offs)
	assert.EqualValues(t, 1, m.metric(t, "ferry_cache_corrupt_blocks_total", nil))
	assert.Greater(t, storeReads(t, m), reads, "the flipped block is fetched again")
	m.unmount(t)

	m = mount(t, s, "--cache-dir", cacheDir, "--metadata-ttl", "-1", "--cache-passthrough=false", "--metrics-addr", freeAddr(t))
	for range 3 {
		dropCaches(t)
		readRecords(t, m, objs, offs)
	}
	assert.Zero(t, m.metric(t, "ferry_fs_spliced_reads_total", nil))
	assert.Zero(t, m.metric(t, "ferry_fs_direct_opens_total", nil))
}
