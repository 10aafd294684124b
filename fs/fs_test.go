package fs

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jacobsa/fuse/fuseops"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/bucket/mem"
	"ferry/metadata"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1800000000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newTestFS(t *testing.T, b bucket.Bucket, clock *fakeClock, mutate func(*testConfig)) *fileSystem {
	t.Helper()
	tc := &testConfig{Bucket: b, Open: openDirect(b), MetadataTTL: time.Minute, NegativeTTL: time.Minute}
	if mutate != nil {
		mutate(tc)
	}
	var now func() time.Time
	if clock != nil {
		now = clock.Now
	}
	fs, err := newFileSystem(tc.build(t, now), now)
	require.NoError(t, err)
	t.Cleanup(fs.checkInvariants)
	return fs
}

func lookUp(fs *fileSystem, parent fuseops.InodeID, name string) (fuseops.ChildInodeEntry, error) {
	op := &fuseops.LookUpInodeOp{Parent: parent, Name: name}
	err := fs.LookUpInode(context.Background(), op)
	return op.Entry, err
}

// walk looks up a slash-separated path from the root, one reference per
// component.
func walk(t *testing.T, fs *fileSystem, path string) (fuseops.ChildInodeEntry, error) {
	t.Helper()
	var e fuseops.ChildInodeEntry
	parent := fuseops.InodeID(fuseops.RootInodeID)
	for _, name := range strings.Split(path, "/") {
		var err error
		e, err = lookUp(fs, parent, name)
		if err != nil {
			return e, err
		}
		parent = e.Child
	}
	return e, nil
}

type dirent struct {
	ino   uint64
	off   uint64
	name  string
	typ   uint32
	child uint64 // readdirplus: fuse_entry_out.nodeid, 0 for a name only
}

// parseDirents decodes fuse_dirent records (or fuse_direntplus when plus).
func parseDirents(buf []byte, plus bool) []dirent {
	var out []dirent
	for len(buf) > 0 {
		var child uint64
		if plus {
			child = binary.NativeEndian.Uint64(buf[0:])
			buf = buf[40+88:]
		}
		d := dirent{
			ino:   binary.NativeEndian.Uint64(buf[0:]),
			off:   binary.NativeEndian.Uint64(buf[8:]),
			typ:   binary.NativeEndian.Uint32(buf[20:]),
			child: child,
		}
		n := int(binary.NativeEndian.Uint32(buf[16:]))
		d.name = string(buf[24 : 24+n])
		out = append(out, d)
		buf = buf[24+(n+7)&^7:]
	}
	return out
}

// readDir lists a directory inode through one handle with bufSize-byte
// reads, as the kernel would.
func readDir(t *testing.T, fs *fileSystem, ino fuseops.InodeID, bufSize int, plus bool) []dirent {
	t.Helper()
	var all []dirent
	readDirPages(t, fs, ino, bufSize, plus, func(_ int, ds []dirent) { all = append(all, ds...) })
	return all
}

// readDirPages is readDir that hands each read's entries to page (i
// counts the reads) before the next read.
func readDirPages(t *testing.T, fs *fileSystem, ino fuseops.InodeID, bufSize int, plus bool, page func(i int, ds []dirent)) {
	t.Helper()
	ctx := context.Background()
	open := &fuseops.OpenDirOp{Inode: ino}
	require.NoError(t, fs.OpenDir(ctx, open))
	defer fs.ReleaseDirHandle(ctx, &fuseops.ReleaseDirHandleOp{Handle: open.Handle})
	var off fuseops.DirOffset
	for i := 0; ; i++ {
		op := &fuseops.ReadDirOp{Inode: ino, Handle: open.Handle, Offset: off, Dst: make([]byte, bufSize)}
		if plus {
			p := &fuseops.ReadDirPlusOp{ReadDirOp: *op}
			require.NoError(t, fs.ReadDirPlus(ctx, p))
			op = &p.ReadDirOp
		} else {
			require.NoError(t, fs.ReadDir(ctx, op))
		}
		if op.BytesRead == 0 {
			return
		}
		ds := parseDirents(op.Dst[:op.BytesRead], plus)
		page(i, ds)
		off = fuseops.DirOffset(ds[len(ds)-1].off)
	}
}

func names(ds []dirent) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.name)
	}
	return out
}

func TestErrnoMapping(t *testing.T) {
	fs := newTestFS(t, newTestBucket(), nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		err  error
		want syscall.Errno
	}{
		{fmt.Errorf("x: %w", bucket.ErrNotFound), syscall.ENOENT},
		{fmt.Errorf("x: %w", bucket.ErrPrecondition), syscall.ESTALE},
		{fmt.Errorf("x: %w", bucket.ErrPermission), syscall.EACCES},
		{fmt.Errorf("x: %w", bucket.ErrCanceled), syscall.EINTR},
		{bucket.ContextError(ctx, fmt.Errorf("x: %w", bucket.ErrUnavailable)), syscall.EINTR},
		{fmt.Errorf("x: %w", bucket.ErrUnavailable), syscall.EIO},
		{fmt.Errorf("x: %w", bucket.ErrInvalid), syscall.EIO},
		{errors.New("surprise"), syscall.EIO},
		{syscall.ENOTDIR, syscall.ENOTDIR},
		// A dead store's socket errno is not the reader's business.
		{fmt.Errorf("x: %w: %w", bucket.ErrUnavailable, syscall.ECONNREFUSED), syscall.EIO},
		// A backend's own timeout is the store failing, not an interrupt.
		{fmt.Errorf("x: %w: %w", bucket.ErrUnavailable, context.DeadlineExceeded), syscall.EIO},
		{context.Canceled, syscall.EINTR},
	} {
		assert.Equal(t, tc.want, fs.errno("test", "p", tc.err), "%v", tc.err)
	}
	assert.NoError(t, fs.errno("test", "p", nil))
}

func TestLookupKinds(t *testing.T) {
	b := newTestBucket()
	top := b.put("top.txt", []byte("hello"))
	b.put("implicit/deep/f", []byte("x"))
	b.put("marker/", nil)
	b.put("both", []byte("file"))
	b.put("both/child", []byte("c"))
	b.put("a//b", []byte("c"))
	fs := newTestFS(t, b, newFakeClock(), nil)

	e, err := lookUp(fs, fuseops.RootInodeID, "top.txt")
	require.NoError(t, err)
	assert.Equal(t, uint64(5), e.Attributes.Size)
	assert.True(t, top.Updated.Equal(e.Attributes.Mtime))
	assert.Equal(t, "-r--r--r--", e.Attributes.Mode.String())

	for _, dir := range []string{"implicit", "implicit/deep", "marker", "both"} {
		e, err := walk(t, fs, dir)
		require.NoError(t, err, dir)
		assert.True(t, e.Attributes.Mode.IsDir(), "%s: directory wins", dir)
	}
	_, err = walk(t, fs, "both/child")
	require.NoError(t, err)

	_, err = lookUp(fs, fuseops.RootInodeID, "nope")
	assert.Equal(t, syscall.ENOENT, err)

	// "a//b": "a" is a directory whose only child has an empty name.
	a, err := lookUp(fs, fuseops.RootInodeID, "a")
	require.NoError(t, err)
	assert.Empty(t, readDir(t, fs, a.Child, 4096, false))
	assert.Equal(t, uint64(1), fs.meta.Hidden())

	before := b.requests()
	for _, bad := range []string{"", ".", "..", "x\x00y", strings.Repeat("z", 256)} {
		_, err := lookUp(fs, a.Child, bad)
		assert.Equal(t, syscall.ENOENT, err, "%q", bad)
	}
	assert.Equal(t, before, b.requests(), "invalid names never reach the store")
	assert.Equal(t, uint64(6), fs.meta.Hidden())
}

func TestLookupAfterListingCostsNothing(t *testing.T) {
	b := newTestBucket()
	for i := range 20 {
		b.put(fmt.Sprintf("d/f%02d", i), []byte("x"))
	}
	b.put("d/sub/x", nil)
	fs := newTestFS(t, b, newFakeClock(), nil)
	d, err := lookUp(fs, fuseops.RootInodeID, "d")
	require.NoError(t, err)
	ds := readDir(t, fs, d.Child, 4096, false)
	require.Len(t, ds, 21)

	before := b.requests()
	for _, de := range ds {
		e, err := lookUp(fs, d.Child, de.name)
		require.NoError(t, err)
		assert.Equal(t, de.name == "sub", e.Attributes.Mode.IsDir())
	}
	_, err = lookUp(fs, d.Child, "absent")
	assert.Equal(t, syscall.ENOENT, err)
	// A second listing comes from the cache too.
	require.Len(t, readDir(t, fs, d.Child, 4096, false), 21)
	assert.Equal(t, before, b.requests(), "lookups after a listing went to the store")
}

func TestLookupSingleflight(t *testing.T) {
	b := newTestBucket()
	b.put("f", []byte("x"))
	gate := make(chan struct{})
	b.SetFaults(mem.Faults{Stat: func(ctx context.Context, req *bucket.StatRequest) error {
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	fs := newTestFS(t, b, newFakeClock(), nil)

	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = lookUp(fs, fuseops.RootInodeID, "f")
		}()
	}
	// Wait until the first fetch is in Stat, give the others a chance to
	// queue behind it, then let it finish. However the race goes, the
	// result is one Stat: late arrivals find the cache filled.
	for b.Stats().Stats == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	close(gate)
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, int64(1), b.Stats().Stats)
	assert.Equal(t, int64(1), b.Stats().Lists)

	fs.mu.Lock()
	defer fs.mu.Unlock()
	var found []*inode
	for _, in := range fs.inodes {
		if in.path == "f" {
			found = append(found, in)
		}
	}
	require.Len(t, found, 1)
	assert.Equal(t, uint64(n), found[0].lookups)
}

func TestLookupTTL(t *testing.T) {
	b := newTestBucket()
	b.put("f", []byte("x"))
	clock := newFakeClock()
	fs := newTestFS(t, b, clock, func(c *testConfig) { c.MetadataTTL, c.NegativeTTL = time.Minute, 10*time.Second })

	_, err := lookUp(fs, fuseops.RootInodeID, "f")
	require.NoError(t, err)
	_, err = lookUp(fs, fuseops.RootInodeID, "g")
	require.Equal(t, syscall.ENOENT, err)
	require.Equal(t, int64(4), b.requests()) // Stat + List for each

	b.put("f", []byte("longer"))
	b.put("g", []byte("new"))
	e, err := lookUp(fs, fuseops.RootInodeID, "f")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), e.Attributes.Size, "served from cache")
	_, err = lookUp(fs, fuseops.RootInodeID, "g")
	assert.Equal(t, syscall.ENOENT, err, "negative entry cached")
	assert.Equal(t, int64(4), b.requests())

	clock.Advance(11 * time.Second)
	_, err = lookUp(fs, fuseops.RootInodeID, "g")
	assert.NoError(t, err, "negative entry expired")
	e, err = lookUp(fs, fuseops.RootInodeID, "f")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), e.Attributes.Size)

	clock.Advance(time.Minute)
	e, err = lookUp(fs, fuseops.RootInodeID, "f")
	require.NoError(t, err)
	assert.Equal(t, uint64(6), e.Attributes.Size, "positive entry expired")
	assert.Equal(t, e.AttributesExpiration, e.EntryExpiration)
	assert.WithinDuration(t, time.Now().Add(time.Minute), e.EntryExpiration, 10*time.Second)
}

func TestKernelExpiration(t *testing.T) {
	b := newTestBucket()
	b.put("f", nil)
	for _, tc := range []struct {
		ttl  time.Duration
		want time.Duration
	}{{-1, forever}, {0, 0}, {time.Hour, time.Hour}} {
		fs := newTestFS(t, b, nil, func(c *testConfig) { c.MetadataTTL = tc.ttl })
		e, err := lookUp(fs, fuseops.RootInodeID, "f")
		require.NoError(t, err)
		if tc.want == 0 {
			assert.True(t, e.EntryExpiration.IsZero())
			continue
		}
		assert.WithinDuration(t, time.Now().Add(tc.want), e.EntryExpiration, time.Minute)
	}
}

func TestForgetCounts(t *testing.T) {
	b := newTestBucket()
	b.put("d/f", []byte("x"))
	fs := newTestFS(t, b, newFakeClock(), nil)
	ctx := context.Background()

	d, err := lookUp(fs, fuseops.RootInodeID, "d")
	require.NoError(t, err)
	f1, err := lookUp(fs, d.Child, "f")
	require.NoError(t, err)
	f2, err := lookUp(fs, d.Child, "f")
	require.NoError(t, err)
	require.Equal(t, f1.Child, f2.Child)
	require.Equal(t, 3, fs.inodeCount())
	fs.checkInvariants()

	require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: f1.Child, N: 1}))
	require.Equal(t, 3, fs.inodeCount(), "freed while the kernel still holds a reference")
	// The inode still answers.
	attrs := &fuseops.GetInodeAttributesOp{Inode: f1.Child}
	require.NoError(t, fs.GetInodeAttributes(ctx, attrs))
	assert.Equal(t, uint64(1), attrs.Attributes.Size)

	require.NoError(t, fs.BatchForget(ctx, &fuseops.BatchForgetOp{Entries: []fuseops.BatchForgetEntry{
		{Inode: f1.Child, N: 1}, {Inode: d.Child, N: 1},
	}}))
	require.Equal(t, 1, fs.inodeCount())
	fs.checkInvariants()

	// A new lookup gets a fresh inode number; forgetting too much, or an
	// unknown inode, is logged, never a crash.
	f3, err := walk(t, fs, "d/f")
	require.NoError(t, err)
	assert.NotEqual(t, f1.Child, f3.Child)
	require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: f3.Child, N: 5}))
	require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: 12345, N: 1}))
	require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: fuseops.RootInodeID, N: 1}))
	assert.Equal(t, 2, fs.inodeCount()) // root and "d"
}

func TestOpenReadKeepPageCache(t *testing.T) {
	b := newTestBucket()
	b.put("f", []byte("version one"))
	fs := newTestFS(t, b, nil, func(c *testConfig) { c.MetadataTTL, c.NegativeTTL = 0, 0 })
	ctx := context.Background()
	f, err := lookUp(fs, fuseops.RootInodeID, "f")
	require.NoError(t, err)

	open := func(ino fuseops.InodeID) *fuseops.OpenFileOp {
		op := &fuseops.OpenFileOp{Inode: ino}
		require.NoError(t, fs.OpenFile(ctx, op))
		t.Cleanup(func() { fs.ReleaseFileHandle(ctx, &fuseops.ReleaseFileHandleOp{Handle: op.Handle}) })
		return op
	}
	read := func(ino fuseops.InodeID, h fuseops.HandleID, off, size int64) (string, error) {
		op := &fuseops.ReadFileOp{Inode: ino, Handle: h, Offset: off, Size: size, Dst: make([]byte, size)}
		err := fs.ReadFile(ctx, op)
		return string(op.Dst[:op.BytesRead]), err
	}

	o1 := open(f.Child)
	assert.False(t, o1.KeepPageCache, "first open has nothing to keep")
	s, err := read(f.Child, o1.Handle, 8, 100)
	require.NoError(t, err)
	assert.Equal(t, "one", s, "short read at EOF")
	o2 := open(f.Child)
	assert.True(t, o2.KeepPageCache, "same version")

	// A new version is a new inode. With TTL 0 the kernel looks the name
	// up before every open; an open that still reaches the old inode
	// (its last fd reopened through /proc) opens the old version, which
	// the store no longer has.
	b.put("f", []byte("version two!"))
	old := open(f.Child)
	_, err = read(f.Child, old.Handle, 0, 4)
	assert.Equal(t, syscall.ESTALE, err)
	f2, err := lookUp(fs, fuseops.RootInodeID, "f")
	require.NoError(t, err)
	require.NotEqual(t, f.Child, f2.Child, "a new version gets a new inode")
	assert.Equal(t, uint64(12), f2.Attributes.Size)
	o3 := open(f2.Child)
	assert.False(t, o3.KeepPageCache, "first open of the new version's inode")
	s, err = read(f2.Child, o3.Handle, 0, 100)
	require.NoError(t, err)
	assert.Equal(t, "version two!", s)
	_, err = read(f.Child, o1.Handle, 0, 4)
	assert.Equal(t, syscall.ESTALE, err, "an old handle never returns the new version's bytes")
	assert.True(t, open(f2.Child).KeepPageCache)

	// The old inode keeps its version's attributes (fstat on an old fd),
	// without asking the store.
	before := b.requests()
	ga := &fuseops.GetInodeAttributesOp{Inode: f.Child}
	require.NoError(t, fs.GetInodeAttributes(ctx, ga))
	assert.Equal(t, uint64(11), ga.Attributes.Size)
	assert.Equal(t, before, b.requests())

	// Reads larger than jacobsa's buffer come without Dst.
	op := &fuseops.ReadFileOp{Inode: f2.Child, Handle: o3.Handle, Offset: 8, Size: 4 << 20}
	require.NoError(t, fs.ReadFile(ctx, op))
	require.Len(t, op.Data, 1)
	assert.Equal(t, "two!", string(op.Data[0]))

	require.NoError(t, b.Delete(ctx, "f"))
	_, err = lookUp(fs, fuseops.RootInodeID, "f")
	assert.Equal(t, syscall.ENOENT, err)
	fs.checkInvariants()
}

// TestOpenOfOutdatedInode: with a TTL, an open that reaches an inode whose
// version ferry knows to be replaced answers ESTALE (the kernel then looks
// the name up again); metadata older than the inode is no such reason.
func TestOpenOfOutdatedInode(t *testing.T) {
	b := newTestBucket()
	b.put("f", []byte("one"))
	clock := newFakeClock()
	fs := newTestFS(t, b, clock, nil)
	ctx := context.Background()
	f1, err := lookUp(fs, fuseops.RootInodeID, "f")
	require.NoError(t, err)
	time.Sleep(2 * time.Millisecond) // a later Updated
	b.put("f", []byte("two!"))
	op := &fuseops.OpenFileOp{Inode: f1.Child}
	require.NoError(t, fs.OpenFile(ctx, op), "within the TTL ferry knows nothing newer")
	require.NoError(t, fs.ReleaseFileHandle(ctx, &fuseops.ReleaseFileHandleOp{Handle: op.Handle}))
	clock.Advance(2 * time.Minute)
	assert.Equal(t, syscall.ESTALE, fs.OpenFile(ctx, &fuseops.OpenFileOp{Inode: f1.Child}))
	f2, err := lookUp(fs, fuseops.RootInodeID, "f")
	require.NoError(t, err)
	assert.NotEqual(t, f1.Child, f2.Child)
	op = &fuseops.OpenFileOp{Inode: f2.Child}
	require.NoError(t, fs.OpenFile(ctx, op))
	require.NoError(t, fs.ReleaseFileHandle(ctx, &fuseops.ReleaseFileHandleOp{Handle: op.Handle}))
	for _, e := range []fuseops.ChildInodeEntry{f1, f2} {
		require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: e.Child, N: 1}))
	}
}

// slowListBucket hands out a listing taken before the gate opens.
type slowListBucket struct {
	*testBucket
	gate, listed chan struct{}
}

func (b *slowListBucket) List(ctx context.Context, req *bucket.ListRequest) (*bucket.Listing, error) {
	l, err := b.testBucket.List(ctx, req)
	if req.MaxResults != 1 {
		close(b.listed)
		<-b.gate
	}
	return l, err
}

// listBehind starts listing the root through b and returns once the
// store has answered the listing, which is then held back; land lets it
// finish (and be cached) and releases its handle.
func listBehind(t *testing.T, fs *fileSystem, b *slowListBucket) (land func()) {
	t.Helper()
	ctx := context.Background()
	dh := &fuseops.OpenDirOp{Inode: fuseops.RootInodeID}
	require.NoError(t, fs.OpenDir(ctx, dh))
	done := make(chan error, 1)
	go func() {
		done <- fs.ReadDir(ctx, &fuseops.ReadDirOp{Inode: fuseops.RootInodeID, Handle: dh.Handle, Dst: make([]byte, 4096)})
	}()
	<-b.listed
	return func() {
		t.Helper()
		close(b.gate)
		require.NoError(t, <-done)
		require.NoError(t, fs.ReleaseDirHandle(ctx, &fuseops.ReleaseDirHandleOp{Handle: dh.Handle}))
	}
}

// TestOlderListingStoredAfterStat: a listing whose request began before an
// overwrite is stored after a Stat that saw the new version. The newer
// version still answers lookups and opens; the kernel is never sent back
// to the old one.
func TestOlderListingStoredAfterStat(t *testing.T) {
	tb := newTestBucket()
	tb.put("f", []byte("one"))
	b := &slowListBucket{testBucket: tb, gate: make(chan struct{}), listed: make(chan struct{})}
	fs := newTestFS(t, b, newFakeClock(), nil)
	ctx := context.Background()
	dh := &fuseops.OpenDirOp{Inode: fuseops.RootInodeID}
	require.NoError(t, fs.OpenDir(ctx, dh))
	done := make(chan error)
	dst := make([]byte, 4096)
	go func() {
		done <- fs.ReadDirPlus(ctx, &fuseops.ReadDirPlusOp{ReadDirOp: fuseops.ReadDirOp{Inode: fuseops.RootInodeID, Handle: dh.Handle, Dst: dst}})
	}()
	<-b.listed // the listing has v1
	time.Sleep(2 * time.Millisecond)
	tb.put("f", []byte("two!"))
	f2, err := lookUp(fs, fuseops.RootInodeID, "f") // Stat: v2
	require.NoError(t, err)
	require.Equal(t, uint64(4), f2.Attributes.Size)
	close(b.gate)
	require.NoError(t, <-done) // the older listing lands later
	require.NoError(t, fs.ReleaseDirHandle(ctx, &fuseops.ReleaseDirHandleOp{Handle: dh.Handle}))

	op := &fuseops.OpenFileOp{Inode: f2.Child}
	require.NoError(t, fs.OpenFile(ctx, op))
	rd := &fuseops.ReadFileOp{Inode: f2.Child, Handle: op.Handle, Size: 10, Dst: make([]byte, 10)}
	require.NoError(t, fs.ReadFile(ctx, rd))
	assert.Equal(t, "two!", string(rd.Dst[:rd.BytesRead]))
	require.NoError(t, fs.ReleaseFileHandle(ctx, &fuseops.ReleaseFileHandleOp{Handle: op.Handle}))
	again, err := lookUp(fs, fuseops.RootInodeID, "f")
	require.NoError(t, err)
	assert.Equal(t, f2.Child, again.Child, "lookups stay on the newer version")
	// The readdirplus entry, too, was the newer version's inode (one more
	// reference on it).
	fs.mu.Lock()
	assert.Equal(t, uint64(3), fs.inodes[f2.Child].lookups)
	fs.mu.Unlock()
	require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: f2.Child, N: 3}))
}

func TestWriteOpsAreEROFS(t *testing.T) {
	fs := newTestFS(t, newTestBucket(), nil, nil)
	ctx := context.Background()
	size := uint64(0)
	for name, err := range map[string]error{
		"setattr":   fs.SetInodeAttributes(ctx, &fuseops.SetInodeAttributesOp{Inode: 1, Size: &size}),
		"mkdir":     fs.MkDir(ctx, &fuseops.MkDirOp{Parent: 1, Name: "x"}),
		"mknod":     fs.MkNode(ctx, &fuseops.MkNodeOp{Parent: 1, Name: "x"}),
		"create":    fs.CreateFile(ctx, &fuseops.CreateFileOp{Parent: 1, Name: "x"}),
		"link":      fs.CreateLink(ctx, &fuseops.CreateLinkOp{Parent: 1, Name: "x"}),
		"symlink":   fs.CreateSymlink(ctx, &fuseops.CreateSymlinkOp{Parent: 1, Name: "x"}),
		"rename":    fs.Rename(ctx, &fuseops.RenameOp{OldParent: 1, OldName: "a", NewParent: 1, NewName: "b"}),
		"rmdir":     fs.RmDir(ctx, &fuseops.RmDirOp{Parent: 1, Name: "x"}),
		"unlink":    fs.Unlink(ctx, &fuseops.UnlinkOp{Parent: 1, Name: "x"}),
		"write":     fs.WriteFile(ctx, &fuseops.WriteFileOp{Inode: 1}),
		"setxattr":  fs.SetXattr(ctx, &fuseops.SetXattrOp{Inode: 1}),
		"rmxattr":   fs.RemoveXattr(ctx, &fuseops.RemoveXattrOp{Inode: 1}),
		"fallocate": fs.Fallocate(ctx, &fuseops.FallocateOp{Inode: 1}),
	} {
		assert.Equal(t, syscall.EROFS, err, name)
	}
}

func TestMetrics(t *testing.T) {
	b := newTestBucket()
	b.put("d/ok", nil)
	b.put("d/../x", nil)
	reg := prometheus.NewRegistry()
	fs := newTestFS(t, b, nil, func(c *testConfig) { c.Registerer = reg })
	d, err := lookUp(fs, fuseops.RootInodeID, "d")
	require.NoError(t, err)
	require.Equal(t, []string{"ok"}, names(readDir(t, fs, d.Child, 4096, false)))
	assert.Equal(t, uint64(1), fs.meta.Hidden())
	for _, name := range []string{"ferry_fs_inodes", "ferry_fs_hidden_names_total", "ferry_fs_files_read_ahead_total"} {
		n, err := testutil.GatherAndCount(reg, name)
		require.NoError(t, err)
		assert.Equal(t, 1, n, name)
	}

	meta, err := metadata.New(metadata.Config{Bucket: b})
	require.NoError(t, err)
	content := &testContent{tc: &testConfig{Bucket: b}}
	_, err = newFileSystem(Config{Metadata: meta, Content: content, Registerer: reg}, nil)
	assert.Error(t, err, "a second registration on the same registry is refused")
	_, err = newFileSystem(Config{Metadata: meta}, nil)
	assert.Error(t, err, "no Content")
}

// Hidden names are logged once, as a warning: the objects are in the
// bucket but not in the tree, and the default log level must say so.
func TestHiddenNamesWarnOnce(t *testing.T) {
	b := newTestBucket()
	b.put("a//b", []byte("x"))
	b.put("c/./d", []byte("x"))
	b.put("ok", []byte("x"))
	var logs bytes.Buffer
	fs := newTestFS(t, b, newFakeClock(), func(c *testConfig) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	assert.Equal(t, []string{"a", "c", "ok"}, names(readDir(t, fs, fuseops.RootInodeID, 4096, false)))
	for _, dir := range []string{"a", "c"} {
		e, err := lookUp(fs, fuseops.RootInodeID, dir)
		require.NoError(t, err)
		assert.Empty(t, readDir(t, fs, e.Child, 4096, false))
	}
	assert.Equal(t, uint64(2), fs.meta.Hidden())
	assert.Equal(t, 1, strings.Count(logs.String(), "level=WARN msg=\"hiding object names"), logs.String())
}
