package fs

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"ferry/bucket"
	"ferry/readahead"
)

// Asynchronous direct I/O (FUSE_ASYNC_DIO, mount.go): one thread's
// direct reads reach the store together, and every kind of reader still
// reads the right bytes from a file opened for direct I/O, by the reader
// (O_DIRECT) or by ferry (FOPEN_DIRECT_IO, splice.go).

// directKinds are the two ways a read reaches ferry unpaged: a reader's
// O_DIRECT on a file ferry opened for the page cache, and any read of a
// file ferry opened for direct I/O itself.
var directKinds = []string{"O_DIRECT", "ferry's direct open"}

// mountDirectKind mounts b for kind and returns the mount and a function
// that opens a file as kind reads it (flags are added to O_RDONLY). The
// mount lets the kernel keep 64 reads in flight (--max-background's
// default): the kernel's own 12 would cap the test below 16.
func mountDirectKind(t *testing.T, b *testBucket, kind string) (dir string, open func(name string, flags int) *os.File) {
	t.Helper()
	opts := MountOptions{MaxBackground: 64}
	if kind == directKinds[0] {
		dir, _ = mount(t, b, nil, opts)
		return dir, func(name string, flags int) *os.File {
			f, err := openFile(filepath.Join(dir, name), os.O_RDONLY|flags)
			require.NoError(t, err)
			return f
		}
	}
	d := newSpliceDisk(t) // holds no files: every read goes to the store
	d.setRandom(true, true)
	dir, fsys := mount(t, b, func(cfg *testConfig) {
		inner := cfg.Open
		cfg.Open = func(obj bucket.Object) readahead.Reader {
			return &fakeSpliceReader{Reader: inner(obj), d: d, obj: obj}
		}
		cfg.Splice = true
	}, opts)
	require.Eventually(t, func() bool { return fsys.conn.fc.Load() != nil }, 10*time.Second, time.Millisecond)
	requireDirectMmap(t, fsys)
	primed := map[string]bool{}
	return dir, func(name string, flags int) *os.File {
		if !primed[name] {
			// A handle that reads at random marks the file: the next
			// opens are direct.
			primed[name] = true
			f, err := openFile(filepath.Join(dir, name), os.O_RDONLY)
			require.NoError(t, err)
			_, err = f.ReadAt(make([]byte, 1), 0)
			require.NoError(t, err)
			require.NoError(t, f.Close())
			require.Eventually(t, func() bool {
				fsys.mu.Lock()
				defer fsys.mu.Unlock()
				return len(fsys.sp.random) == len(primed)
			}, 10*time.Second, time.Millisecond, "the release noted no random reader")
		}
		before := fsys.sp.directOpens.Load()
		f, err := openFile(filepath.Join(dir, name), os.O_RDONLY|flags)
		require.NoError(t, err)
		require.Equal(t, before+1, fsys.sp.directOpens.Load(), "%s: not opened direct", name)
		return f
	}
}

// One thread submits 16 O_DIRECT reads of 128 KiB at once (libaio): the
// store sees all 16 in flight together, where a kernel without async
// direct I/O sends them one after the other, and each read gets its
// bytes. So does one O_DIRECT read larger than a FUSE request, of a file
// opened for the page cache.
func TestOneThreadManyDirectReadsInFlight(t *testing.T) {
	const n, block = 16, 128 << 10
	for _, kind := range directKinds {
		t.Run(kind, func(t *testing.T) {
			b := newTestBucket()
			data := randomBytes(n*2*block, 5)
			b.put("f", data)
			_, open := mountDirectKind(t, b, kind)
			f := open("f", syscall.O_DIRECT)
			defer f.Close()

			// Each read is held until all 16 are in flight, or for 2 s.
			held := newInFlight(n, 2*time.Second)
			b.SetFaults(held.faults())
			b.ResetStats()
			var rs []aioRead
			for i := range n {
				rs = append(rs, aioRead{off: int64(2*i+1) * block, n: block})
			}
			got, errs := aioPread(t, int(f.Fd()), rs)
			for i, r := range rs {
				require.NoError(t, errs[i], "read at %d", r.off)
				require.Equal(t, data[r.off:r.off+block], got[i], "read at %d", r.off)
			}
			assert.EqualValues(t, n, b.Stats().Reads, "store reads")
			assert.Equal(t, n, held.peak(), "store reads in flight at once")

			if kind != directKinds[0] {
				// The kernel sends a synchronous read of a file opened
				// FOPEN_DIRECT_IO in parts, one after another, whatever
				// FUSE_ASYNC_DIO says (fuse_direct_read_iter).
				return
			}
			// One synchronous O_DIRECT read of 4 MiB: four FUSE reads of
			// 1 MiB, sent together.
			held = newInFlight(4, 2*time.Second)
			b.SetFaults(held.faults())
			b.ResetStats()
			buf, err := unix.Mmap(-1, 0, len(data), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
			require.NoError(t, err)
			defer unix.Munmap(buf)
			m, err := unix.Pread(int(f.Fd()), buf, 0)
			require.NoError(t, err)
			require.Equal(t, data, buf[:m])
			assert.EqualValues(t, 4, b.Stats().Reads, "store reads")
			assert.Equal(t, 4, held.peak(), "store reads in flight at once")
		})
	}
}

// A file read unpaged keeps working for every kind of reader: read(2)
// to the end through a short last block, pread at random offsets and
// past the end, a mapping, and O_DIRECT reads, synchronous (one larger
// than a FUSE request, which the kernel splits into several sent
// together) and through libaio, up to, across and past the end.
func TestDirectReadersOfEveryKind(t *testing.T) {
	const size = 1<<20 + 1234 // the last page is short
	for _, kind := range directKinds {
		t.Run(kind, func(t *testing.T) {
			b := newTestBucket()
			data := randomBytes(size, 9)
			b.put("f", data)
			_, open := mountDirectKind(t, b, kind)

			f := open("f", 0)
			got, err := io.ReadAll(f)
			require.NoError(t, err)
			require.Equal(t, data, got, "read(2) to the end")
			r := rand.New(rand.NewPCG(1, 2))
			for range 40 {
				off, n := r.IntN(size+5000), 1+r.IntN(300000)
				p := make([]byte, n)
				m, err := f.ReadAt(p, int64(off))
				want := data[min(off, size):min(off+n, size)]
				if err != nil {
					require.ErrorIs(t, err, io.EOF)
				}
				require.Equal(t, want, p[:m], "pread(%d, %d)", off, n)
			}
			require.NoError(t, f.Close())

			f = open("f", 0)
			m, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
			require.NoError(t, err)
			populate(t, m)
			require.Equal(t, data, m, "the mapping")
			require.NoError(t, syscall.Munmap(m))
			require.NoError(t, f.Close())

			f = open("f", syscall.O_DIRECT)
			defer f.Close()
			buf, err := unix.Mmap(-1, 0, 4<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
			require.NoError(t, err)
			defer unix.Munmap(buf)
			for _, c := range []struct{ off, n int }{
				{0, 4 << 20},                  // four FUSE requests' worth, the whole file
				{4096, 2 << 20},               // from inside to past the end
				{size &^ 4095, 8192},          // the short last page
				{(size + 4095) &^ 4095, 4096}, // past the end
			} {
				got, err := unix.Pread(int(f.Fd()), buf[:c.n], int64(c.off))
				require.NoError(t, err, "O_DIRECT pread(%d, %d)", c.off, c.n)
				require.Equal(t, data[min(c.off, size):min(c.off+c.n, size)], buf[:got], "O_DIRECT pread(%d, %d)", c.off, c.n)
			}
			rs := []aioRead{{0, 128 << 10}, {512 << 10, 256 << 10}, {size &^ 4095, 128 << 10}, {1<<20 - 4096, 64 << 10}, {2 << 20, 4096}}
			gotAIO, errs := aioPread(t, int(f.Fd()), rs)
			for i, r := range rs {
				what := fmt.Sprintf("libaio read(%d, %d)", r.off, r.n)
				require.NoError(t, errs[i], what)
				require.Equal(t, data[min(r.off, size):min(r.off+int64(r.n), size)], gotAIO[i], what)
			}
		})
	}
}
