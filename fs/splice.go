package fs

import (
	"context"
	"sync/atomic"

	"github.com/jacobsa/fuse/fuseops"

	"ferry/bucket"
)

// Reads spliced from the disk cache, and files read at random opened for
// direct I/O (Config.Splice).
//
// A read through ferry of bytes in the disk cache costs two copies in
// ferry (the cache file into a buffer, the buffer to the kernel), and the
// kernel keeps the bytes twice, in the cache file's page cache and in the
// FUSE file's. Since a block checked once in the mount is trusted while
// its file is unchanged (filecache/splice.go), its bytes need not pass
// through ferry at all: the read's reply is spliced from the cache file
// (jacobsa/fuse's ReadFileOp.SpliceFile), and the kernel copies them from
// the cache file's pages to their destination.
//
// For a reader of records at random offsets the destination matters too.
// Through the FUSE page cache every record lands in fresh page-cache
// pages first, then in the reader's buffer; the pages are seldom read
// again before they are dropped, and they hold a second copy of what the
// cache file's pages hold. So a file whose last handle read at random
// (readahead.Reader.ReadRandomly: large reads, no sequential stream) is
// opened with FOPEN_DIRECT_IO: its reads come to ferry as the reader made
// them, and a spliced reply is copied straight into the reader's buffer,
// once. The cache file's page cache still keeps the bytes in memory for
// the next epoch. Only where the kernel lets such files be mapped
// (FUSE_DIRECT_IO_ALLOW_MMAP, Linux 6.6 on): otherwise mmap of them would
// fail. A direct handle that reads sequentially puts the next open back
// on the page cache, and its kernel readahead.

// maxRandomFiles bounds spliceState.random: past it, an arbitrary entry
// is forgotten (and that file's next open is not direct).
const maxRandomFiles = 65536

// spliceState is the mount's splice state.
type spliceState struct {
	on             bool // Config.Splice
	directOpens    atomic.Uint64
	fallbackLogged atomic.Bool
	// random holds the files (by path and version) whose last handle
	// released that read them read at random. Not on the inode: the
	// kernel forgets inodes (under memory pressure, drop_caches) between
	// a data loader's epochs.
	random map[inodeKey]struct{} // GUARDED_BY(fileSystem.mu)
}

// readSpliced answers op from a file the reader hands out, if it does.
func (fs *fileSystem) readSpliced(h *fileHandle, op *fuseops.ReadFileOp) bool {
	if !fs.sp.on || op.Size <= 0 {
		return false
	}
	f, n, release, ok := h.reader.Spliceable(op.Offset, int(op.Size))
	if !ok {
		return false
	}
	op.SpliceFile, op.SpliceOff, op.BytesRead = f, op.Offset, n
	op.Callback = release
	op.Data = nil
	// The cache file fails to supply the bytes (an I/O error, cut short
	// behind ferry's back): read them through the cache, which checks
	// them, drops what is bad and fetches it again.
	off, reader := op.Offset, h.reader
	op.SpliceFallback = func(p []byte) (int, error) {
		if !fs.sp.fallbackLogged.Swap(true) {
			fs.log.Warn("fs: a read from a disk cache file failed; reading it again through the cache (logged once)", "path", h.obj.Name, "offset", off, "bytes", len(p))
		}
		return reader.ReadAt(context.Background(), p, off)
	}
	return true
}

// openDirectLocked reports whether an open of in (for obj), read through
// ferry, should be direct: the last handle of obj's version that read it
// read at random, and the kernel allows it.
// LOCKS_REQUIRED(fs.mu)
func (fs *fileSystem) openDirectLocked(in *inode, obj bucket.Object) bool {
	if !fs.sp.on {
		return false
	}
	if _, ok := fs.sp.random[inodeKey{path: in.path, version: obj.Version}]; !ok {
		return false
	}
	c := fs.conn.fc.Load()
	return c != nil && c.DirectIOAllowMmap()
}

// noteRandom records how h read, for the next open of its file, if it
// read enough to tell: a handle that read a header leaves the mark as it
// was.
func (fs *fileSystem) noteRandom(h *fileHandle) {
	if !fs.sp.on || !h.read.Load() {
		return
	}
	random, known := h.reader.ReadRandomly()
	if !known {
		return
	}
	key := inodeKey{path: h.in.path, version: h.obj.Version}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if !random {
		delete(fs.sp.random, key)
		return
	}
	if fs.sp.random == nil {
		fs.sp.random = map[inodeKey]struct{}{}
	}
	if len(fs.sp.random) >= maxRandomFiles {
		for k := range fs.sp.random {
			delete(fs.sp.random, k)
			break
		}
	}
	fs.sp.random[key] = struct{}{}
}
