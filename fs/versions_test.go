package fs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jacobsa/fuse/fuseops"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/readahead"
)

// snapshotReader serves the version it was opened on from memory, as a
// handle does once that version's blocks are in the disk cache.
type snapshotReader struct {
	readerBase
	data []byte
}

func (r *snapshotReader) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off >= int64(len(r.data)) {
		return 0, io.EOF
	}
	n := copy(p, r.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func openSnapshot(t *testing.T, b bucket.Bucket) func(bucket.Object) readahead.Reader {
	return func(obj bucket.Object) readahead.Reader {
		rc, err := b.NewRangeReader(context.Background(), &bucket.ReadRequest{Name: obj.Name, Version: obj.Version,
			Range: bucket.ByteRange{Limit: obj.Size}})
		if err != nil {
			t.Errorf("opening %s@%s: %v", obj.Name, obj.Version, err)
			return &snapshotReader{}
		}
		defer rc.Close()
		data, err := io.ReadAll(rc)
		assert.NoError(t, err)
		return &snapshotReader{data: data}
	}
}

// TestPageCacheNeverMixesVersions: A opens v1 and reads half; the object
// is replaced; B opens v2 and reads the other half. The kernel's page
// cache is per inode, so if both versions shared one, A would now read
// v2's pages. Each version is its own inode: A reads only v1.
func TestPageCacheNeverMixesVersions(t *testing.T) {
	b := newTestBucket()
	const size = 256 << 10
	v1, v2 := bytes.Repeat([]byte{'1'}, size), bytes.Repeat([]byte{'2'}, size)
	b.put("obj", v1)
	dir, _ := mount(t, b, func(c *testConfig) {
		c.MetadataTTL, c.NegativeTTL = 0, 0
		c.Open = openSnapshot(t, b)
	}, MountOptions{})
	path := filepath.Join(dir, "obj")

	fa, err := openFile(path, os.O_RDONLY)
	require.NoError(t, err)
	defer fa.Close()
	half := make([]byte, size/2)
	_, err = fa.ReadAt(half, 0)
	require.NoError(t, err)
	require.Equal(t, v1[:size/2], half)

	b.put("obj", v2)
	fb, err := openFile(path, os.O_RDONLY)
	require.NoError(t, err)
	defer fb.Close()
	_, err = fb.ReadAt(half, size/2)
	require.NoError(t, err)
	require.Equal(t, v2[size/2:], half, "B opened after the change reads v2")

	n, err := fa.ReadAt(half, size/2)
	require.NoError(t, err)
	assert.Equal(t, v1[size/2:size/2+n], half[:n], "A, opened on v1, read another version's bytes")
}

// TestOpenThroughStaleNameFindsNewVersion: the kernel still caches a name
// (entry TTL) that ferry has dropped (ferry invalidate, or its TTL ran out
// first) and the object has changed: the open lands on the old version's
// inode, which answers ESTALE, and open(2) looks the name up again and
// opens the new one. The caller sees only the new version.
func TestOpenThroughStaleNameFindsNewVersion(t *testing.T) {
	b := newTestBucket()
	b.put("obj", []byte("old version"))
	dir, fsys := mount(t, b, nil, MountOptions{})
	path := filepath.Join(dir, "obj")
	got, err := readFile(path)
	require.NoError(t, err)
	require.Equal(t, "old version", string(got))

	b.put("obj", []byte("the new version"))
	fsys.meta.Invalidate("obj") // ferry forgets; the kernel's dentry lives on
	got, err = readFile(path)
	require.NoError(t, err, "open(2) must retry the lookup after ESTALE")
	assert.Equal(t, "the new version", string(got))
}

// TestTTLZeroOpenUnderConstantChange: with --metadata-ttl 0 and an object
// rewritten all the time, open(2) always succeeds: it opens the version
// the kernel's lookup just found, rather than asking the store again and
// racing the writer (ESTALE).
func TestTTLZeroOpenUnderConstantChange(t *testing.T) {
	b := newTestBucket()
	b.put("obj", []byte("v0"))
	dir, _ := mount(t, b, func(c *testConfig) { c.MetadataTTL, c.NegativeTTL = 0, 0 }, MountOptions{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			b.put("obj", []byte(fmt.Sprintf("v%d", i)))
			time.Sleep(100 * time.Microsecond)
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	for i := range 500 {
		f, err := openFile(filepath.Join(dir, "obj"), os.O_RDONLY)
		require.NoError(t, err, "open %d", i)
		f.Close()
	}
}

// TestReplacedVersionIsRefreshed: under a forever TTL, a read that the
// store answers "changed" (the handle's version is gone) gets ESTALE, and
// makes ferry ask the store about the name again: a new open through the
// name the kernel still holds finds the new version (ESTALE, then a new
// lookup, as open(2) retries), rather than stay on the old one for ever.
func TestReplacedVersionIsRefreshed(t *testing.T) {
	b := newTestBucket()
	b.put("d/f", []byte("one"))
	fs := newTestFS(t, b, newFakeClock(), func(c *testConfig) { c.MetadataTTL, c.NegativeTTL = -1, -1 })
	ctx := context.Background()
	d, err := lookUp(fs, fuseops.RootInodeID, "d")
	require.NoError(t, err)
	f1, err := lookUp(fs, d.Child, "f")
	require.NoError(t, err)
	open := func(ino fuseops.InodeID) (fuseops.HandleID, error) {
		op := &fuseops.OpenFileOp{Inode: ino}
		err := fs.OpenFile(ctx, op)
		return op.Handle, err
	}
	read := func(ino fuseops.InodeID, h fuseops.HandleID) (string, error) {
		op := &fuseops.ReadFileOp{Inode: ino, Handle: h, Size: 64, Dst: make([]byte, 64)}
		err := fs.ReadFile(ctx, op)
		return string(op.Dst[:op.BytesRead]), err
	}
	h1, err := open(f1.Child)
	require.NoError(t, err)

	b.put("d/f", []byte("two, longer"))
	_, err = read(f1.Child, h1)
	assert.Equal(t, syscall.ESTALE, err, "the handle's version is gone")
	_, err = open(f1.Child)
	assert.Equal(t, syscall.ESTALE, err, "the kernel's name leads to the old version: look it up again")
	f2, err := lookUp(fs, d.Child, "f")
	require.NoError(t, err)
	assert.NotEqual(t, f1.Child, f2.Child)
	assert.EqualValues(t, 11, f2.Attributes.Size)
	h2, err := open(f2.Child)
	require.NoError(t, err)
	got, err := read(f2.Child, h2)
	require.NoError(t, err)
	assert.Equal(t, "two, longer", got)
	_, err = read(f1.Child, h1)
	assert.Equal(t, syscall.ESTALE, err, "the old handle stays stale")

	for _, h := range []fuseops.HandleID{h1, h2} {
		require.NoError(t, fs.ReleaseFileHandle(ctx, &fuseops.ReleaseFileHandleOp{Handle: h}))
	}
	for _, e := range []fuseops.ChildInodeEntry{d, f1, f2} {
		require.NoError(t, fs.ForgetInode(ctx, &fuseops.ForgetInodeOp{Inode: e.Child, N: 1}))
	}
}
