package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFileSourceSymlinks: through a real background mount of a file://
// source, a symbolic link to a file or a directory inside it reads as what
// it names; links out of it, to nothing and round loops are not there,
// and the daemon's log says why once.
func TestFileSourceSymlinks(t *testing.T) {
	s := newStore(t, "file")
	src := strings.TrimPrefix(s.url, "file://")
	s.put(t, "data/shard-0", content("shard-0", 100<<10))
	s.put(t, "data/sub/labels.txt", []byte("cat\ndog\n"))
	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("secret"), 0o644))
	for link, target := range map[string]string{
		"latest":  "data",                       // a directory
		"first":   "data/shard-0",               // a file
		"labels":  src + "/data/sub/labels.txt", // absolute, inside
		"escape":  secret,                       // out of the source
		"up":      "..",                         // out of the source
		"data/up": "..",                         // the source itself: a loop
		"loop":    "loop",
		"gone":    "nothing",
	} {
		require.NoError(t, os.Symlink(target, filepath.Join(src, link)))
	}
	m := mount(t, s, "--metrics-addr", freeAddr(t))

	entries, err := os.ReadDir(m.dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{"data", "first", "labels", "latest"}, names)
	requireSameFile(t, filepath.Join(m.dir, "first"), content("shard-0", 100<<10))
	requireSameFile(t, filepath.Join(m.dir, "latest", "shard-0"), content("shard-0", 100<<10))
	requireSameFile(t, filepath.Join(m.dir, "labels"), []byte("cat\ndog\n"))
	fi, err := os.Lstat(filepath.Join(m.dir, "latest"))
	require.NoError(t, err)
	assert.True(t, fi.IsDir(), "a link to a directory is a directory")
	for _, name := range []string{"escape", "up", "data/up", "loop", "gone", "latest/up/first"} {
		_, err := os.Stat(filepath.Join(m.dir, name))
		assert.ErrorIs(t, err, os.ErrNotExist, name)
	}

	assert.Positive(t, m.metric(t, "ferry_file_hidden_links_total", nil))
	logs, err := os.ReadFile(m.log)
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(logs), "hiding symbolic links of the source"), "logged once:\n%s", logs)
}

// TestWarmCheckWithoutDiskCache: `ferry warm --check` on a mount without
// a disk cache says so once, with what to do, and prints no figures.
func TestWarmCheckWithoutDiskCache(t *testing.T) {
	s := newStore(t, "file")
	s.put(t, "train/a", []byte("a"))
	m := mount(t, s)
	out, errOut, code := ferryCmd(t, "", "warm", "--check", m.dir)
	assert.Equal(t, 1, code)
	assert.Empty(t, out)
	assert.Equal(t, "ferry: warm --check: "+m.dir+": the mount has no disk cache: nothing to check (mount it with --cache-dir to keep what is read on local disk)\n", errOut)
}
