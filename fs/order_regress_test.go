package fs

import (
	"context"
	"testing"
	"time"

	"github.com/jacobsa/fuse/fuseops"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/bucket/mem"
)

// slowStatBucket: Stat reads the store, then waits for the gate.
type slowStatBucket struct {
	*testBucket
	gate, statted chan struct{}
	armed         bool
}

func (b *slowStatBucket) Stat(ctx context.Context, req *bucket.StatRequest) (*bucket.Object, error) {
	o, err := b.testBucket.Stat(ctx, req)
	if b.armed {
		close(b.statted)
		<-b.gate
	}
	return o, err
}

// Regression (review): an expired name entry newer than a fresh listing: readdirplus hands
// the kernel the listing's (older) version.
func TestReadDirPlusPrefersExpiredNewerEntry(t *testing.T) {
	tb := newTestBucket()
	tb.put("f", []byte("one"))
	b := &slowListBucket{testBucket: tb, gate: make(chan struct{}), listed: make(chan struct{})}
	clock := newFakeClock()
	fs := newTestFS(t, b, clock, nil)
	ctx := context.Background()
	land := listBehind(t, fs, b)
	time.Sleep(2 * time.Millisecond)
	tb.put("f", []byte("two!"))
	f2, err := lookUp(fs, fuseops.RootInodeID, "f")
	require.NoError(t, err)
	require.Equal(t, uint64(4), f2.Attributes.Size)
	clock.Advance(30 * time.Second)
	land()
	clock.Advance(45 * time.Second) // entry expired, listing fresh
	ds := readDir(t, fs, fuseops.RootInodeID, 4096, true)
	require.Len(t, ds, 1)
	fs.mu.Lock()
	in := fs.inodes[fuseops.InodeID(ds[0].ino)]
	size := in.obj.size
	fs.mu.Unlock()
	t.Logf("readdirplus inode %d size %d (lookup's newer inode %d size 4)", ds[0].ino, size, f2.Child)
	require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: fuseops.InodeID(ds[0].ino), N: 1}))
	require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: f2.Child, N: 1}))
	require.Equal(t, uint64(4), size, "readdirplus sent the kernel the older version")
}

// Regression (review): a fetch that began before `ferry invalidate` lands after it and is
// cached (forever with --metadata-ttl -1).
func TestInvalidateBeatsInflightFetch(t *testing.T) {
	tb := newTestBucket()
	tb.put("f", []byte("one"))
	b := &slowStatBucket{testBucket: tb, gate: make(chan struct{}), statted: make(chan struct{})}
	fs := newTestFS(t, b, newFakeClock(), func(c *testConfig) { c.MetadataTTL = -1; c.NegativeTTL = -1 })
	ctx := context.Background()
	b.armed = true
	res := make(chan fuseops.ChildInodeEntry, 1)
	go func() {
		e, err := lookUp(fs, fuseops.RootInodeID, "f")
		require.NoError(t, err)
		res <- e
	}()
	<-b.statted // the Stat saw v1
	b.armed = false
	tb.put("f", []byte("two!"))
	_, err := fs.invalidate(ctx, "f") // admin: "f changed, forget it"
	require.NoError(t, err)
	close(b.gate)
	f1 := <-res
	f2, err := lookUp(fs, fuseops.RootInodeID, "f") // after invalidate returned
	require.NoError(t, err)
	for _, e := range []fuseops.ChildInodeEntry{f1, f2} {
		require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: e.Child, N: 1}))
	}
	require.Equal(t, uint64(4), f2.Attributes.Size, "a lookup after invalidate got the pre-invalidate version (cached forever)")
}

// Regression (review): --negative-ttl 0: a newer "gone" answer deletes the name entry and
// the older listing answers with the deleted file again.
func TestNegativeTTLZeroKeepsDeletedGone(t *testing.T) {
	tb := newTestBucket()
	tb.put("f", []byte("one"))
	b := &slowListBucket{testBucket: tb, gate: make(chan struct{}), listed: make(chan struct{})}
	clock := newFakeClock()
	fs := newTestFS(t, b, clock, func(c *testConfig) { c.NegativeTTL = 0 })
	ctx := context.Background()
	land := listBehind(t, fs, b) // listing has v1
	time.Sleep(2 * time.Millisecond)
	tb.put("f", []byte("two!"))
	f2, err := lookUp(fs, fuseops.RootInodeID, "f")
	require.NoError(t, err)
	clock.Advance(30 * time.Second)
	land()
	require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: f2.Child, N: 1}))
	require.NoError(t, tb.Delete(ctx, "f"))
	clock.Advance(45 * time.Second) // entry expired, listing fresh
	_, err = lookUp(fs, fuseops.RootInodeID, "f")
	t.Logf("first lookup after delete: %v", err)
	e, err := lookUp(fs, fuseops.RootInodeID, "f")
	if err == nil {
		fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: e.Child, N: 1})
		t.Logf("second lookup: size %d", e.Attributes.Size)
	}
	require.Error(t, err, "deleted file resurrected by the older listing")
}

// Regression (review): a Stat that began before a listing but lands after it is stored,
// outlives the (newer) listing, and then answers with the older version.
func TestOlderStatNeverOutlivesNewerListing(t *testing.T) {
	tb := newTestBucket()
	tb.put("f", []byte("one"))
	b := &slowStatBucket{testBucket: tb, gate: make(chan struct{}), statted: make(chan struct{})}
	clock := newFakeClock()
	fs := newTestFS(t, b, clock, nil)
	ctx := context.Background()
	b.armed = true
	res := make(chan fuseops.ChildInodeEntry, 1)
	go func() {
		e, err := lookUp(fs, fuseops.RootInodeID, "f")
		require.NoError(t, err)
		res <- e
	}()
	<-b.statted // Stat (seq n) saw v1 and is slow (retries)
	b.armed = false
	time.Sleep(2 * time.Millisecond)
	tb.put("f", []byte("two!"))
	ds := readDir(t, fs, fuseops.RootInodeID, 4096, false) // listing (seq n+1) sees v2
	require.Len(t, ds, 1)
	clock.Advance(30 * time.Second)
	close(b.gate) // the Stat lands: v1, stored, expires 30 s after the listing
	f1 := <-res
	require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: f1.Child, N: 1}))
	e, err := lookUp(fs, fuseops.RootInodeID, "f")
	require.NoError(t, err)
	t.Logf("while listing fresh: size %d", e.Attributes.Size)
	require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: e.Child, N: 1}))
	clock.Advance(40 * time.Second) // listing expired, the older entry is not
	e, err = lookUp(fs, fuseops.RootInodeID, "f")
	require.NoError(t, err)
	require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: e.Child, N: 1}))
	require.Equal(t, uint64(4), e.Attributes.Size, "lookup went back to the older version")
}

// Regression (review): a failed fetch that began before the store came back, landing after
// a success, marks the store down again: known names answer stale.
func TestLateFailureDoesNotRemarkStoreDown(t *testing.T) {
	tb := newTestBucket()
	tb.put("d/z", []byte("one"))
	clock := newFakeClock()
	fs := newTestFS(t, tb, clock, nil)
	ctx := context.Background()
	d, err := lookUp(fs, fuseops.RootInodeID, "d")
	require.NoError(t, err)
	z1, err := lookUp(fs, d.Child, "z")
	require.NoError(t, err)
	release := make(chan struct{})
	started := make(chan struct{})
	tb.SetFaults(mem.Faults{Stat: func(_ context.Context, r *bucket.StatRequest) error {
		if r.Name == "d/x" {
			close(started)
			<-release // a whole retry budget, then gives up
			return bucket.ErrUnavailable
		}
		return nil
	}})
	done := make(chan struct{})
	go func() { lookUp(fs, d.Child, "x"); close(done) }()
	<-started
	clock.Advance(2 * time.Minute) // z expires
	time.Sleep(2 * time.Millisecond)
	tb.put("d/z", []byte("two!"))
	y, err := lookUp(fs, d.Child, "y") // store answers fine
	require.Error(t, err)
	_ = y
	close(release)
	<-done
	z2, err := lookUp(fs, d.Child, "z")
	require.NoError(t, err)
	for _, e := range []fuseops.ChildInodeEntry{z1, z2, d} {
		fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: e.Child, N: 1})
	}
	require.Equal(t, uint64(4), z2.Attributes.Size, "stale answer although the store is up")
}
