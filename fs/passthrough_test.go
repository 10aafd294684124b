package fs

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
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

// fakeDisk stands in for the disk cache's Whole (filecache.Store.Whole):
// the objects it holds whole are files in a directory of its own.
type fakeDisk struct {
	t   *testing.T
	dir string

	mu    sync.Mutex
	whole map[string][]byte // GUARDED_BY(mu); by object name: the file's bytes

	calls   atomic.Int64 // Whole calls that handed out a file
	pins    atomic.Int64 // files handed out and not released
	checks  atomic.Int64 // Check calls
	bad     atomic.Bool  // Check fails
	checked atomic.Bool  // Checked reports true
	// checkedLeft: so many more Checked calls report true, then false
	// (a file changed between two of them); 0: checked decides.
	checkedLeft atomic.Int64
	asRead      atomic.Int64 // CheckAsRead calls
}

func newFakeDisk(t *testing.T) *fakeDisk {
	return &fakeDisk{t: t, dir: t.TempDir(), whole: map[string][]byte{}}
}

// hold makes name whole on disk with these bytes (which a test may make
// differ from the object's, to see who reads them).
func (d *fakeDisk) hold(name string, data []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.whole[name] = data
}

func (d *fakeDisk) forget(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.whole, name)
}

// fakeFile is a file fakeDisk handed out.
type fakeFile struct {
	d    *fakeDisk
	f    *os.File
	once sync.Once
}

func (f *fakeFile) File() *os.File { return f.f }
func (f *fakeFile) Check() bool {
	f.d.checks.Add(1)
	return !f.d.bad.Load()
}
func (f *fakeFile) Checked() bool {
	if f.d.checkedLeft.Load() > 0 {
		return f.d.checkedLeft.Add(-1) >= 0
	}
	return f.d.checked.Load() && !f.d.bad.Load()
}

// CheckAsRead: pending once asked before (the fake's reads never
// complete a check; a test sets checked instead).
func (f *fakeFile) CheckAsRead() bool { return f.d.asRead.Add(1) > 1 }
func (f *fakeFile) Release() {
	f.once.Do(func() {
		f.f.Close()
		f.d.pins.Add(-1)
	})
}

func (d *fakeDisk) backing(obj bucket.Object) (readahead.WholeFile, bool) {
	d.mu.Lock()
	data, ok := d.whole[obj.Name]
	d.mu.Unlock()
	if !ok {
		return nil, false
	}
	f, err := os.CreateTemp(d.dir, "whole")
	if err == nil {
		_, err = f.Write(data)
	}
	if !assert.NoError(d.t, err) {
		return nil, false
	}
	d.calls.Add(1)
	d.pins.Add(1)
	return &fakeFile{d: d, f: f}, true
}

// waitUnpinned waits for the kernel's RELEASEs (sent after close(2)
// returns) to unpin every file.
func (d *fakeDisk) waitUnpinned(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { return d.pins.Load() == 0 }, 10*time.Second, 10*time.Millisecond,
		"%d files still pinned after every handle was closed", d.pins.Load())
}

// countOpens wraps Config.Open to count the readers ferry opens.
func countOpens(n *atomic.Int64) func(cfg *testConfig) {
	return func(cfg *testConfig) {
		open := cfg.Open
		cfg.Open = func(obj bucket.Object) readahead.Reader {
			n.Add(1)
			return open(obj)
		}
	}
}

// mountPassthrough mounts b with disk as the disk cache, and skips the
// test where the kernel grants no passthrough.
func mountPassthrough(t *testing.T, b bucket.Bucket, disk *fakeDisk, opens *atomic.Int64) (string, *fileSystem) {
	t.Helper()
	dir, fsys := mount(t, b, func(cfg *testConfig) {
		countOpens(opens)(cfg)
		cfg.Whole = disk.backing
	}, MountOptions{})
	requirePassthrough(t, fsys)
	return dir, fsys
}

// requirePassthrough skips the test where the kernel grants fsys's mount
// no passthrough, and fails it where the kernel should have.
func requirePassthrough(t *testing.T, fsys *fileSystem) {
	t.Helper()
	// ServeOps gets the connection just after the mount is up.
	require.Eventually(t, func() bool { return fsys.conn.fc.Load() != nil }, 10*time.Second, time.Millisecond)
	if !fsys.conn.fc.Load().Passthrough() {
		// Where the kernel says it has passthrough, not getting it is a
		// failure, not a reason to skip.
		expected, why := PassthroughExpected()
		require.False(t, expected, "the kernel did not grant passthrough: %s", why)
		t.Skip("the kernel offers no FUSE passthrough: " + why)
	}
}

// A file held whole is read by the kernel from the backing file: ferry
// opens no reader, and what is read is the backing file's bytes (made to
// differ from the object's here, which only the kernel reading that file
// can show). Reads, preads and mmap all see them; closing every handle
// unpins the file.
func TestPassthroughReadsTheBackingFile(t *testing.T) {
	b := newTestBucket()
	data := randomBytes(3<<20+17, 1)
	b.put("d/big", data)
	b.put("d/small", randomBytes(1000, 2))
	disk := newFakeDisk(t)
	onDisk := bytes.Clone(data)
	onDisk[12345] ^= 0xff
	disk.hold("d/big", onDisk)
	disk.checked.Store(true) // by the reads of an earlier epoch
	var opens atomic.Int64
	dir, fsys := mountPassthrough(t, b, disk, &opens)

	got, err := readFile(filepath.Join(dir, "d/big"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(onDisk, got), "not the backing file's bytes")
	assert.Zero(t, opens.Load(), "a passthrough open needs no reader")

	f, err := openFile(filepath.Join(dir, "d/big"), os.O_RDONLY)
	require.NoError(t, err)
	p := make([]byte, 4096)
	_, err = f.ReadAt(p, 10000)
	require.NoError(t, err)
	assert.Equal(t, onDisk[10000:14096], p)
	m, err := syscall.Mmap(int(f.Fd()), 0, len(onDisk), syscall.PROT_READ, syscall.MAP_SHARED)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(onDisk, m), "mmap does not show the backing file")
	require.NoError(t, syscall.Munmap(m))
	require.NoError(t, f.Close())

	// Not whole: through ferry, from the store.
	got, err = readFile(filepath.Join(dir, "d/small"))
	require.NoError(t, err)
	assert.Equal(t, randomBytes(1000, 2), got)
	assert.EqualValues(t, 1, opens.Load())

	disk.waitUnpinned(t)
	assert.EqualValues(t, 2, fsys.pt.opens.Load())
	fsys.checkInvariants()
}

// The kernel keeps one I/O mode per inode: an open while another handle
// reads through ferry goes through ferry too, even once the file is whole
// (else the kernel would fail it with EIO); one while a passthrough
// handle is open shares its backing file, even if the disk no longer
// offers it.
func TestPassthroughKeepsOneModePerInode(t *testing.T) {
	b := newTestBucket()
	data := randomBytes(1<<20, 3)
	b.put("f", data)
	disk := newFakeDisk(t)
	var opens atomic.Int64
	dir, fsys := mountPassthrough(t, b, disk, &opens)
	path := filepath.Join(dir, "f")
	readAll := func(f *os.File) []byte {
		t.Helper()
		got, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<30))
		require.NoError(t, err)
		return got
	}

	// Through ferry: not whole yet.
	f1, err := openFile(path, os.O_RDONLY)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, readAll(f1)))
	disk.hold("f", data)
	disk.checked.Store(true)
	f2, err := openFile(path, os.O_RDONLY)
	require.NoError(t, err, "an open while the inode is read through ferry")
	assert.True(t, bytes.Equal(data, readAll(f2)))
	assert.EqualValues(t, 2, opens.Load())
	assert.EqualValues(t, 1, disk.calls.Load(), "the disk is asked only whether the file is checked")
	assert.Zero(t, disk.asRead.Load(), "it is")
	fsys.checkInvariants()
	require.NoError(t, f1.Close())
	require.NoError(t, f2.Close())

	// Once they are released, passthrough.
	require.Eventually(t, func() bool {
		fsys.mu.Lock()
		defer fsys.mu.Unlock()
		for _, in := range fsys.inodes {
			if in.open != nil && in.open.cachedOpens != 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	f3, err := openFile(path, os.O_RDONLY)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, readAll(f3)))
	assert.EqualValues(t, 2, disk.calls.Load())

	// A second open shares the backing file, though the disk would not
	// hand it out again.
	disk.forget("f")
	f4, err := openFile(path, os.O_RDONLY)
	require.NoError(t, err, "an open while a passthrough handle is open")
	assert.True(t, bytes.Equal(data, readAll(f4)))
	assert.EqualValues(t, 2, disk.calls.Load())
	assert.EqualValues(t, 2, opens.Load(), "no reader for passthrough opens")
	assert.EqualValues(t, 2, fsys.pt.opens.Load())
	fsys.checkInvariants()
	require.NoError(t, f3.Close())
	require.NoError(t, f4.Close())
	disk.waitUnpinned(t)

	// Released: no longer whole, so through ferry again.
	got, err := readFile(path)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got))
	assert.EqualValues(t, 3, opens.Load())
}

// waitQuiet waits until the kernel has released every handle of the
// mount (RELEASE comes after close(2) returns).
func waitQuiet(t *testing.T, fsys *fileSystem) {
	t.Helper()
	require.Eventually(t, func() bool {
		fsys.mu.Lock()
		defer fsys.mu.Unlock()
		return len(fsys.handles.files) == 0
	}, 10*time.Second, time.Millisecond)
}

// Readers opening and closing one file at once while the disk starts or
// stops offering it: every read is right and no open fails (an EIO from
// the kernel would mean two modes at once); each round starts quiet,
// alternately offered and not, so both modes are seen, and the switch in
// the middle of the round makes them meet. Nothing stays pinned.
func TestPassthroughConcurrentOpens(t *testing.T) {
	b := newTestBucket()
	data := randomBytes(256<<10, 4)
	b.put("f", data)
	disk := newFakeDisk(t)
	var opens atomic.Int64
	dir, fsys := mountPassthrough(t, b, disk, &opens)
	path := filepath.Join(dir, "f")
	var failed atomic.Int64
	for round := range 12 {
		offered := round%2 == 1
		if offered {
			disk.hold("f", data)
		} else {
			disk.forget("f")
		}
		ptBefore, readersBefore := fsys.pt.opens.Load(), opens.Load()
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 6 {
					if g == 0 && i == 3 {
						if offered {
							disk.forget("f")
						} else {
							disk.hold("f", data)
						}
					}
					got, err := readFile(path)
					if err != nil || !bytes.Equal(data, got) {
						t.Errorf("round %d: read: %v, or wrong bytes", round, err)
						failed.Add(1)
						return
					}
				}
			}()
		}
		wg.Wait()
		waitQuiet(t, fsys)
		fsys.checkInvariants()
		// The round's first opens found the disk as the round began.
		if offered {
			assert.Greater(t, fsys.pt.opens.Load(), ptBefore, "round %d: no passthrough open", round)
		} else {
			assert.Greater(t, opens.Load(), readersBefore, "round %d: no open through ferry", round)
		}
		if failed.Load() > 0 {
			break
		}
	}
	disk.waitUnpinned(t)
	t.Logf("passthrough opens %d, readers %d", fsys.pt.opens.Load(), opens.Load())
}

// A file changed under open passthrough handles is checked again at the
// next open, which fails (EIO) if it is bad: the kernel allows no other
// mode beside the open handles. Once they are closed, opens go through
// ferry.
func TestPassthroughSharedFileCheckedAgain(t *testing.T) {
	b := newTestBucket()
	data := randomBytes(300<<10, 5)
	b.put("f", data)
	disk := newFakeDisk(t)
	disk.hold("f", data)
	disk.checked.Store(true)
	var opens atomic.Int64
	dir, fsys := mountPassthrough(t, b, disk, &opens)
	path := filepath.Join(dir, "f")

	f1, err := openFile(path, os.O_RDONLY)
	require.NoError(t, err)
	assert.Zero(t, disk.checks.Load(), "checked already: not read at the open")
	f2, err := openFile(path, os.O_RDONLY)
	require.NoError(t, err)
	assert.EqualValues(t, 1, disk.checks.Load(), "a shared backing file is checked at each open")
	require.NoError(t, f2.Close())

	disk.bad.Store(true)
	_, err = openFile(path, os.O_RDONLY)
	require.ErrorIs(t, err, syscall.EIO)
	fsys.checkInvariants()
	require.NoError(t, f1.Close())
	disk.waitUnpinned(t)

	got, err := readFile(path)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got))
	assert.EqualValues(t, 1, opens.Load(), "read through ferry once the file fails its check")
	disk.waitUnpinned(t)
}

// A file whole on disk but not checked yet in the mount is read through
// ferry at its first open, whose reads are to check it (CheckAsRead), and
// not read whole at the open: the next open is passthrough once they
// have. One that reads through ferry left unchecked (a reader of part of
// it) is checked whole at its next open instead, unless above
// passthroughMaxSize: then it goes on through ferry.
func TestPassthroughAfterReadsChecked(t *testing.T) {
	b := newTestBucket()
	data := randomBytes(100<<10, 6)
	b.put("f", data)
	disk := newFakeDisk(t)
	disk.hold("f", data)
	var opens atomic.Int64
	dir, fsys := mountPassthrough(t, b, disk, &opens)
	path := filepath.Join(dir, "f")

	got, err := readFile(path)
	require.NoError(t, err)
	assert.Equal(t, data, got)
	assert.EqualValues(t, 1, opens.Load(), "the first open reads through ferry")
	assert.Zero(t, fsys.pt.opens.Load())
	assert.Zero(t, disk.checks.Load(), "not read whole at the open")
	assert.EqualValues(t, 1, disk.asRead.Load(), "its reads are to check it")
	waitQuiet(t, fsys)
	disk.waitUnpinned(t)

	// The reads checked it: passthrough, nothing read at the open.
	disk.checked.Store(true)
	got, err = readFile(path)
	require.NoError(t, err)
	assert.Equal(t, data, got)
	assert.EqualValues(t, 1, opens.Load())
	assert.EqualValues(t, 1, fsys.pt.opens.Load())
	assert.Zero(t, disk.checks.Load())
	assert.EqualValues(t, 1, disk.asRead.Load())
	waitQuiet(t, fsys)
	disk.waitUnpinned(t)

	// Not checked, with the reads asked for still pending (a reader of
	// part of it): this open checks it whole.
	disk.checked.Store(false)
	got, err = readFile(path)
	require.NoError(t, err)
	assert.Equal(t, data, got)
	assert.EqualValues(t, 1, opens.Load())
	assert.EqualValues(t, 2, fsys.pt.opens.Load())
	assert.EqualValues(t, 1, disk.checks.Load(), "read whole at the open")
	waitQuiet(t, fsys)
	disk.waitUnpinned(t)

	// Unless too large to read at an open: through ferry again.
	fsys.mu.Lock()
	fsys.pt.maxSize = 32
	fsys.mu.Unlock()
	got, err = readFile(path)
	require.NoError(t, err)
	assert.Equal(t, data, got)
	assert.EqualValues(t, 2, opens.Load())
	assert.EqualValues(t, 2, fsys.pt.opens.Load())
	assert.EqualValues(t, 1, disk.checks.Load())
	waitQuiet(t, fsys)
	disk.waitUnpinned(t)
	fsys.checkInvariants()
}

// O_DIRECT opens go through ferry (the kernel would hand O_DIRECT to the
// cache file, and unaligned reads would fail there), and their reads
// check the file too, as do those of an open beside a handle read
// through ferry.
func TestPassthroughNotForDirect(t *testing.T) {
	b := newTestBucket()
	data := randomBytes(100<<10, 6)
	b.put("f", data)
	disk := newFakeDisk(t)
	disk.hold("f", data)
	var opens atomic.Int64
	dir, fsys := mountPassthrough(t, b, disk, &opens)
	path := filepath.Join(dir, "f")

	f, err := openFile(path, os.O_RDONLY|syscall.O_DIRECT)
	require.NoError(t, err)
	p := make([]byte, 100)
	n, err := f.ReadAt(p, 7)
	require.NoError(t, err, "an unaligned O_DIRECT read")
	assert.Equal(t, data[7:7+n], p[:n])
	assert.EqualValues(t, 1, disk.asRead.Load(), "its reads are to check the file")
	got, err := readFile(path)
	require.NoError(t, err)
	assert.Equal(t, data, got)
	assert.EqualValues(t, 2, disk.asRead.Load(), "and so are those of an open beside it")
	require.NoError(t, f.Close())
	assert.Zero(t, fsys.pt.opens.Load())
	assert.Zero(t, disk.checks.Load())
	assert.EqualValues(t, 2, opens.Load())
	waitQuiet(t, fsys)
	disk.waitUnpinned(t)
}

// An unversioned inode follows the store: an open that finds another
// object than the passthrough handles still open can be served in
// neither mode, and fails with EBUSY rather than EIO.
func TestPassthroughOtherObjectWhileOpen(t *testing.T) {
	fsys := newTestFS(t, newTestBucket(), nil, func(c *testConfig) {
		c.Whole = func(bucket.Object) (readahead.WholeFile, bool) { panic("not asked") }
	})
	disk := newFakeDisk(t)
	old := bucket.Object{Name: "f", Size: 10, Updated: time.Unix(1, 0)}
	disk.hold("f", make([]byte, 10))
	file, ok := disk.backing(old)
	require.True(t, ok)
	in := &inode{id: 5, path: "f", open: &inodeOpen{}}
	in.open.backing = &backing{id: 1, obj: old, file: file, handles: 1}

	b, err := fsys.openPassthrough(in, old, false)
	require.NoError(t, err)
	assert.Same(t, in.open.backing, b)
	assert.Equal(t, 2, b.handles)

	changed := old
	changed.Updated = time.Unix(2, 0)
	_, err = fsys.openPassthrough(in, changed, false)
	assert.ErrorIs(t, err, syscall.EBUSY)
	assert.Equal(t, 2, b.handles)
	assert.Zero(t, in.open.cachedOpens)

	fsys.releasePassthrough(in, b)
	fsys.releasePassthrough(in, b)
	assert.Nil(t, in.open.backing)
	assert.Zero(t, disk.pins.Load())
}

// recordingReader records the reads of one reader Config.Open made.
type recordingReader struct {
	readahead.Reader
	mu    *sync.Mutex
	reads *[]bucket.ByteRange
}

func (r recordingReader) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	r.mu.Lock()
	*r.reads = append(*r.reads, bucket.ByteRange{Start: uint64(off), Limit: uint64(off) + uint64(len(p))})
	r.mu.Unlock()
	return r.Reader.ReadAt(ctx, p, off)
}

// When a handle that read through ferry is released, what the disk cache
// says stands between the file and passthrough (Config.Unready) is read
// then, by a reader of its own, asked for at most 1 MiB and an eighth of
// the file; a file with nothing in the way, or a handle that read
// nothing, reads nothing more.
func TestPassthroughReadiesTheRest(t *testing.T) {
	b := newTestBucket()
	data := randomBytes(2<<20, 8)
	b.put("f", data)
	b.put("g", data)
	disk := newFakeDisk(t)
	var mu sync.Mutex
	var readers []*[]bucket.ByteRange // the reads of each reader opened, in order
	var asked []int64
	unready := map[string][]bucket.ByteRange{"f": {{Start: 0, Limit: 4096}, {Start: 1800 << 10, Limit: 2 << 20}}}
	var opens atomic.Int64
	dir, fsys := mount(t, b, func(cfg *testConfig) {
		cfg.Whole = disk.backing
		open := cfg.Open
		cfg.Open = func(obj bucket.Object) readahead.Reader {
			opens.Add(1)
			mu.Lock()
			defer mu.Unlock()
			reads := new([]bucket.ByteRange)
			readers = append(readers, reads)
			return recordingReader{open(obj), &mu, reads}
		}
		cfg.Unready = func(obj bucket.Object, max int64) []bucket.ByteRange {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, max)
			// Once a reader has read them, the disk cache has them.
			for _, r := range readers {
				if slices.Equal(*r, unready[obj.Name]) {
					return nil
				}
			}
			return unready[obj.Name]
		}
	}, MountOptions{})
	requirePassthrough(t, fsys)
	askedLen := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(asked)
	}

	got, err := readFile(filepath.Join(dir, "f"))
	require.NoError(t, err)
	require.Equal(t, data, got)
	require.Eventually(t, func() bool { return fsys.ready.files.Load() == 1 }, 10*time.Second, time.Millisecond)
	mu.Lock()
	assert.Equal(t, []int64{256 << 10, 256 << 10}, asked, "at most an eighth of 2 MiB; asked again after")
	require.Len(t, readers, 2)
	assert.Equal(t, unready["f"], *readers[1], "the readying reader read exactly what stood in the way")
	mu.Unlock()
	assert.EqualValues(t, 4096+248<<10, fsys.ready.bytes.Load())

	got, err = readFile(filepath.Join(dir, "g"))
	require.NoError(t, err)
	require.Equal(t, data, got)
	require.Eventually(t, func() bool { return askedLen() == 3 }, 10*time.Second, time.Millisecond)
	f, err := openFile(filepath.Join(dir, "g"), os.O_RDONLY)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	waitQuiet(t, fsys)
	fsys.ready.stop() // waits for any readying
	assert.EqualValues(t, 4, opens.Load(), "nothing stood in g's way: no reader")
	assert.EqualValues(t, 1, fsys.ready.files.Load())
	assert.Equal(t, 3, askedLen(), "a handle that read nothing asks nothing")
}

// A file readied in vain (what stood in its way still does: a full disk
// cache, a store that fails) is not readied again at its next releases,
// until what stands in its way changes or readyRetry has passed.
func TestReadierTriesAgainOnlyAfterAChange(t *testing.T) {
	b := newTestBucket()
	b.put("f", randomBytes(1<<20, 9))
	obj := bucket.Object{Name: "f", Size: 1 << 20, Version: "1"}
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	ranges := []bucket.ByteRange{{Start: 0, Limit: 4096}}
	var reads []*[]bucket.ByteRange
	content := &testContent{tc: &testConfig{
		Open: func(o bucket.Object) readahead.Reader {
			mu.Lock()
			defer mu.Unlock()
			rr := new([]bucket.ByteRange)
			reads = append(reads, rr)
			return recordingReader{&rangeReader{b: b, obj: o}, &mu, rr}
		},
		Unready: func(bucket.Object, int64) []bucket.ByteRange {
			mu.Lock()
			defer mu.Unlock()
			return ranges
		},
	}}
	r := newReadier(content, true, slog.New(slog.DiscardHandler), func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	})
	defer r.stop()
	readied := func() int {
		r.wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return len(reads)
	}
	r.released(obj)
	assert.Equal(t, 1, readied())
	r.released(obj)
	assert.Equal(t, 1, readied(), "the same bytes in the way, just tried")
	mu.Lock()
	ranges = []bucket.ByteRange{{Start: 0, Limit: 8192}}
	mu.Unlock()
	r.released(obj)
	assert.Equal(t, 2, readied(), "other bytes in the way")
	r.released(obj)
	assert.Equal(t, 2, readied())
	mu.Lock()
	now = now.Add(readyRetry)
	mu.Unlock()
	r.released(obj)
	assert.Equal(t, 3, readied(), "tried long enough ago")
	assert.Zero(t, r.files.Load(), "never made ready")
	assert.EqualValues(t, 4096+8192+8192, r.bytes.Load())
}
