package e2e

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStoreDownEveryOpWithinOneBudget: with the store refusing
// connections, an operation that needs it answers EIO within about one
// --retry-max-time, however many requests it makes (a lookup with
// --metadata-ttl 0 made two in turn and took twice the budget); once one
// operation has given up, the next ones fail at once, and the store's
// return is noticed within a few seconds. (TestStoreDown shows cached
// bytes and metadata served throughout.)
func TestStoreDownEveryOpWithinOneBudget(t *testing.T) {
	const budget = 5 * time.Second
	s := newStore(t, "gcs")
	dataset(t, s, "known", 3, 4096)
	p, via := newFaultProxy(t, s)
	m := mount(t, via, "--metadata-ttl", "0", "--negative-ttl", "0",
		"--store-timeout", "2s", "--retry-max-time", budget.String(), "--metrics-addr", freeAddr(t))
	out, err := exec.Command("ls", "-lR", m.dir).CombinedOutput()
	require.NoError(t, err, "%s", out)

	p.setDown(t, true)
	stat := func(name string) (time.Duration, error) {
		start := time.Now()
		err := within(readBound, func() error {
			_, err := os.Stat(filepath.Join(m.dir, "known", name))
			return err
		})
		require.NotErrorIs(t, err, errTimeout, "stat of %s hung", name)
		return time.Since(start), err
	}
	took, err := stat("obj000")
	require.ErrorIs(t, err, syscall.EIO, "a name known before, looked up again (TTL 0)")
	t.Logf("first stat: EIO after %v", took.Round(time.Millisecond))
	assert.Less(t, took, budget+budget/2, "one retry budget, not one per request")
	assert.Equal(t, 1.0, m.metric(t, "ferry_store_down", nil))
	for _, name := range []string{"obj001", "obj002"} {
		took, err := stat(name)
		require.ErrorIs(t, err, syscall.EIO)
		assert.Less(t, took, time.Second, "the store is known down: at once")
	}

	p.setDown(t, false)
	require.Eventually(t, func() bool { _, err := stat("obj001"); return err == nil },
		30*time.Second, 100*time.Millisecond, "the store's return never noticed")
	assert.Equal(t, 0.0, m.metric(t, "ferry_store_down", nil))
	assert.Equal(t, 1.0, m.metric(t, "ferry_store_down_total", nil))
}

// TestReplacedObjectUnderForeverTTL: with --metadata-ttl -1, an object
// replaced in the store gives ESTALE to the handle opened on the old
// version, and makes ferry look the name up again: the next open reads
// the new version (it stayed ESTALE for ever before).
func TestReplacedObjectUnderForeverTTL(t *testing.T) {
	for _, kind := range []string{"gcs", "s3"} {
		t.Run(kind, func(t *testing.T) {
			s := newStore(t, kind)
			v1, v2 := content(kind+"v1", 3<<20), content(kind+"v2", 2<<20)
			s.put(t, "obj", v1)
			m := mount(t, s, "--metadata-ttl", "-1", "--negative-ttl", "-1")
			path := filepath.Join(m.dir, "obj")
			old, err := os.Open(path)
			require.NoError(t, err)
			defer old.Close()

			s.put(t, "obj", v2)
			_, err = io.ReadAll(old)
			require.ErrorIs(t, err, syscall.ESTALE, "the old version is gone")
			var got []byte
			require.Eventually(t, func() bool {
				got, err = os.ReadFile(path)
				return err == nil
			}, 10*time.Second, 50*time.Millisecond, "new opens stay stale: %v", err)
			requireSameFile(t, path, v2)
			_, err = old.ReadAt(make([]byte, 10), 0)
			assert.True(t, errors.Is(err, syscall.ESTALE), "the old handle stays stale: %v", err)
			assert.Equal(t, len(v2), len(got))
		})
	}
}

// TestNewNameFoundAfterNegativeTTL: a name created after its directory
// was listed is "no such file" for --negative-ttl, then found, under a
// forever --metadata-ttl too; --negative-ttl -1 keeps the listing's
// answer for ever.
func TestNewNameFoundAfterNegativeTTL(t *testing.T) {
	s := newStore(t, "gcs")
	s.put(t, "d/old", []byte("old"))
	found := mount(t, s, "--metadata-ttl", "-1", "--negative-ttl", "1s")
	never := mount(t, s, "--metadata-ttl", "-1", "--negative-ttl", "-1")
	for _, m := range []*mounted{found, never} {
		ents, err := os.ReadDir(filepath.Join(m.dir, "d"))
		require.NoError(t, err)
		require.Len(t, ents, 1)
	}
	s.put(t, "d/new", []byte("new"))
	for _, m := range []*mounted{found, never} {
		_, err := os.Stat(filepath.Join(m.dir, "d/new"))
		require.ErrorIs(t, err, os.ErrNotExist, "the listing's answer, at first")
	}
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(found.dir, "d/new"))
		return err == nil
	}, 10*time.Second, 100*time.Millisecond, "--negative-ttl 1s: found once it has run out")
	_, err := os.Stat(filepath.Join(never.dir, "d/new"))
	assert.ErrorIs(t, err, os.ErrNotExist, "--negative-ttl -1: the listing answers for ever")
}

// TestObjectWithoutETag: an S3 store that gives an object no ETag (a file
// written into versitygw's directory by hand) still pins every read: a
// rewrite of the same size, a second later, gives the handle opened
// before the old bytes (from memory or the disk cache) or ESTALE, never a
// mix, and the next open reads the new bytes; the log says once that
// versions are told apart by modification time and size.
func TestObjectWithoutETag(t *testing.T) {
	s := newStore(t, "s3")
	name := strings.TrimPrefix(s.url, "s3://")
	path := filepath.Join(s3Emu.BucketDir(name), "raw")
	const size = 6 << 20
	v1, v2 := content("raw v1", size), content("raw v2", size)
	past := time.Now().Add(-time.Hour).Truncate(time.Second)
	require.NoError(t, os.WriteFile(path, v1, 0o644))
	require.NoError(t, os.Chtimes(path, past, past))
	m := mount(t, s, "--cache-dir", t.TempDir(), "--metadata-ttl", "0", "--negative-ttl", "0")
	mnt := filepath.Join(m.dir, "raw")

	f, err := os.Open(mnt)
	require.NoError(t, err)
	defer f.Close()
	head := make([]byte, 1<<20)
	_, err = io.ReadFull(f, head)
	require.NoError(t, err)
	require.Equal(t, v1[:len(head)], head)

	// Replaced the way a store replaces an object: a new file renamed
	// over the old. Rewritten in place, a GET already streaming the old
	// file would read the new bytes under the old headers, which no
	// object store does.
	tmp := filepath.Join(filepath.Dir(path), ".raw.new")
	require.NoError(t, os.WriteFile(tmp, v2, 0o644))
	later := past.Add(time.Second)
	require.NoError(t, os.Chtimes(tmp, later, later))
	require.NoError(t, os.Rename(tmp, path))
	dropCaches(t)
	err = readChunks(t, f, int64(len(head)), v1)
	if err != nil {
		require.ErrorIs(t, err, syscall.ESTALE)
	}
	t.Logf("rewritten under an open file: %v", err)
	requireSameFile(t, mnt, v2)

	logs, err := os.ReadFile(m.log)
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(logs), "without an ETag"), "warned once")
}

// TestCorruptedBodyNeverServed: a small object's body corrupted on the
// way (one bit flipped, status and length right) is caught by the CRC32C
// the store gives for the object: fetched once more, the reader gets the
// right bytes; corrupted every time, the read fails with EIO, and nothing
// wrong is cached for the next epoch. GCS gives every object's CRC32C.
func TestCorruptedBodyNeverServed(t *testing.T) {
	s := newStore(t, "gcs")
	good := content("small", 200<<10)
	s.put(t, "small", good)
	s.put(t, "other", content("other", 100<<10))
	p, via := newFaultProxy(t, s)
	m := mount(t, via, "--cache-dir", t.TempDir(), "--metrics-addr", freeAddr(t))

	p.setFault(fault{kind: faultFlip, times: 1})
	requireSameFile(t, filepath.Join(m.dir, "small"), good)
	assert.Equal(t, 1.0, m.metric(t, "ferry_readahead_checksum_mismatches_total", nil))

	p.setFault(fault{kind: faultFlip}) // every body
	_, err := readFileWithin(t, filepath.Join(m.dir, "other"))
	require.ErrorIs(t, err, syscall.EIO, "corrupted every time")
	// Twice per read: the kernel may ask again after a failed readahead.
	assert.GreaterOrEqual(t, m.metric(t, "ferry_readahead_checksum_mismatches_total", nil), 3.0)

	p.setFault(fault{})
	dropCaches(t)
	requireSameFile(t, filepath.Join(m.dir, "small"), good)
	requireSameFile(t, filepath.Join(m.dir, "other"), content("other", 100<<10))
}
