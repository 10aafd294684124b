package fs

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/jacobsa/fuse/fuseops"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/metadata"
)

// heapInUse is the bytes of live heap objects, after a collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestInodeBytesAreWhatIsCharged: the memory the kernel's inodes hold is
// what the metadata limit is charged for them (inodeBytes), within a
// quarter, so that the bound holds what it says; and an inode of a file
// the kernel looked up but never opened costs at most 252 bytes with
// its two map slots and its path and version of 43 bytes (kept as one
// string, not two).
func TestInodeBytesAreWhatIsCharged(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(inode{}), uintptr(96), "the inode struct")
	fs := newTestFS(t, newTestBucket(), nil, nil)
	const n = 50_000
	updated := time.Unix(1800000000, 0)
	before := heapInUse()
	var charged int64
	fs.mu.Lock()
	for i := range n {
		// The path and version in one allocation, as a listing's entry
		// has them (metadata.DirEntry), and the path again, as a lookup
		// makes it from its parent's and the name.
		path := fmt.Sprintf("train/n%05d/%012d", i%1000, i)
		full := fmt.Sprintf("%s512-%015d", path, i)
		e := metadata.Entry{Kind: metadata.File, Obj: bucket.Object{
			Name: full[:len(path)], Size: 512, Version: full[len(path):], Updated: updated}}
		in := fs.acquire(path, e)
		charged += inodeBytes(in)
	}
	fs.mu.Unlock()
	used := heapInUse() - before
	per := float64(used) / n
	t.Logf("inodes: %.0f bytes each in the heap, %.0f charged", per, float64(charged)/n)
	assert.InDelta(t, 1, float64(charged)/float64(used), 0.25, "charged %d bytes for %d in use", charged, used)
	assert.LessOrEqual(t, per, 252.0)
	runtime.KeepAlive(fs)
}

// TestPerFileAllocations: the heap allocations of a file's round of
// operations on names the metadata cache holds (a listed directory):
// a lookup allocates the path and the entry's copy of path and version,
// and a new inode only itself (its open state waits for an open); an
// open and release with the test's reader, the handle, the reader and
// the entry of the open's check for a newer version; getattr nothing.
func TestPerFileAllocations(t *testing.T) {
	b := newTestBucket()
	b.put("d/f", make([]byte, 512))
	b.put("d/g", make([]byte, 512))
	fs := newTestFS(t, b, nil, func(c *testConfig) { c.MetadataTTL, c.NegativeTTL = -1, -1 })
	ctx := context.Background()
	d, err := lookUp(fs, fuseops.RootInodeID, "d")
	require.NoError(t, err)
	readDir(t, fs, d.Child, 4096, false) // the listing answers from now on
	f, err := lookUp(fs, d.Child, "f")
	require.NoError(t, err)
	open := func() {
		op := &fuseops.OpenFileOp{Inode: f.Child}
		require.NoError(t, fs.OpenFile(ctx, op))
		require.NoError(t, fs.ReleaseFileHandle(ctx, &fuseops.ReleaseFileHandleOp{Handle: op.Handle}))
	}
	open() // the inode's open state, once

	assert.Equal(t, 2.0, testing.AllocsPerRun(100, func() {
		_, _ = lookUp(fs, d.Child, "f")
	}), "lookup of a name with an inode")
	assert.Equal(t, 3.0, testing.AllocsPerRun(100, func() {
		g, _ := lookUp(fs, d.Child, "g")
		_ = fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: g.Child, N: 1})
	}), "lookup that makes an inode, then its forget")
	assert.Equal(t, 3.0, testing.AllocsPerRun(100, open), "open and release")
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		_ = fs.GetInodeAttributes(ctx, &fuseops.GetInodeAttributesOp{Inode: f.Child})
	}), "getattr")
}
