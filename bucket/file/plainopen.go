package file

import (
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Opening an object for reading the long way (links.go, then os.Root)
// costs a system call or more per component of its name, and os.Root
// opens each directory on the way again for every lstat: for
// train/n00042/x.JPEG, ten calls before the read. A cold read of 100K
// files of 512 B spent 10% of ferry's CPU there. Most names pass through
// no symbolic link at all, and for those the kernel can do the walk in
// one openat2, told to stay beneath the root and to follow no link
// (RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS): what it opens is exactly what
// the long way would, since with no link on the way there is nothing for
// links.go to follow or hide. Any failure (a link on the way: ELOOP; a
// kernel without openat2: ENOSYS; or a name that is not there) takes the
// long way, which gives the same answer and the same errors as before.
// The type is checked on the opened descriptor, as the long way checks it
// again there; NewRangeReader is asked only for names listed or stat'ed
// as regular files, so a device or FIFO is met only if swapped in since,
// and O_NONBLOCK keeps a FIFO's open from hanging.

// plainRoot is the root opened once more, for openat2.
type plainRoot struct {
	dir *os.File // nil when it could not be opened: always the long way
	fd  int
	off atomic.Bool // openat2 is unavailable here (ENOSYS, EPERM)
	// opened counts objects opened the short way (tests).
	opened atomic.Uint64
}

// newPlainRoot opens the root dir, of root (an os.Root's path), for
// openPlain; on failure every open takes the long way.
func newPlainRoot(root *os.Root) *plainRoot {
	d, err := root.Open(".")
	if err != nil {
		return &plainRoot{}
	}
	return &plainRoot{dir: d, fd: int(d.Fd())}
}

// close releases the root's descriptor.
func (p *plainRoot) close() {
	if p.dir != nil {
		p.dir.Close()
	}
}

// open opens name (a checked object name) for reading, non-blocking, if
// no component of it is a symbolic link. ok is false when the caller
// must take the long way.
func (p *plainRoot) open(name string) (f *os.File, ok bool) {
	if p.dir == nil || p.off.Load() {
		return nil, false
	}
	how := unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := unix.Openat2(p.fd, name, &how)
	for err == unix.EINTR {
		fd, err = unix.Openat2(p.fd, name, &how)
	}
	switch err {
	case nil:
	case unix.ENOSYS, unix.EPERM:
		p.off.Store(true) // no openat2 here, or a seccomp filter refuses it
		return nil, false
	default:
		return nil, false
	}
	p.opened.Add(1)
	return os.NewFile(uintptr(fd), name), true
}
