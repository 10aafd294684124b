package fs

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/jacobsa/fuse/fuseops"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/bucket/mem"
)

func TestReadDirPagingAndOffsets(t *testing.T) {
	b := newTestBucket()
	var want []string
	for i := range 1500 {
		name := fmt.Sprintf("file-%04d", i)
		b.put("big/"+name, []byte("x"))
		want = append(want, name)
	}
	// A file and a directory named "x" land on different pages (page size
	// 7): the directory wins, once.
	b.put("big/x", nil)
	b.put("big/x.0", nil)
	b.put("big/x.1", nil)
	b.put("big/x.2", nil)
	b.put("big/x.3", nil)
	b.put("big/x.4", nil)
	b.put("big/x.5", nil)
	b.put("big/x/child", nil)
	b.put("big/../escape", nil)
	b.put("big/.", nil)
	b.put("big/"+strings.Repeat("L", 300), nil)
	want = append(want, "x", "x.0", "x.1", "x.2", "x.3", "x.4", "x.5")
	sort.Strings(want)

	fs := newTestFS(t, b, newFakeClock(), func(c *testConfig) { c.ListPageSize = 7 })
	big, err := lookUp(fs, fuseops.RootInodeID, "big")
	require.NoError(t, err)
	ds := readDir(t, fs, big.Child, 300, false)
	assert.Equal(t, want, names(ds))
	for i, d := range ds {
		assert.Equal(t, uint64(i+1), d.off)
		if d.name == "x" {
			assert.Equal(t, uint32(syscall.DT_DIR), d.typ)
		}
	}
	assert.Equal(t, uint64(3), fs.meta.Hidden())
	assert.Greater(t, b.Stats().Lists, int64(1500/7))

	// Offsets are stable within a handle: reading again from the middle
	// gives the same entries.
	ctx := context.Background()
	open := &fuseops.OpenDirOp{Inode: big.Child}
	require.NoError(t, fs.OpenDir(ctx, open))
	first := &fuseops.ReadDirOp{Handle: open.Handle, Dst: make([]byte, 4096)}
	require.NoError(t, fs.ReadDir(ctx, first))
	mid := &fuseops.ReadDirOp{Handle: open.Handle, Offset: 100, Dst: make([]byte, 4096)}
	require.NoError(t, fs.ReadDir(ctx, mid))
	again := &fuseops.ReadDirOp{Handle: open.Handle, Offset: 100, Dst: make([]byte, 4096)}
	require.NoError(t, fs.ReadDir(ctx, again))
	assert.Equal(t, parseDirents(mid.Dst[:mid.BytesRead], false), parseDirents(again.Dst[:again.BytesRead], false))
	assert.Equal(t, want[100], parseDirents(mid.Dst[:mid.BytesRead], false)[0].name)
	past := &fuseops.ReadDirOp{Handle: open.Handle, Offset: 100000, Dst: make([]byte, 4096)}
	require.NoError(t, fs.ReadDir(ctx, past))
	assert.Zero(t, past.BytesRead)
	require.NoError(t, fs.ReleaseDirHandle(ctx, &fuseops.ReleaseDirHandleOp{Handle: open.Handle}))
}

func TestReadDirError(t *testing.T) {
	b := newTestBucket()
	b.put("f", nil)
	fs := newTestFS(t, b, nil, func(c *testConfig) { c.MetadataTTL = 0 })
	b.SetFaults(mem.Faults{List: func(ctx context.Context, req *bucket.ListRequest) error {
		return fmt.Errorf("list: %w", bucket.ErrPermission)
	}})
	ctx := context.Background()
	open := &fuseops.OpenDirOp{Inode: fuseops.RootInodeID}
	require.NoError(t, fs.OpenDir(ctx, open))
	op := &fuseops.ReadDirOp{Handle: open.Handle, Dst: make([]byte, 4096)}
	assert.Equal(t, syscall.EACCES, fs.ReadDir(ctx, op))
}

// usedListing makes dir a directory whose listings are used
// (listuse.go), so that every page of its next listing gives attributes:
// it lists dir in one page and looks up every entry, then gives back the
// references that took.
func usedListing(t *testing.T, fs *fileSystem, dir fuseops.InodeID) {
	t.Helper()
	ctx := context.Background()
	for _, de := range readDir(t, fs, dir, 1<<16, true) {
		e, err := lookUp(fs, dir, de.name)
		require.NoError(t, err)
		require.Equal(t, de.ino, uint64(e.Child))
		require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: e.Child, N: 2}))
	}
}

func TestReadDirPlusTakesReferences(t *testing.T) {
	b := newTestBucket()
	b.put("d/a", []byte("aa"))
	b.put("d/b/c", nil)
	b.put("d/e", []byte("eeee"))
	fs := newTestFS(t, b, newFakeClock(), nil)
	d, err := lookUp(fs, fuseops.RootInodeID, "d")
	require.NoError(t, err)
	usedListing(t, fs, d.Child)
	require.Equal(t, 2, fs.inodeCount())
	// 200 bytes fit one direntplus at a time: every call is partial.
	ds := readDir(t, fs, d.Child, 200, true)
	require.Equal(t, []string{"a", "b", "e"}, names(ds))
	require.Equal(t, 5, fs.inodeCount())
	fs.checkInvariants()

	// A plain lookup finds the same inodes; each entry was one reference.
	e, err := lookUp(fs, d.Child, "e")
	require.NoError(t, err)
	assert.Equal(t, ds[2].ino, uint64(e.Child))
	assert.Equal(t, uint64(4), e.Attributes.Size)
	ctx := context.Background()
	for _, de := range ds {
		require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: fuseops.InodeID(de.ino), N: 1}))
	}
	require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: e.Child, N: 1}))
	require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: d.Child, N: 1}))
	assert.Equal(t, 1, fs.inodeCount())
}

// TestOpenDirHandleIsCharged: what an open directory handle's listing
// holds counts in the metadata's bytes until the handle is released,
// and an unmount releases handles the kernel did not.
func TestOpenDirHandleIsCharged(t *testing.T) {
	b := newTestBucket()
	for i := range 3000 {
		b.put(fmt.Sprintf("d/file-%05d", i), nil)
	}
	fs := newTestFS(t, b, newFakeClock(), func(c *testConfig) { c.ListPageSize = 1000 })
	ctx := context.Background()
	d, err := lookUp(fs, fuseops.RootInodeID, "d")
	require.NoError(t, err)
	base := fs.meta.Bytes()

	open := func() (fuseops.HandleID, *dirHandle) {
		op := &fuseops.OpenDirOp{Inode: d.Child}
		require.NoError(t, fs.OpenDir(ctx, op))
		// One small read: the first page of the store's listing.
		rd := &fuseops.ReadDirOp{Inode: d.Child, Handle: op.Handle, Dst: make([]byte, 4096)}
		require.NoError(t, fs.ReadDir(ctx, rd))
		h, err := fs.dirHandle(op.Handle)
		require.NoError(t, err)
		require.Equal(t, 1000, h.list.Len())
		return op.Handle, h
	}
	h1, d1 := open()
	one := d1.list.Charged()
	assert.Greater(t, one, int64(1000*36), "at least the packed entries of a page")
	assert.Equal(t, base+one, fs.meta.Bytes())
	_, d2 := open()
	assert.Equal(t, base+one+d2.list.Charged(), fs.meta.Bytes(), "each handle its own")

	require.NoError(t, fs.ReleaseDirHandle(ctx, &fuseops.ReleaseDirHandleOp{Handle: h1}))
	assert.Equal(t, base+d2.list.Charged(), fs.meta.Bytes(), "released")
	fs.Destroy()
	assert.Equal(t, base, fs.meta.Bytes(), "released at unmount")
}
