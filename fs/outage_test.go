package fs

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jacobsa/fuse/fuseops"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/bucket/mem"
)

// TestOutageServesExpiredMetadata: once the TTL has run out, a store that
// cannot be reached does not make known names fail: lookup, open and
// getattr answer from what the mount knew (the bytes may be cached);
// names it never knew give EIO; the store's return renews everything.
func TestOutageServesExpiredMetadata(t *testing.T) {
	b := newTestBucket()
	b.put("d/f", []byte("cached bytes"))
	b.put("d/g", []byte("listed"))
	clock := newFakeClock()
	fs := newTestFS(t, b, clock, func(c *testConfig) { c.MetadataTTL = time.Minute })
	ctx := context.Background()
	d, err := lookUp(fs, fuseops.RootInodeID, "d")
	require.NoError(t, err)
	f, err := lookUp(fs, d.Child, "f")
	require.NoError(t, err)
	dh := &fuseops.OpenDirOp{Inode: d.Child}
	require.NoError(t, fs.OpenDir(ctx, dh))
	require.NoError(t, fs.ReadDir(ctx, &fuseops.ReadDirOp{Inode: d.Child, Handle: dh.Handle, Dst: make([]byte, 4096)}))
	require.NoError(t, fs.ReleaseDirHandle(ctx, &fuseops.ReleaseDirHandleOp{Handle: dh.Handle}))

	down := func() error { return fmt.Errorf("%w: connection refused", bucket.ErrUnavailable) }
	b.SetFaults(mem.Faults{
		Stat: func(context.Context, *bucket.StatRequest) error { return down() },
		List: func(context.Context, *bucket.ListRequest) error { return down() },
	})
	clock.Advance(61 * time.Second)

	f2, err := lookUp(fs, d.Child, "f")
	require.NoError(t, err, "a known name through an outage")
	assert.Equal(t, f.Child, f2.Child)
	g, err := lookUp(fs, d.Child, "g")
	require.NoError(t, err, "a name known from a listing")
	assert.Equal(t, uint64(6), g.Attributes.Size)
	op := &fuseops.OpenFileOp{Inode: f.Child}
	require.NoError(t, fs.OpenFile(ctx, op), "open of a known file")
	require.NoError(t, fs.ReleaseFileHandle(ctx, &fuseops.ReleaseFileHandleOp{Handle: op.Handle}))
	require.NoError(t, fs.GetInodeAttributes(ctx, &fuseops.GetInodeAttributesOp{Inode: f.Child}))
	_, err = lookUp(fs, d.Child, "never-seen")
	assert.Equal(t, syscall.ENOENT, err, "the listing said so")
	_, err = lookUp(fs, fuseops.RootInodeID, "never-seen")
	assert.Equal(t, syscall.EIO, err, "nothing known about it")
	assert.Equal(t, uint64(4), fs.meta.StaleServed())
	_, err = lookUp(fs, d.Child, "f")
	require.NoError(t, err, "again")
	require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: f.Child, N: 1}))

	// Back: the first lookup asks the store and sees the change.
	b.SetFaults(mem.Faults{})
	b.put("d/f", []byte("new bytes, longer"))
	f3, err := lookUp(fs, d.Child, "f")
	require.NoError(t, err)
	assert.NotEqual(t, f.Child, f3.Child, "the new version, a new inode")
	assert.Equal(t, uint64(17), f3.Attributes.Size)
	for _, e := range []fuseops.ChildInodeEntry{d, f, f2, g, f3} {
		require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: e.Child, N: 1}))
	}
}

// TestInterruptedLookupReturns: a lookup whose caller is interrupted
// returns EINTR at once, while the fetch it shared goes on and serves the
// next caller.
func TestInterruptedLookupReturns(t *testing.T) {
	b := newTestBucket()
	b.put("f", []byte("x"))
	gate := make(chan struct{})
	b.SetFaults(mem.Faults{Stat: func(context.Context, *bucket.StatRequest) error {
		<-gate
		return nil
	}})
	fs := newTestFS(t, b, newFakeClock(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- fs.LookUpInode(ctx, &fuseops.LookUpInodeOp{Parent: fuseops.RootInodeID, Name: "f"})
	}()
	for b.Stats().Stats == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		assert.Equal(t, syscall.EINTR, err)
	case <-time.After(10 * time.Second):
		t.Fatal("an interrupted lookup waited for the store")
	}
	close(gate)
	e, err := lookUp(fs, fuseops.RootInodeID, "f")
	require.NoError(t, err)
	require.NoError(t, fs.ForgetInode(context.Background(), &fuseops.ForgetInodeOp{Inode: e.Child, N: 1}))
	assert.Equal(t, int64(1), b.Stats().Stats, "the shared fetch served the second caller")
}
