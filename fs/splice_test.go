package fs

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/readahead"
)

// spliceDisk stands in for the disk cache behind readahead.Handle's
// Spliceable: it hands out files of its own, whose bytes a test may make
// differ from the object's, to see who read them.
type spliceDisk struct {
	t   *testing.T
	dir string

	mu     sync.Mutex
	files  map[string]*os.File // GUARDED_BY(mu); by object name
	random bool                // GUARDED_BY(mu); what ReadRandomly says
	known  bool                // GUARDED_BY(mu); and whether it knows
	sizes  []int64             // GUARDED_BY(mu); every read's size, spliced or not

	handed   atomic.Int64 // files handed out
	released atomic.Int64
}

func newSpliceDisk(t *testing.T) *spliceDisk {
	d := &spliceDisk{t: t, dir: t.TempDir(), files: map[string]*os.File{}}
	t.Cleanup(func() {
		for _, f := range d.files {
			f.Close()
		}
	})
	return d
}

func (d *spliceDisk) hold(name string, data []byte) {
	f, err := os.CreateTemp(d.dir, "splice")
	require.NoError(d.t, err)
	_, err = f.Write(data)
	require.NoError(d.t, err)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.files[name] = f
}

func (d *spliceDisk) setRandom(random, known bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.random, d.known = random, known
}

func (d *spliceDisk) readSizes() []int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.sizes
	d.sizes = nil
	return s
}

// fakeSpliceReader wraps the test's reader with Spliceable and ReadRandomly.
type fakeSpliceReader struct {
	readahead.Reader
	d   *spliceDisk
	obj bucket.Object
}

func (r *fakeSpliceReader) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	r.d.mu.Lock()
	r.d.sizes = append(r.d.sizes, int64(len(p)))
	r.d.mu.Unlock()
	return r.Reader.ReadAt(ctx, p, off)
}

func (r *fakeSpliceReader) Spliceable(off int64, size int) (*os.File, int, func(), bool) {
	r.d.mu.Lock()
	defer r.d.mu.Unlock()
	f := r.d.files[r.obj.Name]
	if f == nil || off >= int64(r.obj.Size) {
		return nil, 0, nil, false // ReadAt records the read
	}
	r.d.sizes = append(r.d.sizes, int64(size))
	r.d.handed.Add(1)
	var once sync.Once
	return f, int(min(int64(size), int64(r.obj.Size)-off)), func() { once.Do(func() { r.d.released.Add(1) }) }, true
}

func (r *fakeSpliceReader) ReadRandomly() (bool, bool) {
	r.d.mu.Lock()
	defer r.d.mu.Unlock()
	return r.d.random, r.d.known
}

// mountSplice mounts b with d behind every reader, and Config.Splice as
// given.
func mountSplice(t *testing.T, b bucket.Bucket, d *spliceDisk, splice bool) (string, *fileSystem) {
	t.Helper()
	dir, fsys := mount(t, b, func(cfg *testConfig) {
		open := cfg.Open
		cfg.Open = func(obj bucket.Object) readahead.Reader {
			return &fakeSpliceReader{Reader: open(obj), d: d, obj: obj}
		}
		cfg.Splice = splice
	}, MountOptions{})
	require.Eventually(t, func() bool { return fsys.conn.fc.Load() != nil }, 10*time.Second, time.Millisecond)
	return dir, fsys
}

// Reads the reader hands out as a file are answered from that file: its
// bytes (made to differ from the object's here) reach the reader, with
// the file's length clipped at the object's end, and each file handed
// out is released once the reply is sent. With Config.Splice off, the
// reader's bytes.
func TestSplicedReads(t *testing.T) {
	b := newTestBucket()
	data := randomBytes(300000, 1)
	b.put("d/f", data)
	onDisk := randomBytes(300000, 2)
	for _, splice := range []bool{true, false} {
		d := newSpliceDisk(t)
		d.hold("d/f", onDisk)
		dir, fsys := mountSplice(t, b, d, splice)
		f, err := openFile(filepath.Join(dir, "d/f"), os.O_RDONLY)
		require.NoError(t, err)
		want := onDisk
		if !splice {
			want = data
		}
		p := make([]byte, 8192)
		_, err = f.ReadAt(p, 100000)
		require.NoError(t, err)
		assert.Equal(t, want[100000:108192], p, "splice %v", splice)
		n, err := f.ReadAt(p, 300000-100)
		assert.Equal(t, 100, n)
		assert.Equal(t, want[300000-100:], p[:n], "splice %v: the end", splice)
		require.NoError(t, f.Close())
		if splice {
			assert.Positive(t, d.handed.Load())
			require.Eventually(t, func() bool { return d.released.Load() == d.handed.Load() }, 10*time.Second, 10*time.Millisecond)
			assert.EqualValues(t, d.handed.Load(), fsys.conn.fc.Load().Spliced())
		} else {
			assert.Zero(t, d.handed.Load())
		}
	}
}

// requireDirectMmap skips the test where the kernel does not let direct
// I/O files be mapped (before Linux 6.6): ferry opens none for direct
// I/O there.
func requireDirectMmap(t *testing.T, fsys *fileSystem) {
	t.Helper()
	if !fsys.conn.fc.Load().DirectIOAllowMmap() {
		t.Skip("the kernel does not offer FUSE_DIRECT_IO_ALLOW_MMAP")
	}
}

// A file whose last handle read at random is opened for direct I/O: its
// reads reach ferry as the reader made them, not as pages, and it still
// maps. Forgetting its inode does not forget that. A handle that read
// otherwise puts the next open back on the page cache.
func TestDirectOpenAfterRandomReads(t *testing.T) {
	b := newTestBucket()
	data := randomBytes(1<<20, 3)
	b.put("d/f", data)
	d := newSpliceDisk(t)
	dir, fsys := mountSplice(t, b, d, true)
	requireDirectMmap(t, fsys)
	path := filepath.Join(dir, "d/f")
	readAt := func(f *os.File, off int64, n int) {
		t.Helper()
		p := make([]byte, n)
		_, err := f.ReadAt(p, off)
		require.NoError(t, err)
		require.Equal(t, data[off:off+int64(n)], p)
	}

	d.setRandom(true, true)
	f, err := openFile(path, os.O_RDONLY)
	require.NoError(t, err)
	readAt(f, 500000, 100)
	require.NoError(t, f.Close())
	assert.NotContains(t, d.readSizes(), int64(100), "the first open is not direct")
	assert.Zero(t, fsys.sp.directOpens.Load())
	require.Eventually(t, func() bool {
		fsys.mu.Lock()
		defer fsys.mu.Unlock()
		return len(fsys.sp.random) == 1
	}, 10*time.Second, time.Millisecond, "the release noted no random reader")

	dropCaches(t)
	f, err = openFile(path, os.O_RDONLY)
	require.NoError(t, err)
	readAt(f, 500000, 100)
	readAt(f, 7, 3)
	assert.Equal(t, []int64{100, 3}, d.readSizes(), "direct: the reader's own reads")
	assert.EqualValues(t, 1, fsys.sp.directOpens.Load())
	m, err := syscall.Mmap(int(f.Fd()), 0, len(data), syscall.PROT_READ, syscall.MAP_SHARED)
	require.NoError(t, err, "a direct file must still map")
	populate(t, m[4096:8192])
	assert.Equal(t, data[4096:8192], m[4096:8192])
	require.NoError(t, syscall.Munmap(m))
	d.readSizes() // the mapping's, through the page cache
	require.NoError(t, f.Close())

	// A handle that read too little to tell (a header) leaves the mark.
	d.setRandom(false, false)
	f, err = openFile(path, os.O_RDONLY)
	require.NoError(t, err)
	readAt(f, 0, 10)
	require.NoError(t, f.Close())
	require.Eventually(t, func() bool { // its RELEASE, before the fake changes its mind
		fsys.mu.Lock()
		defer fsys.mu.Unlock()
		return len(fsys.handles.files) == 0
	}, 10*time.Second, time.Millisecond)
	assert.Equal(t, []int64{10}, d.readSizes(), "still direct")
	assert.EqualValues(t, 2, fsys.sp.directOpens.Load())

	d.setRandom(false, true)
	f, err = openFile(path, os.O_RDONLY)
	require.NoError(t, err)
	readAt(f, 20, 10)
	d.readSizes()
	require.NoError(t, f.Close())
	require.Eventually(t, func() bool {
		fsys.mu.Lock()
		defer fsys.mu.Unlock()
		return len(fsys.sp.random) == 0
	}, 10*time.Second, time.Millisecond, "the release noted a random reader")

	f, err = openFile(path, os.O_RDONLY)
	require.NoError(t, err)
	readAt(f, 300000, 100)
	require.NoError(t, f.Close())
	assert.NotContains(t, d.readSizes(), int64(100), "back on the page cache")
	assert.EqualValues(t, 3, fsys.sp.directOpens.Load())
}

// With Config.Splice off no open is direct, whatever the reader says.
func TestNoDirectOpenWithoutSplice(t *testing.T) {
	b := newTestBucket()
	b.put("f", randomBytes(100000, 4))
	d := newSpliceDisk(t)
	d.setRandom(true, true)
	dir, fsys := mountSplice(t, b, d, false)
	for range 3 {
		got, err := readFile(filepath.Join(dir, "f"))
		require.NoError(t, err)
		require.Len(t, got, 100000)
	}
	assert.Zero(t, fsys.sp.directOpens.Load())
}

// A file handed out that does not hold the bytes (cut short behind
// ferry's back) is not the end of the read: it is read again through the
// reader, which has the object's bytes.
func TestSplicedReadFallsBack(t *testing.T) {
	b := newTestBucket()
	data := randomBytes(200000, 5)
	b.put("f", data)
	d := newSpliceDisk(t)
	d.hold("f", data[:100000])
	dir, _ := mountSplice(t, b, d, true)
	f, err := openFile(filepath.Join(dir, "f"), os.O_RDONLY)
	require.NoError(t, err)
	defer f.Close()
	p := make([]byte, 8192)
	_, err = f.ReadAt(p, 150000)
	require.NoError(t, err)
	assert.Equal(t, data[150000:158192], p)
	assert.Positive(t, d.handed.Load())
}
