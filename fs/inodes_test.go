package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInodesStayWithinTheLimit: looking up many more files than the
// metadata limit has room for, the kernel is asked to forget names, and
// forgets them: the inodes ferry holds stay near their half of the
// limit, the files still read right, and the counts add up.
func TestInodesStayWithinTheLimit(t *testing.T) {
	b := newTestBucket()
	const n = 3000
	for i := range n {
		b.put(fmt.Sprintf("d%d/f%04d", i%4, i), []byte(fmt.Sprint(i)))
	}
	const limit = 512 << 10
	dir, fsys := mount(t, b, func(tc *testConfig) {
		tc.MetadataTTL, tc.NegativeTTL, tc.MetadataLimit = -1, -1, limit
	}, MountOptions{})
	perInode := inodeBytes(&inode{path: "d0/f0000", obj: inode{}.obj})
	for i := range n {
		_, err := os.Stat(filepath.Join(dir, fmt.Sprintf("d%d/f%04d", i%4, i)))
		require.NoError(t, err)
	}
	// Forgets come after the kernel drops the names: wait for them.
	require.Eventually(t, func() bool {
		fsys.mu.Lock()
		defer fsys.mu.Unlock()
		return fsys.trim.bytes <= limit/2
	}, 10*time.Second, 10*time.Millisecond, "inodes over their half of the limit")
	fsys.mu.Lock()
	trimmed, live := fsys.trim.trimmed, len(fsys.inodes)
	fsys.mu.Unlock()
	assert.Positive(t, trimmed)
	assert.Less(t, live, n/2, "of %d files looked up (%d bytes an inode)", n, perInode)
	assert.LessOrEqual(t, fsys.meta.Bytes(), int64(limit)+perInode*64)
	t.Logf("%d names forgotten, %d inodes live, %d bytes of metadata", trimmed, live, fsys.meta.Bytes())

	for _, i := range []int{0, 1, n / 2, n - 1} {
		got, err := readFile(filepath.Join(dir, fmt.Sprintf("d%d/f%04d", i%4, i)))
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprint(i), string(got))
	}
	fsys.checkInvariants()
}
