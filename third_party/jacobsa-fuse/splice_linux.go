package fuse

import (
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/jacobsa/fuse/fuseops"
	"github.com/jacobsa/fuse/internal/fusekernel"
	"golang.org/x/sys/unix"
)

// Spliced read replies (ReadFileOp.SpliceFile). The reply's header is
// written into a pipe, the file's bytes are spliced after it (the pipe
// takes references to the file's page-cache pages; nothing is copied),
// and the pipe is spliced to /dev/fuse, where the kernel copies the pages
// into the reader's buffer or page cache. Against a read into a buffer
// and a write of it, one copy of the bytes, and the daemon never touches
// them.

const (
	// maxPipes bounds the pipes in existence (a reply that finds none
	// free is copied instead), and all of them are kept between replies.
	// An unprivileged process's pipes count against its user's
	// /proc/sys/fs/pipe-user-pages-soft (16384 pages by default): 16
	// pipes of 256 pages take a quarter.
	maxPipes     = 16
	maxFreePipes = maxPipes
	// pipeSize fits a 1 MiB reply (MountConfig.MaxPages 256) that starts
	// mid-page, after its header: 258 pages. Processes without
	// CAP_SYS_RESOURCE are refused more than /proc/sys/fs/pipe-max-size
	// (1 MiB by default); then replies that do not fit (255 pages of
	// data) are copied.
	pipeSize = 2 << 20
	// minPipeSize: a pipe refused even this (a user over the soft limit
	// gets 2 pages) is not used, and no more are made for noPipesFor.
	minPipeSize = 1 << 20
	noPipesFor  = time.Minute
)

type splicePipe struct {
	r, w  int
	slots int // pages the pipe holds
}

// pipesOpen counts the pipes in existence, of all connections.
var pipesOpen atomic.Int32

// getPipe returns an empty pipe, or nil if maxPipes are in use or one of
// at least minPipeSize cannot be made.
func (c *Connection) getPipe() *splicePipe {
	select {
	case p := <-c.pipes:
		return p
	default:
	}
	if until := c.noPipesUntil.Load(); until != 0 && time.Now().UnixNano() < until {
		return nil
	}
	if pipesOpen.Add(1) > maxPipes {
		pipesOpen.Add(-1)
		return nil
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		pipesOpen.Add(-1)
		return nil
	}
	p := &splicePipe{r: fds[0], w: fds[1]}
	for _, size := range []int{pipeSize, minPipeSize} {
		if _, err := unix.FcntlInt(uintptr(p.w), unix.F_SETPIPE_SZ, size); err == nil {
			break
		}
	}
	if n, err := unix.FcntlInt(uintptr(p.w), unix.F_GETPIPE_SZ, 0); err == nil {
		p.slots = n / unix.Getpagesize()
	}
	if p.slots*unix.Getpagesize() < minPipeSize {
		// Over the user's pipe budget (other processes' pipes count
		// too): copy for a while rather than try at every read.
		c.noPipesUntil.Store(time.Now().Add(noPipesFor).UnixNano())
		c.putPipe(p, false)
		return nil
	}
	return p
}

// putPipe keeps p for the next reply if it is empty, else closes it.
func (c *Connection) putPipe(p *splicePipe, empty bool) {
	if empty {
		select {
		case c.pipes <- p:
			return
		default:
		}
	}
	unix.Close(p.r)
	unix.Close(p.w)
	pipesOpen.Add(-1)
}

// closePipes closes the free pipes (at the connection's end).
func (c *Connection) closePipes() {
	for {
		select {
		case p := <-c.pipes:
			c.putPipe(p, false)
		default:
			return
		}
	}
}

// replySplice sends o's reply, its o.BytesRead bytes spliced from
// o.SpliceFile at o.SpliceOff. sent reports whether the reply went to the
// kernel, or was tried (err is then the device's error, as for a
// write); if not, nothing reached the kernel and the caller copies the
// bytes instead.
func (c *Connection) replySplice(unique uint64, o *fuseops.ReadFileOp) (sent bool, err error) {
	n := o.BytesRead
	if n <= 0 || o.SpliceOff < 0 {
		return false, nil
	}
	p := c.getPipe()
	if p == nil {
		return false, nil
	}
	page := int64(unix.Getpagesize())
	if pages := (o.SpliceOff+int64(n)+page-1)/page - o.SpliceOff/page; pages+1 > int64(p.slots) {
		c.putPipe(p, true)
		return false, nil
	}
	h := fusekernel.OutHeader{Unique: unique}
	hb := unsafe.Slice((*byte)(unsafe.Pointer(&h)), unsafe.Sizeof(h))
	h.Len = uint32(len(hb) + n)
	if k, err := unix.Write(p.w, hb); err != nil || k != len(hb) {
		c.putPipe(p, false)
		return false, nil
	}
	off := o.SpliceOff
	fd := int(o.SpliceFile.Fd())
	for left := n; left > 0; {
		// SPLICE_F_NONBLOCK: a full pipe fails rather than waits (it
		// cannot fill: its size was checked). The disk read may block.
		k, err := unix.Splice(fd, &off, p.w, nil, left, unix.SPLICE_F_NONBLOCK)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || k <= 0 {
			// A short file (truncated behind the file system's back), an
			// I/O error: the caller's copy sees it too.
			c.putPipe(p, false)
			return false, nil
		}
		left -= int(k)
	}
	total := len(hb) + n
	for {
		// Not SPLICE_F_MOVE: the kernel copies the pages, as for a
		// write, rather than steal them from the file's page cache.
		k, err := unix.Splice(p.r, nil, int(c.dev.Fd()), nil, total, 0)
		if err == syscall.EINTR {
			continue
		}
		if err == nil && int(k) != total {
			err = syscall.EIO
		}
		c.putPipe(p, err == nil)
		if err == nil {
			c.spliced.Add(1)
		}
		return true, err
	}
}

// Spliced counts the read replies spliced so far.
func (c *Connection) Spliced() uint64 { return c.spliced.Load() }

// readSpliceFile reads o's bytes from o.SpliceFile into o.Data, for a
// reply that cannot be spliced; if the file does not have them (the
// file system said it did), from o.SpliceFallback, else the read fails
// with EIO.
func readSpliceFile(o *fuseops.ReadFileOp) error {
	buf := o.Dst
	if len(buf) < o.BytesRead {
		buf = make([]byte, o.BytesRead)
	}
	buf = buf[:o.BytesRead]
	k, _ := o.SpliceFile.ReadAt(buf, o.SpliceOff)
	if k != len(buf) && o.SpliceFallback != nil {
		k, _ = o.SpliceFallback(buf)
	}
	if k != len(buf) {
		return syscall.EIO
	}
	o.Data = [][]byte{buf}
	return nil
}
