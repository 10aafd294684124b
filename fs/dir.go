package fs

import (
	"context"
	"hash/fnv"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/jacobsa/fuse/fuseops"
	"github.com/jacobsa/fuse/fuseutil"

	"ferry/bucket"
)

// dirHandle is one open directory. Its entries are fetched page by page as
// the kernel reads further and kept for the life of the handle, so an
// offset handed out once always means the same entry (entry i has offset
// i+1).
type dirHandle struct {
	// Constant data
	path string // directory path, "" for the root

	// Mutable state
	mu       sync.Mutex
	entries  []dirEntry     // GUARDED_BY(mu)
	index    map[string]int // GUARDED_BY(mu); name -> position in entries
	token    string         // GUARDED_BY(mu); continuation of the next page
	lastKey  string         // GUARDED_BY(mu); greatest object name or prefix listed so far
	complete bool           // GUARDED_BY(mu); every page has been read
	seq      uint64         // GUARDED_BY(mu); metaCache.begin of the first page, 0 before

	// Whether readdirplus pages give attributes (listuse.go): plusAll
	// for the whole listing, plusStick from a lookup on; use is the
	// directory's record, and lookupsSeen its count of lookups at the
	// page before.
	plusAll, plusStick bool    // GUARDED_BY(mu)
	use                *dirUse // GUARDED_BY(mu)
	lookupsSeen        uint64  // GUARDED_BY(mu)
}

// settled reports whether entry i can no longer change: a file "x" may
// still turn into a directory while the listing has not reached "x/" (it
// sorts after "x.txt", "x-1" and friends, possibly pages later).
//
// LOCKS_REQUIRED(h.mu)
func (h *dirHandle) settled(i int) bool {
	e := h.entries[i]
	return h.complete || e.kind == kindDir || h.lastKey >= dirPrefix(h.path)+e.name+"/"
}

func (fs *fileSystem) OpenDir(ctx context.Context, op *fuseops.OpenDirOp) error {
	in, err := fs.dirInode(op.Inode)
	if err != nil {
		return err
	}
	h := &dirHandle{path: in.path, index: make(map[string]int)}
	if cached, ok := fs.cache.listing(in.path); ok {
		h.entries = cached // shared and never modified: complete handles do not append
		h.complete = true
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	op.Handle = fs.nextHandle
	fs.nextHandle++
	fs.dirs[op.Handle] = h
	return nil
}

func (fs *fileSystem) ReleaseDirHandle(ctx context.Context, op *fuseops.ReleaseDirHandleOp) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	delete(fs.dirs, op.Handle)
	return nil
}

func (fs *fileSystem) dirHandle(id fuseops.HandleID) (*dirHandle, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	h, ok := fs.dirs[id]
	if !ok {
		return nil, syscall.EBADF
	}
	return h, nil
}

// fetchPage appends the next page of the listing to h.entries.
//
// LOCKS_REQUIRED(h.mu)
func (fs *fileSystem) fetchPage(ctx context.Context, h *dirHandle) error {
	prefix := dirPrefix(h.path)
	if h.seq == 0 {
		h.seq = fs.cache.begin()
	}
	l, err := fs.bucket.List(ctx, &bucket.ListRequest{
		Prefix:            prefix,
		Delimiter:         "/",
		ContinuationToken: h.token,
		MaxResults:        fs.pageSize,
	})
	if err != nil {
		return err
	}
	page := make([]dirEntry, 0, len(l.Objects)+len(l.Prefixes))
	for _, p := range l.Prefixes {
		name := strings.TrimSuffix(strings.TrimPrefix(p, prefix), "/")
		if !validName(name) {
			fs.countHidden(p)
			continue
		}
		page = append(page, dirEntry{name: name, entry: entry{kind: kindDir, seq: h.seq}})
	}
	for _, o := range l.Objects {
		if o.Name == prefix {
			continue // this directory's own marker
		}
		name := strings.TrimPrefix(o.Name, prefix)
		if !validName(name) {
			fs.countHidden(o.Name)
			continue
		}
		page = append(page, dirEntry{name: name, entry: entry{kind: kindFile, obj: o, seq: h.seq}})
	}
	// Objects and prefixes come as two sorted lists; show one sorted list.
	// Directories sort before files of the same name so the dedup below
	// keeps the directory.
	sort.SliceStable(page, func(i, j int) bool {
		if page[i].name != page[j].name {
			return page[i].name < page[j].name
		}
		return page[i].kind == kindDir && page[j].kind != kindDir
	})
	for _, e := range page {
		i, seen := h.index[e.name]
		switch {
		case !seen:
			h.index[e.name] = len(h.entries)
			h.entries = append(h.entries, e)
		case e.kind == kindDir && h.entries[i].kind != kindDir:
			// A file and a directory of the same name on different pages:
			// the directory wins, in place so offsets stay stable.
			h.entries[i] = e
		}
	}
	if n := len(l.Objects); n > 0 && l.Objects[n-1].Name > h.lastKey {
		h.lastKey = l.Objects[n-1].Name
	}
	if n := len(l.Prefixes); n > 0 && l.Prefixes[n-1] > h.lastKey {
		h.lastKey = l.Prefixes[n-1]
	}
	h.token = l.ContinuationToken
	if h.token == "" {
		h.complete = true
		// The cache owns its copy; this handle keeps appending nothing more
		// but may still be read.
		fs.cache.putListing(h.path, append([]dirEntry(nil), h.entries...), h.seq)
	}
	return nil
}

// direntInode is the inode number shown in a plain readdir entry. Listing
// must not create inodes (the kernel takes no reference for them), so a
// child the kernel has not looked up gets a stable number with the top bit
// set, which never collides with a real inode id.
//
// LOCKS_REQUIRED(fs.mu)
func (fs *fileSystem) direntInode(dir string, e dirEntry) fuseops.InodeID {
	path := childPath(dir, e.name)
	if id, ok := fs.byKey[keyOf(path, e.entry)]; ok {
		return id
	}
	h := fnv.New64a()
	h.Write([]byte(path))
	return fuseops.InodeID(h.Sum64() | 1<<63)
}

func direntType(k kind) fuseutil.DirentType {
	if k == kindDir {
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
		defer func() { fs.lu.handedOut(h, min(i, len(h.entries))) }()
	}
	for ; ; i++ {
		for !h.complete && (i >= len(h.entries) || !h.settled(i)) {
			if err := fs.fetchPage(ctx, h); err != nil {
				if op.BytesRead > 0 {
					return nil // return what we have; the next read retries
				}
				return fs.errno("readdir", h.path, err)
			}
		}
		if i >= len(h.entries) {
			return nil
		}
		e := h.entries[i]
		d := fuseutil.Dirent{Offset: fuseops.DirOffset(i + 1), Name: e.name, Type: direntType(e.kind)}
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
		if direntPlusSize(e.name) > len(buf) {
			return nil
		}
		// A listing can be older than what ferry has learned since (a
		// long-lived handle, or a List that began before an overwrite):
		// never hand the kernel an older version's inode for a name. If
		// the name is gone or changed kind since, it is listed without an
		// entry (child 0: the kernel caches nothing for it).
		ent := e.entry
		var cur entry
		newer := false
		if attrs {
			cur, newer = fs.cache.newest(childPath(h.path, e.name), ent.seq)
		}
		if !attrs || newer && cur.kind != ent.kind {
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
		in := fs.acquire(childPath(h.path, e.name), ent)
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
