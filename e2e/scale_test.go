package e2e

import (
	"bytes"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Sizes of TestManyFilesWithinTheMetadataLimit's tree: ImageNet's shape,
// 1,000 files a directory, a twenty-fifth of its size.
const (
	scaleDirs     = 50
	scalePerDir   = 1000
	scaleFileSize = 256
)

// scaleTree writes the tree into dir, eight writers at once, and returns
// the files' paths relative to it.
func scaleTree(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	for d := range scaleDirs {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, fmt.Sprintf("n%08d", d)), 0o755))
		for f := range scalePerDir {
			names = append(names, fmt.Sprintf("n%08d/n%08d_%d.JPEG", d, d, f))
		}
	}
	forEach(t, names, func(name string) error {
		return os.WriteFile(filepath.Join(dir, name), scaleContent(name), 0o644)
	})
	return names
}

func scaleContent(name string) []byte {
	return bytes.Repeat([]byte(name+"\n"), scaleFileSize/(len(name)+1)+1)[:scaleFileSize]
}

// forEach runs do for every name, eight at a time, and fails the test on
// the first error.
func forEach(t *testing.T, names []string, do func(string) error) {
	t.Helper()
	work := make(chan string)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range work {
				if err := do(name); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for _, n := range names {
		select {
		case work <- n:
		case err := <-errs:
			close(work)
			wg.Wait()
			require.NoError(t, err)
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	require.NoError(t, <-errs)
}

// TestManyFilesWithinTheMetadataLimit: 50,000 files read as a DataLoader
// reads them (listed, then opened in random order by eight readers),
// twice, on a mount whose --metadata-limit holds about a third of their
// names and inodes. What the counts must show: the metadata held stays
// within the limit (the cache evicts, the kernel forgets names), every
// byte read is right, the store is asked about each name at most twice
// an epoch (a Stat and a List of the name as a prefix, when its
// directory's listing was evicted) and for each file's bytes once in
// all, and the process stays within --memory-limit + 256 MiB. A third
// epoch, on a new ferry over the same disk cache, reads the cache's
// index lazily: every entry is cold at mount and read once as its file
// is.
func TestManyFilesWithinTheMetadataLimit(t *testing.T) {
	s := newStore(t, "file")
	src := s.url[len("file://"):]
	names := scaleTree(t, src)
	const limit = 6 << 20
	cacheDir := t.TempDir()
	flags := []string{"--metadata-ttl", "-1", "--negative-ttl", "-1", "--metadata-limit", "6MiB",
		"--memory-limit", "128MiB", "--cache-dir", cacheDir}
	m := mount(t, s, append(flags, "--metrics-addr", freeAddr(t))...)

	epoch := func() (metaRequests, reads float64) {
		meta0 := m.metric(t, "ferry_store_requests_total", map[string]string{"op": "stat"}) +
			m.metric(t, "ferry_store_requests_total", map[string]string{"op": "list"})
		reads0 := m.metric(t, "ferry_store_requests_total", map[string]string{"op": "read"})
		dropCaches(t)
		listed := 0
		require.NoError(t, filepath.WalkDir(m.dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				listed++
			}
			return err
		}))
		require.Equal(t, len(names), listed)
		order := append([]string(nil), names...)
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		forEach(t, order, func(name string) error {
			got, err := os.ReadFile(filepath.Join(m.dir, name))
			if err == nil && !bytes.Equal(got, scaleContent(name)) {
				err = fmt.Errorf("%s: wrong bytes", name)
			}
			return err
		})
		meta := m.metric(t, "ferry_store_requests_total", map[string]string{"op": "stat"}) +
			m.metric(t, "ferry_store_requests_total", map[string]string{"op": "list"})
		return meta - meta0, m.metric(t, "ferry_store_requests_total", map[string]string{"op": "read"}) - reads0
	}
	n := float64(len(names))
	for i, name := range []string{"cold", "warm", "restart"} {
		if name == "restart" {
			// A new ferry on the same cache: its index is read as the
			// files are, not at mount.
			m.unmount(t)
			m = mount(t, s, append(flags, "--metrics-addr", freeAddr(t))...)
			assert.Equal(t, n, m.metric(t, "ferry_cache_cold_entries", nil), "restart: every entry cold at mount")
			assert.Zero(t, m.metric(t, "ferry_cache_warmed_total", nil))
		}
		meta, reads := epoch()
		held := m.metric(t, "ferry_metadata_bytes", nil)
		t.Logf("%s: %.2f metadata requests and %.2f reads a file; %.1f MiB of metadata held, %.0f evictions, %.0f names forgotten, %.0f inodes, VmHWM %d MiB",
			name, meta/n, reads/n, held/(1<<20), m.metric(t, "ferry_metadata_evictions_total", nil),
			m.metric(t, "ferry_fs_names_forgotten_total", nil), m.metric(t, "ferry_fs_inodes", nil), m.vmHWM(t)>>20)
		assert.LessOrEqual(t, meta/n, 2.1, "%s: metadata requests a file", name)
		assert.LessOrEqual(t, held, float64(limit)*1.25, "%s: metadata held", name)
		if i == 0 {
			assert.Equal(t, n, reads, "cold: each file's bytes read once")
		} else {
			assert.Zero(t, reads, "%s: every byte from the disk cache", name)
		}
	}
	// Each entry read from the index when first used; a few again after
	// being cooled (at most 16,384 are held whole), 19 of 50,000 in one
	// run.
	warmed := m.metric(t, "ferry_cache_warmed_total", nil)
	assert.GreaterOrEqual(t, warmed, n, "restart: each entry read from the index")
	assert.Less(t, warmed, 1.05*n, "restart: few entries read from the index twice")
	assert.Equal(t, n, m.metric(t, "ferry_cache_entries", nil))
	assert.Less(t, m.metric(t, "ferry_cache_cold_entries", nil), n, "entries in use held whole")
	assert.Positive(t, m.metric(t, "ferry_metadata_evictions_total", nil), "the names did not fit")
	assert.Positive(t, m.metric(t, "ferry_fs_names_forgotten_total", nil), "nor did the inodes")
	assert.Less(t, m.vmHWM(t), int64(128+256)<<20, "VmHWM")
}
