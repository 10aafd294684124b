package fs

import (
	"context"
	"hash/fnv"
	"sync"
	"syscall"

	"github.com/jacobsa/fuse/fuseops"
	"github.com/jacobsa/fuse/fuseutil"

	"ferry/metadata"
)

// dirHandle is one open directory. Its entries are read page by page as
// the kernel reads further and kept for the life of the handle
// (metadata.Lister), so an offset handed out once always means the same
// entry (entry i has offset i+1). What they hold is charged to the
// metadata's memory limit until the handle is released.
type dirHandle struct {
	// Constant data
	path string // directory path, "" for the root

	// Mutable state
	mu   sync.Mutex
	list *metadata.Lister // GUARDED_BY(mu)

	// Whether readdirplus pages give attributes (listuse.go): plusAll
	// for the whole listing, plusStick from a lookup on; use is the
	// directory's record, and lookupsSeen its count of lookups at the
	// page before.
	plusAll, plusStick bool    // GUARDED_BY(mu)
	use                *dirUse // GUARDED_BY(mu)
	lookupsSeen        uint64  // GUARDED_BY(mu)
}

func (fs *fileSystem) OpenDir(ctx context.Context, op *fuseops.OpenDirOp) error {
	in, err := fs.dirInode(op.Inode)
	if err != nil {
		return err
	}
	h := &dirHandle{path: in.path, list: fs.meta.NewLister(in.path)}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	op.Handle = fs.handles.add()
	fs.handles.dirs[op.Handle] = h
	return nil
}

func (fs *fileSystem) ReleaseDirHandle(ctx context.Context, op *fuseops.ReleaseDirHandleOp) error {
	fs.mu.Lock()
	h, ok := fs.handles.dirs[op.Handle]
	delete(fs.handles.dirs, op.Handle)
	fs.mu.Unlock()
	if ok {
		h.release(fs.meta)
	}
	return nil
}

// release gives back the memory h's listing was charged for (a
// directory of a million names read by `ls` holds about 100 MB until
// its handle is released).
func (h *dirHandle) release(meta *metadata.Cache) {
	h.mu.Lock()
	defer h.mu.Unlock()
	meta.Release(h.list)
}

func (fs *fileSystem) dirHandle(id fuseops.HandleID) (*dirHandle, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	h, ok := fs.handles.dirs[id]
	if !ok {
		return nil, syscall.EBADF
	}
	return h, nil
}

// direntInode is the inode number shown in a plain readdir entry. Listing
// must not create inodes (the kernel takes no reference for them), so a
// child the kernel has not looked up gets a stable number with the top bit
// set, which never collides with a real inode id.
//
// LOCKS_REQUIRED(fs.mu)
func (fs *fileSystem) direntInode(dir string, e metadata.DirEntry) fuseops.InodeID {
	path := metadata.ChildPath(dir, e.Name)
	if id, ok := fs.byKey[keyOf(path, e.Entry)]; ok {
		return id
	}
	h := fnv.New64a()
	h.Write([]byte(path))
	return fuseops.InodeID(h.Sum64() | 1<<63)
}

func direntType(k metadata.Kind) fuseutil.DirentType {
	if k == metadata.Dir {
		return fuseutil.DT_Directory
	}
	return fuseutil.DT_File
}

// readDir serves ReadDir and ReadDirPlus: entries from op.Offset on, as
// many as fit in op.Dst, fetching pages as needed.
func (fs *fileSystem) readDir(ctx context.Context, op *fuseops.ReadDirOp, plus bool) error {
	h, err := fs.dirHandle(op.Handle)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	attrs := plus && fs.lu.listingPage(h, int(op.Offset), fs.now())
	i := int(op.Offset)
	if plus {
		defer func() { fs.lu.handedOut(h, min(i, h.list.Len())) }()
	}
	for ; ; i++ {
		for !h.list.Complete && (i >= h.list.Len() || !h.list.Settled(i)) {
			if err := fs.meta.NextPage(ctx, h.list); err != nil {
				if op.BytesRead > 0 {
					return nil // return what we have; the next read retries
				}
				return fs.errno("readdir", h.path, err)
			}
		}
		if i >= h.list.Len() {
			return nil
		}
		e := h.list.At(i)
		d := fuseutil.Dirent{Offset: fuseops.DirOffset(i + 1), Name: e.Name, Type: direntType(e.Kind)}
		buf := op.Dst[op.BytesRead:]
		if !plus {
			fs.mu.Lock()
			d.Inode = fs.direntInode(h.path, e)
			fs.mu.Unlock()
			n := fuseutil.WriteDirent(buf, d)
			if n == 0 {
				return nil
			}
			op.BytesRead += n
			continue
		}
		// Each readdirplus entry the kernel receives takes a lookup
		// reference, so only count entries that fit.
		if direntPlusSize(e.Name) > len(buf) {
			return nil
		}
		// A listing can be older than what ferry has learned since (a
		// long-lived handle, or a List that began before an overwrite):
		// never hand the kernel an older version's inode for a name. If
		// the name is gone or changed kind since, it is listed without an
		// entry (child 0: the kernel caches nothing for it).
		ent := e.Entry
		path := ent.Obj.Name // a file's path, made by At
		if ent.Kind != metadata.File {
			path = metadata.ChildPath(h.path, e.Name)
		}
		var cur metadata.Entry
		newer := false
		if attrs {
			cur, newer = fs.meta.Newest(path, ent.Seq)
		}
		if !attrs || newer && cur.Kind != ent.Kind {
			// Names only (listuse.go), or the name is gone or changed
			// kind since the listing.
			fs.mu.Lock()
			d.Inode = fs.direntInode(h.path, e)
			fs.mu.Unlock()
			n := fuseutil.WriteDirentPlus(buf, fuseutil.DirentPlus{Dirent: d})
			if n == 0 {
				return nil
			}
			op.BytesRead += n
			continue
		}
		if newer {
			ent = cur
		}
		fs.mu.Lock()
		in := fs.acquire(path, ent)
		d.Inode = in.id
		n := fuseutil.WriteDirentPlus(buf, fuseutil.DirentPlus{Dirent: d, Entry: fs.childEntry(in)})
		if n == 0 {
			fs.forget(in.id, 1) // cannot happen: the size was checked
			fs.mu.Unlock()
			return nil
		}
		fs.mu.Unlock()
		op.BytesRead += n
	}
}

// direntPlusSize is the bytes fuseutil.WriteDirentPlus needs for name:
// fuse_entry_out (40 + fuse_attr 88) and fuse_dirent (24), then the name
// padded to 8 bytes.
func direntPlusSize(name string) int {
	return 40 + 88 + 24 + (len(name)+7)&^7
}

func (fs *fileSystem) ReadDir(ctx context.Context, op *fuseops.ReadDirOp) error {
	return fs.readDir(ctx, op, false)
}

func (fs *fileSystem) ReadDirPlus(ctx context.Context, op *fuseops.ReadDirPlusOp) error {
	return fs.readDir(ctx, &op.ReadDirOp, true)
}
