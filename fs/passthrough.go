package fs

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/jacobsa/fuse"
	"golang.org/x/sys/unix"

	"ferry/bucket"
	"ferry/readahead"
)

// Passthrough: a file held whole on local disk (the disk cache) is opened
// with FUSE passthrough. The kernel then reads and maps the cache file
// itself, and sends ferry no reads at all: warm reads run in the cache
// volume's page cache, in its large folios, instead of FUSE's 4 KiB pages
// with a round trip to ferry per request
// (docs/notes/2026-12-01-passthrough.md).
//
// The kernel holds each inode in one I/O mode at a time: while one open
// file of an inode is passthrough, every other open of it must be
// passthrough on the same backing file, and while one is read through
// ferry (cached I/O), none may be passthrough; an open that breaks either
// rule fails with EIO in the caller. So the opens of one inode choose
// under its ptMu, and ferry counts both kinds of open handles. The
// kernel leaves a mode when it releases the file, before it sends
// RELEASE, so ferry's counts are never below the kernel's: at worst an
// open goes through ferry that could have been passthrough.
//
// Passthrough needs Linux 6.9 or later with CONFIG_FUSE_PASSTHROUGH (the
// kernel grants it in FUSE_INIT) and CAP_SYS_ADMIN to register a backing
// file, on a file system it can stack on (not overlayfs: one level of
// stacking); without them, every open is read through ferry, as before.
//
// The bytes are checked before the kernel reads them, and read once to
// be checked and served. The first open of a file in the mount that finds
// it whole goes through ferry, whose reads from the disk cache check
// every block they read anyway (BackingFile.CheckAsRead): once the reads
// of the mount have covered the whole file, unchanged, it counts as
// checked, and its next open is passthrough with nothing read at the
// open. A file that an earlier ferry process of the same boot found
// good, and unchanged since, counts as checked already (the store keeps
// the check's stamp in its index): its first open is passthrough. (Until
// 2026-12-02 that first open read the file whole to check it, and then
// the kernel read it again: the epoch after the cache filled read every
// byte twice; docs/notes/2026-12-02-one-read-per-byte.md.)
// A file whose reads left it unchecked (a reader of part of it: the
// readier may read the rest, ready.go) is read whole and checked at its
// next open instead, if at most passthroughMaxSize: BackingFile.Check.
// At every later open (also one that shares a backing file already
// registered) the file's stamp is compared with the check's, and a
// changed file is checked again. An open whose shared backing file
// fails fails with EIO: the kernel allows no other mode beside the
// handles still open on it.

// passthroughMaxSize bounds the files checked at an open: such an open
// reads the file whole before it returns (about 60-155 ms for 256 MiB on
// the development machine), so a reader of a 100 GB file's header would
// wait for all of it. Only files that reads through ferry left unchecked
// are read at an open; a larger one is read through ferry until reads
// through ferry have covered all of it.
const passthroughMaxSize = 1 << 30

// backing is an inode's registered backing file, shared by its
// passthrough handles.
type backing struct {
	id      int32
	obj     bucket.Object
	file    readahead.WholeFile // held until the last handle is released
	handles int                 // GUARDED_BY(fileSystem.mu)
}

// ptState is the mount's passthrough state.
type ptState struct {
	on      bool   // Config.Passthrough
	maxSize uint64 // GUARDED_BY(fileSystem.mu); passthroughMaxSize, smaller in tests
	// off: the kernel or the process cannot do it (logged once).
	off   atomic.Bool
	opens atomic.Uint64 // passthrough opens, for the metric and tests
	// openedBytes sums the sizes of the files opened for passthrough:
	// what the kernel may read from cache files without ferry seeing it.
	openedBytes atomic.Uint64
	logged      sync.Once
}

// passthroughGranted reports whether opens may be passthrough: wanted,
// and granted by the kernel. (Refused since, they are still counted.)
func (fs *fileSystem) passthroughGranted() bool {
	c := fs.conn.fc.Load()
	return fs.pt.on && c != nil && c.Passthrough()
}

// openPassthrough chooses how the handle being opened on in (for obj) is
// read. It returns the backing file to open it on, or nil to read it
// through ferry; either way the handle is counted, and must be uncounted
// by releasePassthrough. direct is an O_DIRECT open, which the kernel
// would pass on to the cache file (whose alignment rules the reader does
// not know): it goes through ferry unless it must share a backing file.
// Only called when the kernel granted passthrough.
func (fs *fileSystem) openPassthrough(in *inode, obj bucket.Object, direct bool) (*backing, error) {
	o := in.open // set by OpenFile
	o.ptMu.Lock()
	defer o.ptMu.Unlock()
	fs.mu.Lock()
	switch b := o.backing; {
	case b != nil && b.obj.SameVersion(&obj):
		b.handles++
		fs.mu.Unlock()
		// Cheap unless the file changed since; then even a large one is
		// read whole here, the only way left to serve this open.
		if !b.file.Check() {
			// Changed since its check, and bad: the handles open on it
			// read what they read, but no new one.
			fs.releasePassthrough(in, b)
			fs.log.Error("fs: a cache file open with passthrough failed its check; the open fails until its handles are closed", "path", in.path)
			return nil, syscall.EIO
		}
		fs.pt.opens.Add(1)
		fs.pt.openedBytes.Add(obj.Size)
		return b, nil
	case b != nil:
		// Open on another version than the passthrough handles still
		// open: neither mode can serve it (only an unversioned inode
		// changes its object).
		fs.mu.Unlock()
		fs.log.Warn("fs: cannot open a new version of a file while the old one is open from the disk cache; try again once it is closed", "path", in.path)
		return nil, syscall.EBUSY
	case o.cachedOpens > 0 || fs.pt.off.Load() || direct:
		o.cachedOpens++
		off := fs.pt.off.Load()
		fs.mu.Unlock()
		if !off {
			// Read through ferry: its reads may check the file, so
			// that a later open is passthrough, even where some
			// handle of the inode is always open.
			if file, ok := fs.content.Whole(obj); ok {
				if !file.Checked() {
					file.CheckAsRead()
				}
				file.Release()
			}
		}
		return nil, nil
	}
	large := obj.Size > fs.pt.maxSize
	fs.mu.Unlock()

	b := fs.newBacking(obj, large)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if b == nil {
		o.cachedOpens++
		return nil, nil
	}
	o.backing = b
	fs.pt.opens.Add(1)
	fs.pt.openedBytes.Add(obj.Size)
	return b, nil
}

// newBacking registers obj's cache file with the kernel, or returns nil
// if it is not whole on disk, is not checked yet or cannot be
// registered. It registers before it looks at the check: a kernel that
// refuses is found out at the first open, and turns the checks by reads
// off. A file not checked yet is read through ferry by this open, whose
// reads check it (CheckAsRead); one that earlier reads left unchecked is
// read whole here instead, unless large (above passthroughMaxSize).
func (fs *fileSystem) newBacking(obj bucket.Object, large bool) *backing {
	file, ok := fs.content.Whole(obj)
	if !ok {
		return nil
	}
	c := fs.conn.fc.Load()
	id, err := c.BackingOpen(int(file.File().Fd()))
	if err != nil {
		file.Release()
		if errors.Is(err, syscall.ENOMEM) {
			fs.log.Debug("fs: no memory to register a cache file for passthrough; this open goes through ferry", "path", obj.Name)
			return nil
		}
		// EPERM (no CAP_SYS_ADMIN), ELOOP (a cache on overlayfs),
		// EINVAL, EOPNOTSUPP: the next file would fare no better.
		fs.pt.off.Store(true)
		fs.pt.logged.Do(func() {
			fs.log.Info("fs: the kernel refused a cache file for passthrough; reads of cached files go through ferry", "err", err)
		})
		return nil
	}
	// Checked after the registration: a file changed since is not
	// handed to the kernel.
	if !file.Checked() {
		pending := file.CheckAsRead()
		if !pending || large || !file.Check() {
			c.BackingClose(id)
			file.Release()
			return nil
		}
	}
	return &backing{id: id, obj: obj, file: file, handles: 1}
}

// releasePassthrough uncounts a released handle of in: b is its backing,
// or nil if it was read through ferry. The last handle of a backing
// unregisters it and unpins the cache file.
func (fs *fileSystem) releasePassthrough(in *inode, b *backing) {
	fs.mu.Lock()
	o := in.open // set by OpenFile
	if b == nil {
		o.cachedOpens--
		fs.mu.Unlock()
		return
	}
	b.handles--
	last := b.handles == 0
	if last && o.backing == b {
		o.backing = nil
	}
	fs.mu.Unlock()
	if last {
		fs.dropBacking(b)
	}
}

// dropBacking unregisters b and unpins its file. Files the kernel has
// open on it keep it until they are released.
func (fs *fileSystem) dropBacking(b *backing) {
	if c := fs.conn.fc.Load(); c != nil {
		if err := c.BackingClose(b.id); err != nil && !errors.Is(err, syscall.ENODEV) {
			fs.log.Debug("fs: cannot unregister a passthrough file", "id", b.id, "err", err)
		}
	}
	b.file.Release()
}

// logPassthrough says once, when the connection starts, whether the
// kernel granted passthrough to a mount that asked for it.
func (fs *fileSystem) logPassthrough(c *fuse.Connection) {
	if !fs.pt.on || c.Passthrough() {
		return
	}
	why := "Linux 6.9 or later, built with CONFIG_FUSE_PASSTHROUGH"
	if expected, reason := PassthroughExpected(); expected {
		why = "the kernel should have it (" + reason + ") but did not grant it: a bug, please report it"
	} else {
		why = reason
	}
	fs.log.Info("fs: the kernel offers no FUSE passthrough; reads of cached files go through ferry", "why", why)
}

// PassthroughExpected says whether this kernel should grant FUSE
// passthrough, and why: it needs Linux 6.9 or later, built with
// CONFIG_FUSE_PASSTHROUGH (read from /proc/config.gz or
// /boot/config-RELEASE where there is one; distributions' 6.9 and later
// kernels have it).
func PassthroughExpected() (bool, string) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false, "cannot tell the kernel's version"
	}
	release := unix.ByteSliceToString(u.Release[:])
	var major, minor int
	if _, err := fmt.Sscanf(release, "%d.%d", &major, &minor); err != nil {
		return false, "cannot read the kernel's version " + release
	}
	if major < 6 || major == 6 && minor < 9 {
		return false, "Linux " + release + " is older than 6.9"
	}
	cfg, err := kernelConfig(release)
	switch {
	case err != nil:
		return true, "Linux " + release + ", its build options unknown"
	case bytes.Contains(cfg, []byte("\nCONFIG_FUSE_PASSTHROUGH=y\n")):
		return true, "Linux " + release + " built with CONFIG_FUSE_PASSTHROUGH"
	}
	return false, "Linux " + release + " built without CONFIG_FUSE_PASSTHROUGH"
}

// kernelConfig reads the running kernel's build options.
func kernelConfig(release string) ([]byte, error) {
	if f, err := os.Open("/proc/config.gz"); err == nil {
		defer f.Close()
		z, err := gzip.NewReader(f)
		if err != nil {
			return nil, err
		}
		return io.ReadAll(z)
	}
	return os.ReadFile("/boot/config-" + release)
}
