package fs

import (
	"context"
	"testing"

	"github.com/jacobsa/fuse/fuseops"
	"github.com/stretchr/testify/require"
)

// readDirPlusHandle reads one readdirplus buffer from an open handle at off.
func readDirPlusHandle(t *testing.T, fs *fileSystem, h fuseops.HandleID, off fuseops.DirOffset) []dirent {
	t.Helper()
	p := &fuseops.ReadDirPlusOp{ReadDirOp: fuseops.ReadDirOp{Inode: fuseops.RootInodeID, Handle: h, Offset: off, Dst: make([]byte, 4096)}}
	require.NoError(t, fs.ReadDirPlus(context.Background(), p))
	return parseDirents(p.Dst[:p.BytesRead], true)
}

// A lookup told the kernel "f" is gone (a Stat newer than the cached
// listing); a later `ls -l` (readdirplus from the older cached listing)
// must not hand the kernel a positive dentry and inode for it again.
func TestReadDirPlusNeverResurrectsDeletedFile(t *testing.T) {
	tb := newTestBucket()
	tb.put("f", []byte("one"))
	b := &slowListBucket{testBucket: tb, gate: make(chan struct{}), listed: make(chan struct{})}
	fs := newTestFS(t, b, newFakeClock(), func(c *testConfig) { c.MetadataTTL = -1; c.NegativeTTL = -1 })
	ctx := context.Background()
	land := listBehind(t, fs, b) // the listing has f
	require.NoError(t, tb.Delete(ctx, "f"))
	_, err := lookUp(fs, fuseops.RootInodeID, "f")
	require.Error(t, err, "lookup: f is gone") // ENOENT given to the kernel
	land()                                     // older listing cached (forever)

	_, err = lookUp(fs, fuseops.RootInodeID, "f")
	require.Error(t, err, "lookups keep saying gone")
	ds := readDir(t, fs, fuseops.RootInodeID, 4096, true) // a later `ls -l`
	live := 0
	for _, d := range ds {
		fs.mu.Lock()
		if _, ok := fs.inodes[fuseops.InodeID(d.ino)]; ok && d.name == "f" {
			live++
		}
		fs.mu.Unlock()
		if d.ino != 0 && d.ino&(1<<63) == 0 {
			fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: fuseops.InodeID(d.ino), N: 1})
		}
	}
	require.Zero(t, live, "readdirplus gave the kernel an inode for a file a newer lookup said was deleted")
}

// A newer listing drops the name entry; a directory handle still holding the
// older (shared, cached) listing must not hand the kernel the older
// version's inode on readdirplus after lookups gave it the newer one.
func TestReadDirPlusOldHandleAfterNewerListing(t *testing.T) {
	tb := newTestBucket()
	tb.put("f", []byte("one"))
	fs := newTestFS(t, tb, newFakeClock(), func(c *testConfig) { c.MetadataTTL = -1; c.NegativeTTL = -1 })
	ctx := context.Background()
	for _, d := range readDir(t, fs, fuseops.RootInodeID, 4096, true) { // L1 cached: v1
		fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: fuseops.InodeID(d.ino), N: 1})
	}
	old := &fuseops.OpenDirOp{Inode: fuseops.RootInodeID} // e.g. a long-lived process that rewinds
	require.NoError(t, fs.OpenDir(ctx, old))
	tb.put("f", []byte("two!"))
	_, err := fs.invalidate(ctx, "f")
	require.NoError(t, err)
	ds := readDir(t, fs, fuseops.RootInodeID, 4096, true) // L2: v2, handed to the kernel
	require.Len(t, ds, 1)
	v2 := fuseops.InodeID(ds[0].ino)
	e, err := lookUp(fs, fuseops.RootInodeID, "f")
	require.NoError(t, err)
	require.Equal(t, v2, e.Child)
	require.Equal(t, uint64(4), e.Attributes.Size)

	ods := readDirPlusHandle(t, fs, old.Handle, 0) // rewinddir on the old handle
	require.NoError(t, fs.ReleaseDirHandle(ctx, &fuseops.ReleaseDirHandleOp{Handle: old.Handle}))
	require.Len(t, ods, 1)
	fs.mu.Lock()
	size := fs.inodes[fuseops.InodeID(ods[0].ino)].obj.size
	fs.mu.Unlock()
	fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: fuseops.InodeID(ods[0].ino), N: 1})
	fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: v2, N: 2})
	require.Equal(t, uint64(4), size, "readdirplus sent the kernel the older version after it had the newer one")
}
