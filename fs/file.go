package fs

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/jacobsa/fuse/fuseops"

	"ferry/bucket"
	"ferry/metadata"
	"ferry/readahead"
)

// File handles: an open picks the object version it reads (openVersion),
// then either has the kernel read the disk cache's file itself
// (passthrough.go) or gets a reader from readahead.Files; reads go to the
// reader, or are spliced from the disk cache's file (splice.go).

type fileHandle struct {
	// Constant data
	obj    bucket.Object
	reader readahead.Reader // safe for concurrent ReadAt; nil when passthrough
	// counted: the handle is counted on its inode (passthrough.go), on
	// backing if that is set, else as read through ferry.
	counted bool
	backing *backing
	in      *inode // its mutable fields are GUARDED_BY(fileSystem.mu)
	// read is set by the handle's first read (noteRead, readier).
	read atomic.Bool
}

// The file system is what readahead.Files asks about directories.
var _ readahead.Directories = (*fileSystem)(nil)

func (fs *fileSystem) OpenFile(ctx context.Context, op *fuseops.OpenFileOp) error {
	fs.mu.Lock()
	in, ok := fs.inodes[op.Inode]
	if ok && !in.dir {
		in.opens() // before openPassthrough, which takes its ptMu
	}
	fs.mu.Unlock()
	if !ok {
		return syscall.ESTALE
	}
	if in.dir {
		return syscall.EISDIR
	}
	dir, _ := metadata.SplitPath(in.path)
	fs.lu.used(dir, false)
	obj, err := fs.openVersion(ctx, in)
	if err != nil {
		return err
	}
	h := &fileHandle{obj: obj, in: in}
	if fs.passthroughGranted() {
		b, err := fs.openPassthrough(in, obj, op.OpenFlags&syscall.O_DIRECT != 0)
		if err != nil {
			return err
		}
		h.counted, h.backing = true, b
	}
	if h.backing != nil {
		fs.readers.Opened(in.path, obj)
	} else {
		h.reader = fs.readers.Open(in.path, obj)
	}

	fs.mu.Lock()
	defer fs.mu.Unlock()
	if h.backing != nil {
		// The kernel takes no page-cache flags with passthrough (it
		// would fail the open); the inode's FUSE pages go unused.
		op.BackingID = h.backing.id
	} else {
		// The kernel's pages are good while the version is the one they
		// were read from; otherwise it must drop them on this open.
		op.KeepPageCache = in.open.opened && in.open.openedAt == obj.Version
		if fs.openDirectLocked(in, obj) {
			op.UseDirectIO = true
			fs.sp.directOpens.Add(1)
		}
	}
	in.open.opened, in.open.openedAt = true, obj.Version
	op.Handle = fs.handles.add()
	fs.handles.files[op.Handle] = h
	return nil
}

// openVersion is the object version an open of in reads. A versioned
// inode opens its own version, unless ferry knows of a newer one. With
// --metadata-ttl 0 there is nothing to know: the kernel looked the name
// up just now (its entry timeout is 0 too), and asking the store again
// would only race with a writer. An unversioned inode follows the store.
func (fs *fileSystem) openVersion(ctx context.Context, in *inode) (bucket.Object, error) {
	fs.mu.Lock()
	own, seen := in.object(), in.seen
	fs.mu.Unlock()
	if own.Version != "" && fs.attrs.ttl == 0 {
		return own, nil
	}
	cur, err := fs.current(ctx, in)
	switch {
	case err != nil && errors.Is(err, bucket.ErrUnavailable) && own.Version != "":
		// The store cannot say; the inode's own version is pinned, and
		// its bytes may be in the disk cache.
		return own, nil
	case err != nil:
		return bucket.Object{}, fs.errno("open", in.path, err)
	case own.Version == "":
		return cur.Obj, nil
	case cur.Obj.Version != own.Version && cur.Seq > seen:
		// The kernel reached this inode through a name it cached longer
		// than we did, and ferry has learned since that the name holds
		// another version, shown by another inode. ESTALE makes the
		// kernel look the name up again and open that one (open(2)
		// retries with LOOKUP_REVAL); serving the other version here
		// would put its pages in this inode's page cache, under readers
		// of this one. (What an older request said, a listing that began
		// before the change, is no reason: the inode's version stands.)
		return bucket.Object{}, syscall.ESTALE
	}
	return own, nil
}

// Listing is readahead.Directories': a fresh listing of dir.
func (fs *fileSystem) Listing(dir string) (*metadata.Listing, bool) { return fs.meta.Listing(dir) }

// ListSoon is readahead.Directories': a background listing of dir.
func (fs *fileSystem) ListSoon(dir string) bool { return fs.meta.ListSoon(dir) }

// ReadBefore reports whether the file at path has been read through
// ferry in obj's version, on an inode the kernel still has (with, perhaps,
// its pages). LOCKS fs.mu.
func (fs *fileSystem) ReadBefore(path string, obj bucket.Object) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	id, ok := fs.byKey[inodeKey{path: path, version: obj.Version}]
	if !ok {
		return false
	}
	in := fs.inodes[id]
	return in.open != nil && in.open.read && in.open.readAt == obj.Version
}

// noteRead records the first read of h on its inode (ReadBefore).
func (fs *fileSystem) noteRead(h *fileHandle) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	h.in.open.read, h.in.open.readAt = true, h.obj.Version
}

// readBufs are ReadFile's buffers for the reads jacobsa/fuse gives none:
// each as large as the largest read asked of it (at most MaxPages).
var readBufs = sync.Pool{New: func() any { return new([]byte) }}

func (fs *fileSystem) ReadFile(ctx context.Context, op *fuseops.ReadFileOp) error {
	fs.mu.Lock()
	h, ok := fs.handles.files[op.Handle]
	fs.mu.Unlock()
	if !ok {
		return syscall.EBADF
	}
	if h.reader == nil {
		// Passthrough: the kernel reads the backing file itself and
		// never sends a read for such a handle.
		return syscall.EIO
	}
	if !h.read.Load() && !h.read.Swap(true) {
		fs.noteRead(h)
	}
	if fs.readSpliced(h, op) {
		return nil // no buffer needed: the reply comes from the cache file
	}
	dst := op.Dst
	if dst == nil {
		// jacobsa/fuse leaves Dst nil for reads larger than its buffer
		// (1 MiB, the most the kernel asks). A buffer made per read cost
		// a sixth of ferry's CPU in a warm epoch read through it, and as
		// much again in the garbage collector: reuse one, given back once
		// the reply is written (Callback).
		bp := readBufs.Get().(*[]byte)
		if int64(cap(*bp)) < op.Size {
			*bp = make([]byte, op.Size)
		}
		dst = (*bp)[:op.Size]
		op.Callback = func() { readBufs.Put(bp) }
	}
	if int64(len(dst)) > op.Size {
		dst = dst[:op.Size]
	}
	n, err := h.reader.ReadAt(ctx, dst, op.Offset)
	if err != nil && !errors.Is(err, io.EOF) {
		if errors.Is(err, bucket.ErrPrecondition) || errors.Is(err, bucket.ErrNotFound) {
			fs.versionGone(h.in.path)
		}
		return fs.errno("read", h.obj.Name, err)
	}
	op.BytesRead = n
	if op.Dst == nil {
		op.Data = [][]byte{dst[:n]}
	}
	return nil
}

func (fs *fileSystem) ReleaseFileHandle(ctx context.Context, op *fuseops.ReleaseFileHandleOp) error {
	fs.mu.Lock()
	h, ok := fs.handles.files[op.Handle]
	delete(fs.handles.files, op.Handle)
	fs.mu.Unlock()
	if !ok {
		return nil
	}
	if h.reader != nil {
		fs.noteRandom(h)
		h.reader.Close()
	} else {
		fs.readers.Closed(h.in.path)
	}
	if h.counted {
		fs.releasePassthrough(h.in, h.backing)
	}
	if h.reader != nil && h.read.Load() && fs.passthroughGranted() && !fs.pt.off.Load() {
		fs.ready.released(h.obj)
	}
	return nil
}

// FlushFile is sent on close(2), and the closer waits for the answer.
// Nothing is ever dirty, so the answer is ENOSYS: the kernel then stops
// sending flushes for the whole mount (fc->no_flush), and a data loader's
// open-read-close of a small file makes three round trips, not four
// (measured with 2000 warm 128 KiB files: 2000 flushes before).
func (fs *fileSystem) FlushFile(ctx context.Context, op *fuseops.FlushFileOp) error {
	return syscall.ENOSYS
}

func (fs *fileSystem) SyncFile(ctx context.Context, op *fuseops.SyncFileOp) error { return nil }

func (fs *fileSystem) SyncFS(ctx context.Context, op *fuseops.SyncFSOp) error { return nil }
