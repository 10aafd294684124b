package fs

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/jacobsa/fuse/fuseops"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"ferry/bucket"
)

// TestCachedThroughControl: the control socket's "cached" query
// resolves a path and asks the cache hook about the file's current
// object; no getxattr is answered at all (ENOSYS), so the kernel stops
// sending `ls -l`'s xattr queries after the first.
func TestCachedThroughControl(t *testing.T) {
	b := newTestBucket()
	b.put("d/f", []byte("0123456789"))
	var asked []bucket.Object
	fs := newTestFS(t, b, nil, func(c *testConfig) {
		c.CachedBytes = func(obj bucket.Object) int64 { asked = append(asked, obj); return 7 }
	})
	ctl := NewControl()
	ctl.bind(fs)
	ctx := context.Background()

	cf, err := ctl.Cached(ctx, "/d/f")
	require.NoError(t, err)
	assert.Equal(t, CachedFile{Bytes: 7, Size: 10}, cf)
	require.Len(t, asked, 1)
	assert.Equal(t, "d/f", asked[0].Name, "the hook gets the file's current object")

	_, err = ctl.Cached(ctx, "/d")
	assert.ErrorIs(t, err, ErrInvalid, "a directory has no cached bytes")
	_, err = ctl.Cached(ctx, "/d/missing")
	assert.Error(t, err)
	_, err = ctl.Cached(ctx, "/d/../f")
	assert.ErrorIs(t, err, ErrInvalid)

	// Without a disk cache: not an error, just no cache.
	bare := newTestFS(t, b, nil, nil)
	ctl2 := NewControl()
	ctl2.bind(bare)
	cf, err = ctl2.Cached(ctx, "/d/f")
	require.NoError(t, err)
	assert.Equal(t, CachedFile{NoCache: true}, cf)

	// Not mounted yet.
	_, err = NewControl().Cached(ctx, "/d/f")
	assert.ErrorIs(t, err, ErrNotMounted)

	err = fs.GetXattr(ctx, &fuseops.GetXattrOp{Inode: fuseops.RootInodeID, Name: "security.selinux", Dst: make([]byte, 64)})
	assert.Equal(t, syscall.ENOSYS, err)
}

// TestInvalidateMetadata: with a TTL of forever, changes in the store
// are invisible until Invalidate drops the path, and then visible at once.
func TestInvalidateMetadata(t *testing.T) {
	b := newTestBucket()
	b.put("d/f", []byte("old"))
	b.put("d/sub/g", []byte("old"))
	b.put("e/h", []byte("keep"))
	fs := newTestFS(t, b, nil, func(c *testConfig) { c.MetadataTTL, c.NegativeTTL = -1, -1 })
	ctl := NewControl()
	_, err := ctl.Invalidate(context.Background(), "d")
	assert.ErrorIs(t, err, ErrNotMounted)
	ctl.bind(fs)

	size := func(path string) (uint64, error) {
		e, err := walk(t, fs, path)
		return e.Attributes.Size, err
	}
	d, err := walk(t, fs, "d")
	require.NoError(t, err)
	readDir(t, fs, d.Child, 4096, false) // caches d's listing
	got, err := size("d/f")
	require.NoError(t, err)
	assert.EqualValues(t, 3, got)
	_, err = size("d/new")
	assert.Equal(t, syscall.ENOENT, err)
	_, err = size("d/sub/g")
	require.NoError(t, err)
	_, err = size("e/h")
	require.NoError(t, err)

	b.put("d/f", []byte("newer"))
	b.put("d/new", []byte("x"))
	b.put("d/sub/g", []byte("newest"))
	before := b.metadataRequests()
	got, _ = size("d/f")
	assert.EqualValues(t, 3, got, "forever means forever")
	_, err = size("d/new")
	assert.Equal(t, syscall.ENOENT, err, "the negative entry (from d's listing) holds too")
	assert.Equal(t, before, b.metadataRequests())

	// One file: its entry and the parent's listing go.
	res, err := ctl.Invalidate(context.Background(), "/d/f")
	require.NoError(t, err)
	assert.Equal(t, "d/f", res.Path)
	assert.Positive(t, res.CacheItems)
	got, err = size("d/f")
	require.NoError(t, err)
	assert.EqualValues(t, 5, got)
	_, err = size("d/new")
	require.NoError(t, err, "d's listing was dropped with it")
	got, _ = size("d/sub/g")
	assert.EqualValues(t, 3, got, "not under d/f")

	// A subtree.
	res, err = ctl.Invalidate(context.Background(), "d")
	require.NoError(t, err)
	got, _ = size("d/sub/g")
	assert.EqualValues(t, 6, got)

	// The root: everything. e/h was cached, so this costs a request.
	b.put("e/h", []byte("changed!"))
	got, _ = size("e/h")
	assert.EqualValues(t, 4, got)
	_, err = ctl.Invalidate(context.Background(), "/")
	require.NoError(t, err)
	got, _ = size("e/h")
	assert.EqualValues(t, 8, got)

	_, err = ctl.Invalidate(context.Background(), "a/../b")
	assert.ErrorIs(t, err, ErrInvalid)
}

// TestInvalidateThroughMount: the kernel forgets too. Without the
// notifications, its entry and attribute caches (a year, for -1) would
// keep showing the old size.
func TestInvalidateThroughMount(t *testing.T) {
	b := newTestBucket()
	b.put("d/f", []byte("old"))
	ctl := NewControl()
	dir, fsys := mount(t, b, func(c *testConfig) {
		c.MetadataTTL, c.NegativeTTL = -1, -1
		c.Control = ctl
		c.CachedBytes = func(obj bucket.Object) int64 { return int64(obj.Size) - 1 }
	}, MountOptions{})
	ctl.bind(fsys) // mount() bypasses Mount, which binds

	var st unix.Stat_t
	require.NoError(t, unix.Stat(dir+"/d/f", &st))
	assert.EqualValues(t, 3, st.Size)
	got, err := readFile(dir + "/d/f")
	require.NoError(t, err)
	assert.Equal(t, "old", string(got))
	assert.Equal(t, syscall.ENOENT, unix.Stat(dir+"/d/new", &st))

	// Cached bytes through the control, and no xattrs through the kernel.
	cf, err := ctl.Cached(context.Background(), "/d/f")
	require.NoError(t, err)
	assert.Equal(t, CachedFile{Bytes: 2, Size: 3}, cf)
	_, err = unix.Getxattr(dir+"/d/f", "user.ferry.cached", make([]byte, 64))
	assert.Error(t, err)

	b.put("d/f", []byte("brand new"))
	b.put("d/new", nil)
	require.NoError(t, unix.Stat(dir+"/d/f", &st))
	assert.EqualValues(t, 3, st.Size, "cached forever")

	res, err := ctl.Invalidate(context.Background(), "d")
	require.NoError(t, err)
	assert.Positive(t, res.KernelEntries)

	require.NoError(t, unix.Stat(dir+"/d/f", &st))
	assert.EqualValues(t, 9, st.Size)
	got, err = readFile(dir + "/d/f")
	require.NoError(t, err)
	assert.Equal(t, "brand new", string(got))
	require.NoError(t, unix.Stat(dir+"/d/new", &st))
}

// TestOpMetrics: ops are counted and timed by op, errors by op and errno,
// names pass promlint, and counting allocates nothing.
func TestOpMetrics(t *testing.T) {
	b := newTestBucket()
	b.put("f", []byte("data"))
	reg := prometheus.NewRegistry()
	fs := newTestFS(t, b, nil, func(c *testConfig) { c.Registerer = reg })
	require.NotNil(t, fs.ops)
	inst := &instrumented{FileSystem: fs, m: fs.ops}
	ctx := context.Background()

	require.NoError(t, inst.LookUpInode(ctx, &fuseops.LookUpInodeOp{Parent: fuseops.RootInodeID, Name: "f"}))
	for range 2 {
		err := inst.LookUpInode(ctx, &fuseops.LookUpInodeOp{Parent: fuseops.RootInodeID, Name: "missing"})
		require.Equal(t, syscall.ENOENT, err)
	}
	require.Equal(t, syscall.EROFS, inst.MkDir(ctx, &fuseops.MkDirOp{Parent: fuseops.RootInodeID, Name: "x"}))

	assert.Equal(t, 3.0, testutil.ToFloat64(fs.ops.ops.WithLabelValues("lookup")))
	assert.Equal(t, 2.0, testutil.ToFloat64(fs.ops.errs.WithLabelValues("lookup", "ENOENT")))
	assert.Equal(t, 1.0, testutil.ToFloat64(fs.ops.ops.WithLabelValues("mkdir")))
	assert.Equal(t, 1.0, testutil.ToFloat64(fs.ops.errs.WithLabelValues("mkdir", "EROFS")))
	assert.Equal(t, 0.0, testutil.ToFloat64(fs.ops.ops.WithLabelValues("read")), "read-path series exist from the start")
	n, err := testutil.GatherAndCount(reg, "ferry_fuse_op_duration_seconds")
	require.NoError(t, err)
	assert.Equal(t, len(readPathOps)+1, n, "one histogram per read-path op, plus mkdir")

	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)

	// The hot path: no allocation per op, with or without a (seen) errno.
	start := time.Now()
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _ = fs.ops.done(opRead, start, nil) }))
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _ = fs.ops.done(opLookUp, start, syscall.ENOENT) }))
	assert.Equal(t, 1001.0, testutil.ToFloat64(fs.ops.ops.WithLabelValues("read")),
		"AllocsPerRun runs once more than asked")
}
