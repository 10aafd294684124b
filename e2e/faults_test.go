package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readBound is how long any single test read may take before the test
// calls it hung. It is a guard, not a timing assertion.
const readBound = 90 * time.Second

// readFileWithin reads path, failing the test if the read hangs.
func readFileWithin(t *testing.T, path string) ([]byte, error) {
	t.Helper()
	var data []byte
	err := within(readBound, func() error {
		var err error
		data, err = os.ReadFile(path)
		return err
	})
	require.NotErrorIs(t, err, errTimeout, "reading %s hung", path)
	return data, err
}

// TestStoreFaultsAreRetried: a connection reset mid-body, 500, 503 and
// 429 answers with Retry-After, and a body that stalls are retried: every
// read returns the right bytes, and the retries are counted.
func TestStoreFaultsAreRetried(t *testing.T) {
	faults := []struct {
		name string
		f    fault
	}{
		{"reset mid-body", fault{kind: faultReset, times: 2}},
		{"500", fault{kind: faultStatus, status: 500, times: 2}},
		{"503 Retry-After", fault{kind: faultStatus, status: 503, retryAfter: "1", times: 2}},
		{"429 Retry-After", fault{kind: faultStatus, status: 429, retryAfter: "1", times: 2}},
		{"stalled body", fault{kind: faultStall, times: 1}},
	}
	for _, kind := range []string{"gcs", "s3"} {
		t.Run(kind, func(t *testing.T) {
			s := newStore(t, kind)
			objs := dataset(t, s, "f", len(faults), 3<<20+77)
			p, via := newFaultProxy(t, s)
			m := mount(t, via, "--store-timeout", "2s", "--metrics-addr", freeAddr(t))
			for i, fc := range faults {
				t.Run(fc.name, func(t *testing.T) {
					name := fmt.Sprintf("f/obj%03d", i)
					injected, retries := p.injected.Load(), m.metric(t, "ferry_store_retries_total", nil)
					p.setFault(fc.f)
					defer p.setFault(fault{})
					got, err := readFileWithin(t, filepath.Join(m.dir, name))
					require.NoError(t, err)
					require.True(t, bytes.Equal(objs[name], got), "%s: wrong bytes (first difference at %d)", name, firstDiff(got, objs[name]))
					assert.Positive(t, p.injected.Load()-injected, "no fault was injected")
					assert.Positive(t, m.metric(t, "ferry_store_retries_total", nil)-retries, "retries not counted")
				})
			}
		})
	}
}

// TestStoreDown: with the store down, reads of uncached data fail with
// EIO in bounded time, cached data is still served, and once the store
// is back reads work again without a remount.
func TestStoreDown(t *testing.T) {
	for _, kind := range []string{"gcs", "s3"} {
		t.Run(kind, func(t *testing.T) {
			s := newStore(t, kind)
			cached := dataset(t, s, "cached", 3, 1<<20+5)
			uncached := dataset(t, s, "uncached", 2, 1<<20+7)
			p, via := newFaultProxy(t, s)
			m := mount(t, via, "--cache-dir", t.TempDir(), "--metadata-ttl", "-1",
				"--store-timeout", "2s", "--retry-max-time", "5s", "--metrics-addr", freeAddr(t))
			// Metadata for everything, data for the cached set.
			out, err := exec.Command("ls", "-lR", m.dir).CombinedOutput()
			require.NoError(t, err, "%s", out)
			readAll(t, m, cached)

			p.setDown(t, true)
			dropCaches(t)
			start := time.Now()
			_, err = readFileWithin(t, filepath.Join(m.dir, "uncached/obj000"))
			require.ErrorIs(t, err, syscall.EIO, "an uncached read with the store down")
			t.Logf("%s: EIO after %v", kind, time.Since(start).Round(time.Millisecond))
			// Not sooner: a store back within --retry-max-time is reached.
			assert.GreaterOrEqual(t, time.Since(start), 4*time.Second, "retried for --retry-max-time (5s)")
			readAll(t, m, cached)

			// Back: noticed by the next probe (every second), then read.
			p.setDown(t, false)
			require.Eventually(t, func() bool { return m.metric(t, "ferry_store_down", nil) == 0 },
				30*time.Second, 50*time.Millisecond, "the store's return never noticed")
			readAll(t, m, uncached)
		})
	}
}

// readChunks reads f in 1 MiB pieces from off and compares each with
// want; it returns the first read error (nil at the end). A piece that
// matches neither want is a mix of versions, which must never happen.
func readChunks(t *testing.T, f *os.File, off int64, want []byte) error {
	t.Helper()
	buf := make([]byte, 1<<20)
	for off < int64(len(want)) {
		n, err := f.ReadAt(buf, off)
		if n > 0 {
			require.True(t, bytes.Equal(buf[:n], want[off:off+int64(n)]),
				"bytes at %d are not the version the file was opened at", off)
		}
		off += int64(n)
		if err != nil && !(errors.Is(err, io.EOF) && off == int64(len(want))) {
			return err
		}
	}
	return nil
}

// TestObjectChangesUnderOpenFile: an object overwritten while a handle
// reads it gives the old bytes or ESTALE, never a mix; deleted gives the
// old bytes, ESTALE or ENOENT; with TTL 0 the next open reads the new
// version.
func TestObjectChangesUnderOpenFile(t *testing.T) {
	for _, kind := range []string{"gcs", "s3"} {
		t.Run(kind, func(t *testing.T) {
			s := newStore(t, kind)
			const size = 24 << 20
			v1, v2 := content(kind+"v1", size), content(kind+"v2", size)
			s.put(t, "obj", v1)
			m := mount(t, s, "--cache-dir", t.TempDir(), "--metadata-ttl", "0", "--negative-ttl", "0")
			path := filepath.Join(m.dir, "obj")

			f, err := os.Open(path)
			require.NoError(t, err)
			defer f.Close()
			head := make([]byte, 1<<20)
			_, err = io.ReadFull(f, head)
			require.NoError(t, err)
			require.Equal(t, v1[:len(head)], head)

			s.put(t, "obj", v2)
			dropCaches(t)
			err = readChunks(t, f, int64(len(head)), v1)
			if err != nil {
				require.ErrorIs(t, err, syscall.ESTALE)
			}
			t.Logf("%s: overwritten under an open file: %v", kind, err)
			require.NoError(t, f.Close())

			// TTL 0: a new open sees the new version.
			got, err := readFileWithin(t, path)
			require.NoError(t, err)
			require.True(t, bytes.Equal(v2, got), "the next open must read the new version")

			f2, err := os.Open(path)
			require.NoError(t, err)
			defer f2.Close()
			_, err = io.ReadFull(f2, head)
			require.NoError(t, err)
			require.Equal(t, v2[:len(head)], head)
			require.NoError(t, s.w.Delete(t.Context(), "obj"))
			dropCaches(t)
			err = readChunks(t, f2, int64(len(head)), v2)
			if err != nil {
				assert.True(t, errors.Is(err, syscall.ESTALE) || errors.Is(err, syscall.ENOENT), "deleted under an open file: %v", err)
			}
			t.Logf("%s: deleted under an open file: %v", kind, err)
			_, err = os.Stat(path)
			require.ErrorIs(t, err, os.ErrNotExist)
		})
	}
}

// logLines counts the lines of m's log that contain s.
func logLines(t *testing.T, m *mounted, s string) int {
	t.Helper()
	b, err := os.ReadFile(m.log)
	require.NoError(t, err)
	n := 0
	for _, line := range bytes.Split(b, []byte("\n")) {
		if bytes.Contains(line, []byte(s)) {
			n++
		}
	}
	return n
}

// tmpfs mounts a tmpfs of size bytes on a fresh directory, unmounted when
// the test ends (after the mounts registered later, which use it).
func tmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount tmpfs %s: %v: %s", dir, err, out)
			_ = exec.Command("umount", "-l", dir).Run()
		}
	})
	return dir
}

// TestCacheFileTruncated: cache files cut short behind ferry's back are
// detected (missing bytes fail the CRC check), counted, logged once, and
// fetched again.
func TestCacheFileTruncated(t *testing.T) {
	s := newStore(t, "s3")
	objs, cacheDir, files := filledCache(t, s)
	for _, f := range files {
		require.NoError(t, os.Truncate(f, 1<<20+100))
	}
	dropCaches(t)

	m2 := mount(t, s, "--cache-dir", cacheDir, "--metrics-addr", freeAddr(t))
	readAll(t, m2, objs)
	assert.Positive(t, m2.metric(t, "ferry_cache_corrupt_blocks_total", nil), "truncated blocks must be detected")
	assert.Positive(t, storeReads(t, m2))
	assert.Equal(t, 1, logLines(t, m2, "failed its checksum"), "one log line")
	dropCaches(t)
	reads := storeReads(t, m2)
	readAll(t, m2, objs)
	assert.Equal(t, reads, storeReads(t, m2), "the repaired cache serves everything")
}

// TestCacheDirDeletedWhileMounted: rm -rf of the cache directory under a
// live mount: reads stay correct and go to the store, the directory is
// not recreated, and each loss is logged at most once.
func TestCacheDirDeletedWhileMounted(t *testing.T) {
	s := newStore(t, "gcs")
	a := dataset(t, s, "a", 3, 1<<20+1)
	b := dataset(t, s, "b", 3, 1<<20+2)
	cacheDir := t.TempDir()
	m := mount(t, s, "--cache-dir", cacheDir, "--metadata-ttl", "-1", "--metrics-addr", freeAddr(t))
	readAll(t, m, a)
	require.NoError(t, os.RemoveAll(cacheDir))
	dropCaches(t)
	readAll(t, m, a)
	readAll(t, m, b)
	// Files ferry holds open survive the rm (their blocks are still
	// served); the ones it must reopen are logged as vanished, once.
	assert.LessOrEqual(t, logLines(t, m, "cache file vanished"), 1, "at most one log line")
	// The cache is not rebuilt (it would have neither its lock nor its
	// index): reads go to the store, right, and the failed writes are
	// logged once.
	dropCaches(t)
	reads := storeReads(t, m)
	readAll(t, m, b)
	assert.Greater(t, storeReads(t, m), reads, "b comes from the store")
	_, err := os.Stat(cacheDir)
	assert.ErrorIs(t, err, os.ErrNotExist, "the cache directory is not recreated")
	assert.Equal(t, 1, logLines(t, m, "cache write failed"), "one log line")
}

// TestCacheDirReadOnly: the cache's volume has gone read-only (a failing
// SSD is remounted ro by the kernel) when ferry restarts: the mount still
// comes up, without the disk cache, serves correct bytes from the store,
// and says so once in the log and in a metric.
func TestCacheDirReadOnly(t *testing.T) {
	s := newStore(t, "s3")
	a := dataset(t, s, "a", 3, 1<<20+1)
	cacheDir := tmpfs(t, "64m")
	m := mount(t, s, "--cache-dir", cacheDir, "--cache-min-free", "0")
	readAll(t, m, a)
	m.unmount(t)
	// Remounting read-only needs no file open for writing: ferry is gone.
	out, err := exec.Command("mount", "-o", "remount,ro", cacheDir).CombinedOutput()
	require.NoError(t, err, "%s", out)

	dropCaches(t)
	m2 := mount(t, s, "--cache-dir", cacheDir, "--cache-min-free", "0", "--metrics-addr", freeAddr(t))
	readAll(t, m2, a)
	assert.Equal(t, float64(1), m2.metric(t, "ferry_cache_disabled", nil))
	assert.Positive(t, storeReads(t, m2))
	assert.Equal(t, 1, logLines(t, m2, "disk cache unavailable"), "one log line")
	m2.unmount(t)

	// A cache directory not created yet on that volume: the same.
	m3 := mount(t, s, "--cache-dir", filepath.Join(cacheDir, "new"), "--cache-min-free", "0", "--metrics-addr", freeAddr(t))
	readAll(t, m3, a)
	assert.Equal(t, float64(1), m3.metric(t, "ferry_cache_disabled", nil))
	assert.Equal(t, 1, logLines(t, m3, "disk cache unavailable"), "one log line")
}

// TestCacheDiskFull: the cache directory is a small tmpfs that another
// file fills up: reads stay correct and come from the store; once space
// is back the cache works again.
func TestCacheDiskFull(t *testing.T) {
	s := newStore(t, "gcs")
	a := dataset(t, s, "a", 2, 2<<20+1)
	b := dataset(t, s, "b", 4, 2<<20+2)
	c := dataset(t, s, "c", 2, 1<<20+3)
	cacheDir := tmpfs(t, "8m")
	m := mount(t, s, "--cache-dir", cacheDir, "--cache-size", "64MiB", "--cache-min-free", "0",
		"--metadata-ttl", "-1", "--metrics-addr", freeAddr(t))
	readAll(t, m, a)
	// Someone else fills the disk.
	filler := filepath.Join(cacheDir, "filler")
	fh, err := os.Create(filler)
	require.NoError(t, err)
	_, err = io.Copy(fh, io.LimitReader(zeroReader{}, 16<<20))
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.NoError(t, fh.Close())

	readAll(t, m, b)
	dropCaches(t)
	readAll(t, m, b)
	writeErrs, evictions := m.metric(t, "ferry_cache_write_errors_total", nil), m.metric(t, "ferry_cache_evictions_total", nil)
	t.Logf("disk full: %v write errors, %v evictions", writeErrs, evictions)
	failed := writeErrs + evictions
	assert.Positive(t, failed, "a full disk must show in the metrics")
	if writeErrs > 0 {
		assert.Equal(t, 1, logLines(t, m, "cache write failed"), "one log line")
	}

	require.NoError(t, os.Remove(filler))
	readAll(t, m, c)
	dropCaches(t)
	reads := storeReads(t, m)
	readAll(t, m, c)
	assert.Equal(t, reads, storeReads(t, m), "with space back, the cache serves again")
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
