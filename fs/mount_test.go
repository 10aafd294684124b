package fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jacobsa/fuse"
	"github.com/jacobsa/fuse/fuseops"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"ferry/bucket"
	"ferry/bucket/file"
	"ferry/readahead"
)

// maxReadTracker is a readahead.Reader wrapper recording the largest read the
// kernel sent.
type maxReadTracker struct {
	readahead.Reader
	max *atomic.Int64
}

func (m maxReadTracker) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	for {
		cur := m.max.Load()
		if int64(len(p)) <= cur || m.max.CompareAndSwap(cur, int64(len(p))) {
			break
		}
	}
	return m.Reader.ReadAt(ctx, p, off)
}

// openFile opens a file on a mount served by this very process without
// Go's netpoller. os.Open registers every file with epoll; on a FUSE file
// epoll_ctl sends FUSE_POLL to the server, from a thread that keeps its P
// (a raw runtime syscall), while other threads block on the epoll mutex in
// netpoll. With 2 Ps the server goroutine never runs and the test process
// deadlocks in D state (seen on this machine). A blocking fd from
// syscall.Open + os.NewFile is never registered.
//
// For the same reason a test never touches a mapping of a file on such a
// mount from Go code: the page fault waits in the kernel for this
// process's own reply, on a thread that keeps its P and that Go cannot
// preempt, and a garbage collection starting meanwhile stops the world
// for good, server included (once seen: a test hung 11 minutes). Fault
// the pages in inside a system call first (populate, below).
//
// Unlike os.Open it does not retry EINTR: a signal the test process
// handles (the runtime's SIGURG) must not fail an open on ferry
// (interrupt.go). TestTTLZeroOpenUnderConstantChange once failed so.
func openFile(path string, flag int) (*os.File, error) {
	fd, err := syscall.Open(path, flag|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// readFile is os.ReadFile through openFile.
// populate faults in every page of a mapping inside a system call
// (MADV_POPULATE_READ, Linux 5.14), where the thread gives up its P while
// it waits for the server; afterwards reading the mapping faults no more.
func populate(t *testing.T, m []byte) {
	t.Helper()
	require.NoError(t, unix.Madvise(m, unix.MADV_POPULATE_READ))
}

func readFile(path string) ([]byte, error) {
	f, err := openFile(path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// mount mounts a file system over b in a fresh directory and unmounts it
// when the test ends, pass or fail.
func mount(t *testing.T, b bucket.Bucket, mutate func(*testConfig), opts MountOptions) (string, *fileSystem) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("real mounts need root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	tc := &testConfig{Bucket: b, Open: openDirect(b), MetadataTTL: time.Minute, NegativeTTL: time.Minute}
	if mutate != nil {
		mutate(tc)
	}
	fsys, err := newFileSystem(tc.build(t, nil), nil)
	require.NoError(t, err)
	dir := t.TempDir()
	mfs, err := mountFileSystem(context.Background(), dir, fsys, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		var err error
		for range 50 {
			if err = fuse.Unmount(dir); err == nil || !errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("unmount %s: %v; detaching lazily", dir, err)
			exec.Command("umount", "-l", dir).Run()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		assert.NoError(t, mfs.Join(ctx))
		fsys.checkInvariants()
	})
	return dir, fsys
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

// dropCaches makes the kernel forget unused dentries and inodes, which
// sends us ForgetInode for every inode it drops.
func dropCaches(t *testing.T) {
	t.Helper()
	require.NoError(t, os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0))
}

func TestMountReads(t *testing.T) {
	b := newTestBucket()
	sizes := []int{0, 1, 4095, 1<<20 + 1}
	content := map[string][]byte{}
	for i, n := range sizes {
		name := fmt.Sprintf("data/f%d", n)
		content[name] = randomBytes(n, uint64(i+1))
		b.put(name, content[name])
	}
	dir, _ := mount(t, b, nil, MountOptions{})

	for name, want := range content {
		got, err := readFile(filepath.Join(dir, name))
		require.NoError(t, err, name)
		require.True(t, bytes.Equal(want, got), "%s: %d bytes read, want %d", name, len(got), len(want))
		st, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, int64(len(want)), st.Size())
		assert.Equal(t, os.FileMode(0o444), st.Mode())
	}

	big := content[fmt.Sprintf("data/f%d", 1<<20+1)]
	f, err := openFile(filepath.Join(dir, "data", fmt.Sprintf("f%d", 1<<20+1)), os.O_RDONLY)
	require.NoError(t, err)
	defer f.Close()
	r := rand.New(rand.NewPCG(7, 7))
	for range 50 {
		off := r.IntN(len(big) + 10)
		n := r.IntN(200000)
		p := make([]byte, n)
		got, err := f.ReadAt(p, int64(off))
		end := min(off+n, len(big))
		want := big[min(off, len(big)):end]
		if err != nil {
			require.ErrorIs(t, err, io.EOF)
		}
		require.Equal(t, len(want), got, "pread(%d, %d)", off, n)
		require.True(t, bytes.Equal(want, p[:got]), "pread(%d, %d) bytes differ", off, n)
	}

	// Eight concurrent preads on one descriptor.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 99))
			for range 40 {
				off := r.IntN(len(big))
				n := 1 + r.IntN(300000)
				p := make([]byte, n)
				got, err := f.ReadAt(p, int64(off))
				end := min(off+n, len(big))
				if (err != nil && end == off+n) || got != end-off || !bytes.Equal(p[:got], big[off:end]) {
					errs <- fmt.Errorf("goroutine %d pread(%d, %d): %d bytes, %v", g, off, n, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestMountNoFlush: closing a file costs no round trip. The first flush
// is answered ENOSYS, after which the kernel sends none; every close is
// still released, and reads after it are right.
func TestMountNoFlush(t *testing.T) {
	b := newTestBucket()
	const n = 20
	for i := range n {
		b.put(fmt.Sprintf("f%d", i), randomBytes(100+i, uint64(i)))
	}
	reg := prometheus.NewRegistry()
	dir, fsys := mount(t, b, func(c *testConfig) { c.Registerer = reg }, MountOptions{})
	for i := range n {
		got, err := readFile(filepath.Join(dir, fmt.Sprintf("f%d", i)))
		require.NoError(t, err)
		require.Equal(t, randomBytes(100+i, uint64(i)), got)
	}
	assert.Equal(t, 1.0, testutil.ToFloat64(fsys.ops.ops.WithLabelValues("flush")), "flushes for %d closes", n)
	assert.Equal(t, 1.0, testutil.ToFloat64(fsys.ops.errs.WithLabelValues("flush", "ENOSYS")))
	// Releases are sent in the background: wait for them.
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(fsys.ops.ops.WithLabelValues("release")) == n
	}, 10*time.Second, 10*time.Millisecond, "every close is released")
}

// TestMountListingAnswersLookups: a loader lists a directory, then opens
// every file. The first time, the kernel looks up the names past the
// listing's first page (ferry gives their attributes only once it has
// seen them used); after that, every page of the next listing carries
// attributes, and reading every file again, with the kernel's dentries
// dropped before the listing, costs no lookup at all.
func TestMountListingAnswersLookups(t *testing.T) {
	b := newTestBucket()
	const n = 300 // several readdirplus pages (about 50 entries each for Go's 8 KiB buffer)
	for i := range n {
		b.put(fmt.Sprintf("d/f%03d", i), randomBytes(10+i, uint64(i)))
	}
	reg := prometheus.NewRegistry()
	dir, fsys := mount(t, b, func(c *testConfig) { c.Registerer = reg }, MountOptions{})
	lookups := func() float64 { return testutil.ToFloat64(fsys.ops.ops.WithLabelValues("lookup")) }
	epoch := func() float64 {
		dropCaches(t)
		es, err := os.ReadDir(filepath.Join(dir, "d"))
		require.NoError(t, err)
		require.Len(t, es, n)
		before := lookups()
		for i, e := range es {
			got, err := readFile(filepath.Join(dir, "d", e.Name()))
			require.NoError(t, err)
			require.Equal(t, randomBytes(10+i, uint64(i)), got, e.Name())
		}
		return lookups() - before
	}
	first := epoch()
	assert.Greater(t, first, float64(n/2), "lookups after the first listing")
	// Tests of other packages running meanwhile may drop the kernel's
	// dentries too (e2e's drop_caches): an epoch that saw lookups is
	// tried again, and one of three must see none.
	var later []float64
	for range 3 {
		later = append(later, epoch())
		if later[len(later)-1] == 0 {
			break
		}
	}
	assert.Zero(t, later[len(later)-1], "lookups after the later listings: %v", later)
	t.Logf("lookups after the first listing of %d files: %v; after the later ones: %v", n, first, later)
}

func TestMountTree(t *testing.T) {
	b := newTestBucket()
	long := strings.Repeat("L", 300)
	for _, name := range []string{
		"implicit/a/b.txt",
		"marker/",
		"marker2/",
		"marker2/in.txt",
		"a//b",
		"../evil",
		"x/../y",
		"x/./z",
		"x/ok",
		long + "/f",
		"long/" + long,
		"sp ace/ü nï%code 100%.txt",
		"both",
		"both/child",
		"dot.",
	} {
		b.put(name, []byte(name))
	}
	dir, fsys := mount(t, b, nil, MountOptions{})

	ls := func(p string) []string {
		t.Helper()
		es, err := os.ReadDir(filepath.Join(dir, p))
		require.NoError(t, err, p)
		var out []string
		for _, e := range es {
			n := e.Name()
			if e.IsDir() {
				n += "/"
			}
			out = append(out, n)
		}
		return out
	}
	assert.Equal(t, []string{"a/", "both/", "dot.", "implicit/", "long/", "marker/", "marker2/", "sp ace/", "x/"}, ls(""))
	assert.Equal(t, []string{"a/"}, ls("implicit"))
	assert.Equal(t, []string{"b.txt"}, ls("implicit/a"))
	assert.Empty(t, ls("marker"))
	assert.Equal(t, []string{"in.txt"}, ls("marker2"))
	assert.Empty(t, ls("a"), "a//b has an empty component")
	assert.Empty(t, ls("long"), "a 300-byte name is hidden")
	assert.Equal(t, []string{"ok"}, ls("x"))
	assert.Equal(t, []string{"child"}, ls("both"), "the directory wins over the file 'both'")
	assert.Equal(t, []string{"ü nï%code 100%.txt"}, ls("sp ace"))

	got, err := readFile(filepath.Join(dir, "sp ace", "ü nï%code 100%.txt"))
	require.NoError(t, err)
	assert.Equal(t, "sp ace/ü nï%code 100%.txt", string(got))
	st, err := os.Stat(filepath.Join(dir, "implicit", "a"))
	require.NoError(t, err)
	assert.True(t, st.IsDir())
	assert.Equal(t, os.ModeDir|0o555, st.Mode())

	// ".." is the kernel's: it never reaches "../evil" or "x/../y".
	_, err = os.Stat(filepath.Join(dir, "x", "..", "y"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	_, err = os.Stat(filepath.Join(dir, "x", "y"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	_, err = os.Stat(filepath.Join(dir, "long", long))
	assert.ErrorIs(t, err, os.ErrNotExist, "hidden, not an error of its own")
	assert.GreaterOrEqual(t, fsys.meta.Hidden(), uint64(6))
}

func TestMountPaging(t *testing.T) {
	b := newTestBucket()
	var want []string
	for i := range 1500 {
		name := fmt.Sprintf("n%05d", i)
		b.put("many/"+name, []byte{byte(i)})
		want = append(want, name)
	}
	dir, _ := mount(t, b, func(c *testConfig) { c.ListPageSize = 100 }, MountOptions{})
	es, err := os.ReadDir(filepath.Join(dir, "many"))
	require.NoError(t, err)
	var got []string
	for _, e := range es {
		got = append(got, e.Name())
	}
	assert.Equal(t, want, got)
	assert.GreaterOrEqual(t, b.Stats().Lists, int64(15))
}

func TestMountTTLZero(t *testing.T) {
	b := newTestBucket()
	b.put("f", []byte("one"))
	b.put("gone", []byte("x"))
	dir, _ := mount(t, b, func(c *testConfig) { c.MetadataTTL, c.NegativeTTL = 0, 0 }, MountOptions{})
	p := func(n string) string { return filepath.Join(dir, n) }

	got, err := readFile(p("f"))
	require.NoError(t, err)
	require.Equal(t, "one", string(got))
	_, err = os.Stat(p("new"))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = os.Stat(p("gone"))
	require.NoError(t, err)

	// Same size: only the version tells the kernel its pages are stale.
	b.put("f", []byte("uno"))
	got, err = readFile(p("f"))
	require.NoError(t, err)
	require.Equal(t, "uno", string(got))

	b.put("f", []byte("two, longer"))
	b.put("new", []byte("fresh"))
	require.NoError(t, b.Delete(context.Background(), "gone"))

	got, err = readFile(p("f"))
	require.NoError(t, err)
	assert.Equal(t, "two, longer", string(got), "overwrite not seen")
	got, err = readFile(p("new"))
	require.NoError(t, err)
	assert.Equal(t, "fresh", string(got))
	_, err = os.Stat(p("gone"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{"f", "new"}, names)
}

func TestMountTTLForever(t *testing.T) {
	b := newTestBucket()
	b.put("d/f", []byte("content"))
	b.put("d/g", []byte("more"))
	dir, _ := mount(t, b, func(c *testConfig) { c.MetadataTTL, c.NegativeTTL = -1, -1 }, MountOptions{})

	touch := func() {
		_, err := os.Stat(filepath.Join(dir, "d", "f"))
		require.NoError(t, err)
		_, err = os.Stat(filepath.Join(dir, "d", "missing"))
		require.ErrorIs(t, err, os.ErrNotExist)
		es, err := os.ReadDir(filepath.Join(dir, "d"))
		require.NoError(t, err)
		require.Len(t, es, 2)
		got, err := readFile(filepath.Join(dir, "d", "g"))
		require.NoError(t, err)
		require.Equal(t, "more", string(got))
	}
	touch()
	after, reads := b.metadataRequests(), b.Stats().Reads
	require.Positive(t, after)
	for range 5 {
		touch()
	}
	assert.Equal(t, reads, b.Stats().Reads, "the kernel's page cache was not kept across opens")
	// Even after the kernel forgets everything, our cache answers.
	dropCaches(t)
	touch()
	assert.Equal(t, after, b.metadataRequests(), "repeated stat/readdir went to the store")
}

func TestMountReadOnly(t *testing.T) {
	b := newTestBucket()
	b.put("f", []byte("x"))
	b.put("d/g", []byte("x"))
	dir, _ := mount(t, b, nil, MountOptions{})
	p := func(n string) string { return filepath.Join(dir, n) }

	for name, err := range map[string]error{
		"create":   func() error { f, err := openFile(p("new"), os.O_WRONLY|os.O_CREATE); f.Close(); return err }(),
		"open rw":  func() error { f, err := openFile(p("f"), os.O_RDWR); f.Close(); return err }(),
		"mkdir":    os.Mkdir(p("nd"), 0o755),
		"remove":   os.Remove(p("f")),
		"rmdir":    os.Remove(p("d")),
		"rename":   os.Rename(p("f"), p("f2")),
		"truncate": os.Truncate(p("f"), 0),
		"chmod":    os.Chmod(p("f"), 0o777),
		"symlink":  os.Symlink("f", p("s")),
		"link":     os.Link(p("f"), p("l")),
	} {
		assert.ErrorIs(t, err, syscall.EROFS, name)
	}
	got, err := readFile(p("f"))
	require.NoError(t, err)
	assert.Equal(t, "x", string(got))
}

func TestMountForget(t *testing.T) {
	b := newTestBucket()
	for i := range 30 {
		b.put(fmt.Sprintf("t/d%d/f%d", i%5, i), []byte("x"))
	}
	dir, fsys := mount(t, b, nil, MountOptions{})
	baseline := fsys.inodeCount()
	require.Equal(t, 1, baseline)

	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		_, err = os.Stat(p)
		return err
	}))
	require.Equal(t, 1+1+5+30, fsys.inodeCount(), "t, 5 dirs, 30 files")
	fsys.checkInvariants()

	// The kernel forgets asynchronously; wait (bounded) for it.
	deadline := time.Now().Add(20 * time.Second)
	for fsys.inodeCount() != baseline && time.Now().Before(deadline) {
		dropCaches(t)
		time.Sleep(50 * time.Millisecond)
	}
	assert.Equal(t, baseline, fsys.inodeCount(), "inodes leaked after drop_caches")
	fsys.checkInvariants()

	// And they come back.
	got, err := readFile(filepath.Join(dir, "t", "d0", "f0"))
	require.NoError(t, err)
	assert.Equal(t, "x", string(got))
}

// fuseConnections is where the FUSE control file system (fusectl) shows
// each connection's tunables, in a directory named by the mount's device
// number.
const fuseConnections = "/sys/fs/fuse/connections"

// fusectlMounted reports whether the FUSE control file system is mounted
// (systemd mounts it at boot; .ci/run does). Tests never mount it
// themselves: it is the whole machine's.
func fusectlMounted() bool {
	var st syscall.Statfs_t
	const fusectlMagic = 0x65735543
	return syscall.Statfs(fuseConnections, &st) == nil && st.Type == fusectlMagic
}

// connectionDir is dir's FUSE connection in fusectl, named by the kernel's
// device number of the mount (major << 20 | minor; FUSE's major is 0).
func connectionDir(dir string) (string, error) {
	major, minor, err := mountDev(dir)
	if err != nil {
		return "", err
	}
	return filepath.Join(fuseConnections, strconv.FormatUint(uint64(major)<<20|uint64(minor), 10)), nil
}

func TestMountKernelSettings(t *testing.T) {
	b := newTestBucket()
	data := randomBytes(8<<20, 3)
	b.put("big", data)
	fusectl := fusectlMounted()
	var maxRead atomic.Int64
	dir, _ := mount(t, b, func(c *testConfig) {
		open := c.Open
		c.Open = func(obj bucket.Object) readahead.Reader { return maxReadTracker{open(obj), &maxRead} }
	}, MountOptions{ReadAheadKB: 8192, MaxBackground: 48, FSName: "fake://bucket/prefix"})

	// The kernel's queue of async requests, set in FUSE_INIT; fusectl,
	// where mounted, shows it.
	if fusectl {
		conn, err := connectionDir(dir)
		require.NoError(t, err)
		for file, want := range map[string]string{"max_background": "48", "congestion_threshold": "36"} {
			got, err := os.ReadFile(filepath.Join(conn, file))
			require.NoError(t, err)
			assert.Equal(t, want, strings.TrimSpace(string(got)), file)
		}
	} else {
		t.Log("the FUSE control file system is not mounted: max_background not checked")
	}

	// Readahead reached the mount's bdi.
	path, err := bdiPath(dir)
	require.NoError(t, err)
	ra, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "8192", strings.TrimSpace(string(ra)))

	mounts, err := os.ReadFile("/proc/self/mounts")
	require.NoError(t, err)
	var line string
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[1] == dir {
			line = l
		}
	}
	require.NotEmpty(t, line)
	f := strings.Fields(line)
	assert.Equal(t, "fake://bucket/prefix", f[0])
	assert.Equal(t, "fuse.ferry", f[2])
	assert.Contains(t, strings.Split(f[3], ","), "ro")
	assert.Contains(t, strings.Split(f[3], ","), "default_permissions")
	assert.NotContains(t, strings.Split(f[3], ","), "allow_other")

	var st syscall.Statfs_t
	require.NoError(t, syscall.Statfs(dir, &st))
	assert.Positive(t, st.Blocks)
	assert.Equal(t, int64(1<<20), st.Bsize)

	// A sequential read arrives in 1 MiB requests (max_pages 256).
	got, err := readFile(filepath.Join(dir, "big"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got))
	assert.Equal(t, int64(1<<20), maxRead.Load(), "largest FUSE read")
	t.Logf("largest FUSE read: %d bytes", maxRead.Load())
}

func TestMountPublicAllowOther(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("real mounts need root")
	}
	b := newTestBucket()
	b.put("f", []byte("hi"))
	dir := t.TempDir()
	mfs, err := Mount(context.Background(), dir, (&testConfig{Bucket: b}).build(t, nil), MountOptions{AllowOther: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, fuse.Unmount(dir))
		require.NoError(t, mfs.Join(context.Background()))
	})
	mounts, err := os.ReadFile("/proc/self/mounts")
	require.NoError(t, err)
	var opts string
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[1] == dir {
			assert.Equal(t, b.Name(), f[0], "FSName defaults to the bucket's name")
			opts = f[3]
		}
	}
	assert.Contains(t, strings.Split(opts, ","), "allow_other")
	got, err := readFile(filepath.Join(dir, "f"))
	require.NoError(t, err)
	assert.Equal(t, "hi", string(got))
}

// A local directory as the source: an empty directory (or one holding only
// what is not an object) is listed, and can be looked up and read, before
// any listing and with no metadata cache at all; Put's temporary names are
// never there, whatever was read before.
func TestFileSourceEmptyDirectoryAndTempNames(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(root, "empty"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(root, "links"), 0o755))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(root, "links", "l")))
	require.NoError(t, os.WriteFile(filepath.Join(root, "f"), []byte("x"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, ".ferry-put-notes"), []byte("user"), 0o644))
	b, err := file.New(file.Config{Dir: root})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })

	fsys := newTestFS(t, b, newFakeClock(), nil)
	for _, name := range []string{"empty", "links"} {
		_, err := lookUp(fsys, fuseops.RootInodeID, name)
		assert.NoError(t, err, "lookup of %s before any listing", name)
	}
	_, err = lookUp(fsys, fuseops.RootInodeID, ".ferry-put-notes")
	assert.ErrorIs(t, err, syscall.ENOENT)

	dir, _ := mount(t, b, func(c *testConfig) { c.MetadataTTL, c.NegativeTTL = 0, 0 }, MountOptions{})
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	var got []string
	for _, e := range es {
		got = append(got, e.Name())
	}
	assert.Equal(t, []string{"empty", "f", "links"}, got)
	for _, name := range []string{"empty", "links"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err, name)
		assert.True(t, fi.IsDir(), name)
		inner, err := os.ReadDir(filepath.Join(dir, name))
		require.NoError(t, err, name)
		assert.Empty(t, inner, "%s: the marker is not an entry of its own directory", name)
	}
	_, err = os.Stat(filepath.Join(dir, ".ferry-put-notes"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestKernelOptions(t *testing.T) {
	m := map[string]string{"allow_other": ""}
	require.NoError(t, kernelOptions([]string{"noexec", "suid", "exec", "nosuid", "noatime"}, m))
	assert.Equal(t, map[string]string{"allow_other": "", "exec": "", "nosuid": "", "noatime": ""}, m,
		"of a pair, the last given wins")
	assert.Error(t, kernelOptions([]string{"relatime"}, map[string]string{}), "not a flag jacobsa/fuse maps")
}

// userMountHint names the usual reasons fusermount3 refuses a user's
// mount (whose own message a background mount loses), in the order they
// would stop it; with none of them it says nothing.
func TestUserMountHint(t *testing.T) {
	ok := userMountEnv{uid: 1000, fusermount: true, fuseConf: "user_allow_other\n"}
	assert.Empty(t, userMountHint(ok, true))
	assert.Empty(t, userMountHint(userMountEnv{uid: 1000, fusermount: true}, false), "no allow_other asked")

	none := ok
	none.fusermount = false
	none.devFuse = syscall.EACCES
	assert.Contains(t, userMountHint(none, false), "install fuse3")

	missing := ok
	missing.devFuse = syscall.ENOENT
	assert.Contains(t, userMountHint(missing, false), "modprobe fuse")
	assert.NotContains(t, userMountHint(missing, false), "chmod")

	closed := ok
	closed.devFuse = syscall.EACCES
	h := userMountHint(closed, true)
	assert.Contains(t, h, "/dev/fuse as uid 1000")
	assert.Contains(t, h, "permission denied")
	assert.Contains(t, h, "chmod 0666 /dev/fuse")

	// fusermount3 skips a last line without a newline.
	for _, conf := range []string{"", "#user_allow_other\n", "# user_allow_other\n", "user_allow_others\n", "mount_max = 1000\n", "user_allow_other", "mount_max = 1000\nuser_allow_other"} {
		env := ok
		env.fuseConf = conf
		assert.Contains(t, userMountHint(env, true), "user_allow_other in /etc/fuse.conf", "fuse.conf %q", conf)
		assert.Empty(t, userMountHint(env, false), "fuse.conf %q without allow_other", conf)
	}
	for _, conf := range []string{"user_allow_other\n", "  user_allow_other  \n", "mount_max = 1000\nuser_allow_other # for ferry\n"} {
		assert.True(t, userAllowOther(conf), "fuse.conf %q", conf)
	}
}
