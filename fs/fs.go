// Package fs is ferry's FUSE file system (jacobsa/fuse): it shows the
// bucket's names, as package metadata resolves and lists them, as a
// read-only tree of directories and files; keeps the kernel's lookup
// counts and inodes (one per object version, so that the kernel's page
// cache never mixes versions); sets the kernel's entry and attribute
// timeouts from the metadata TTL; and serves reads through readahead, or
// has the kernel read a file held whole in the disk cache itself (FUSE
// passthrough). Store errors become errnos in one place (errno).
//
// It must never write to the bucket, never show a name that escapes its
// directory ("..", "a//b"), never serve an open file bytes of another
// version than the one it opened, and never panic on an odd object name.
package fs

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/jacobsa/fuse/fuseops"
	"github.com/jacobsa/fuse/fuseutil"
	"github.com/prometheus/client_golang/prometheus"

	"ferry/bucket"
	"ferry/metadata"
	"ferry/readahead"
)

// Config is what the file system needs.
type Config struct {
	// Metadata says what names are, from its cache or the store.
	// Required.
	Metadata *metadata.Cache
	// Content reads the files' bytes (readahead, over the disk cache).
	// Required.
	Content readahead.Content
	// ReadAheadFiles opens files ahead of their readers when a
	// directory's files are read in listing order (readahead.Files).
	ReadAheadFiles bool
	// Passthrough has the kernel read a file held whole in the disk cache
	// from the cache file itself, once its bytes pass their check
	// (passthrough.go); and reads a file read through ferry, once
	// released, on to where it can be (ready.go).
	Passthrough bool
	// Splice sends reads of bytes the disk cache has checked already
	// from the cache file, without ferry reading them, and opens files
	// read at random for direct I/O (splice.go).
	Splice bool
	// Ownership and permission bits of every file and directory. Zero
	// modes default to 0444 and 0555.
	Uid, Gid          uint32
	FileMode, DirMode os.FileMode
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Registerer receives fs metrics when set.
	Registerer prometheus.Registerer
	// Control, when set, is bound to the file system by Mount, for
	// invalidating its caches at run time (control.go).
	Control *Control
}

// forever is what a -1 TTL tells the kernel: fuse has no "never expires".
const forever = 365 * 24 * time.Hour

// fileSystem implements fuseutil.FileSystem, read-only.
//
// LOCK ORDER: dirHandle.mu, then fileSystem.mu; readahead.Files' lock,
// then fileSystem.mu (ReadBefore). Store requests (package metadata) are
// never made with fileSystem.mu held.
type fileSystem struct {
	fuseutil.NotImplementedFileSystem

	// Dependencies
	meta    *metadata.Cache
	content readahead.Content
	readers *readahead.Files // opens the handles' readers, and files ahead
	log     *slog.Logger
	now     func() time.Time
	// conn is the kernel connection, for invalidations (control.go).
	conn *connState
	// ops counts and times FUSE ops; nil without a Registerer.
	ops *opMetrics

	// Constant data
	attrs attrs // what the kernel is told of every inode

	// Mutable state with its own synchronisation
	pt    ptState
	sp    spliceState
	ready *readier
	lu    listUse        // what listings answer with (listuse.go)
	intr  interruptState // FUSE interrupts (interrupt.go)

	mu   sync.Mutex
	trim trimState // GUARDED_BY(mu); the inodes' memory bound (inodes.go)

	// INVARIANT: inodes[RootInodeID] is the root: a directory with path "".
	// INVARIANT: for every id, in := inodes[id]: in.id == id and
	//            byKey[in.key()] == id; and byKey has no other entries.
	// INVARIANT: every inode but the root has lookups > 0.
	// INVARIANT: every id < nextInode.
	inodes    map[fuseops.InodeID]*inode   // GUARDED_BY(mu)
	byKey     map[inodeKey]fuseops.InodeID // GUARDED_BY(mu)
	nextInode fuseops.InodeID              // GUARDED_BY(mu)
	handles   handles                      // GUARDED_BY(mu)
}

// attrs is what the kernel is told of every inode besides its object:
// ownership, modes, and how long it may cache names and attributes.
type attrs struct {
	ttl               time.Duration // the metadata TTL: -1 forever, 0 off
	uid, gid          uint32
	fileMode, dirMode os.FileMode
	mountTime         time.Time // directories' times
}

// handles are the open file and directory handles.
type handles struct {
	dirs  map[fuseops.HandleID]*dirHandle
	files map[fuseops.HandleID]*fileHandle
	next  fuseops.HandleID
}

// add returns a new handle id.
func (h *handles) add() fuseops.HandleID {
	id := h.next
	h.next++
	return id
}

var _ fuseutil.FileSystem = (*fileSystem)(nil)

// inodeKey names an inode: the same path as a file and as a directory are
// different inodes, so a name that turns from one into the other gets a
// new inode number rather than changing type under the kernel. So is each
// version of a file: the kernel's page cache belongs to the inode, and a
// handle still reading the old version must never be served the new
// version's pages that another handle brought in.
type inodeKey struct {
	path    string
	dir     bool
	version string // files: the object version the inode shows
}

type inode struct {
	// Constant data
	id   fuseops.InodeID
	path string // object name; for a directory without its trailing "/"
	dir  bool

	// Mutable state
	lookups uint64 // GUARDED_BY(fileSystem.mu)
	// seen is the latest Entry.Seq that named this inode: what ferry
	// learned later about its path may say it is replaced.
	seen uint64 // GUARDED_BY(fileSystem.mu)
	// obj is the version the inode shows, fixed for its life, unless the
	// store gives no versions (Version ""): then it follows the store.
	obj inodeObject // GUARDED_BY(fileSystem.mu); files only
	// open is what opens of a file left on it, nil until the first: most
	// inodes the kernel holds are never opened (`ls -l`, `find`), and an
	// inode is 96 bytes without it, not 192.
	open *inodeOpen // GUARDED_BY(fileSystem.mu); set once
}

// inodeObject is the object a file inode shows, without its name (the
// inode's path), and its time as Unix nanoseconds.
type inodeObject struct {
	version string
	size    uint64
	updated int64 // noUpdated for the zero time
	crc     uint32
	hasCRC  bool
}

// noUpdated stands for the zero time.Time, which has no Unix nanoseconds.
const noUpdated = math.MinInt64

// objectAt is obj as inodeObject keeps it.
func objectAt(obj bucket.Object) inodeObject {
	o := inodeObject{version: obj.Version, size: obj.Size, updated: noUpdated, crc: obj.CRC32C, hasCRC: obj.HasCRC32C}
	if !obj.Updated.IsZero() {
		o.updated = obj.Updated.UnixNano()
	}
	return o
}

// updatedTime is the object's modification time.
func (o *inodeObject) updatedTime() time.Time {
	if o.updated == noUpdated {
		return time.Time{}
	}
	return time.Unix(0, o.updated)
}

// object is the object in shows, named by its path.
//
// LOCKS_REQUIRED(fs.mu)
func (in *inode) object() bucket.Object {
	o := &in.obj
	return bucket.Object{Name: in.path, Size: o.size, Version: o.version, Updated: o.updatedTime(), CRC32C: o.crc, HasCRC32C: o.hasCRC}
}

// inodeOpen is what the opens of a file inode left on it.
type inodeOpen struct {
	opened   bool   // GUARDED_BY(fileSystem.mu); has been opened before
	openedAt string // GUARDED_BY(fileSystem.mu); obj's version at the last open
	// read: a handle has read the inode, in version readAt (the last).
	read   bool   // GUARDED_BY(fileSystem.mu)
	readAt string // GUARDED_BY(fileSystem.mu)

	// Passthrough (passthrough.go): ptMu serialises the opens' choice of
	// I/O mode; cachedOpens counts the handles read through ferry,
	// backing is the passthrough handles' file (or nil).
	ptMu        sync.Mutex
	cachedOpens int      // GUARDED_BY(fileSystem.mu)
	backing     *backing // GUARDED_BY(fileSystem.mu)
}

// opens returns in's open state, making it on the first open.
//
// LOCKS_REQUIRED(fs.mu)
func (in *inode) opens() *inodeOpen {
	if in.open == nil {
		in.open = &inodeOpen{}
	}
	return in.open
}

func (in *inode) key() inodeKey {
	return inodeKey{path: in.path, dir: in.dir, version: in.obj.version}
}

// newFileSystem builds the file system; now is the clock (tests pass a
// fake one).
func newFileSystem(cfg Config, now func() time.Time) (*fileSystem, error) {
	if cfg.Metadata == nil || cfg.Content == nil {
		return nil, errors.New("fs: Config.Metadata and Config.Content are required")
	}
	if now == nil {
		now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fileMode, dirMode := cfg.FileMode.Perm(), cfg.DirMode.Perm()
	if fileMode == 0 {
		fileMode = 0o444
	}
	if dirMode == 0 {
		dirMode = 0o555
	}
	fs := &fileSystem{
		meta:    cfg.Metadata,
		content: cfg.Content,
		log:     log,
		now:     now,
		conn:    newConnState(),
		attrs: attrs{ttl: cfg.Metadata.TTL(), uid: cfg.Uid, gid: cfg.Gid,
			fileMode: fileMode, dirMode: dirMode, mountTime: now()},
		pt:        ptState{on: cfg.Passthrough, maxSize: passthroughMaxSize},
		trim:      trimState{limit: cfg.Metadata.MemoryLimit() / 2},
		sp:        spliceState{on: cfg.Splice},
		inodes:    make(map[fuseops.InodeID]*inode),
		byKey:     make(map[inodeKey]fuseops.InodeID),
		nextInode: fuseops.RootInodeID + 1,
		handles: handles{dirs: make(map[fuseops.HandleID]*dirHandle),
			files: make(map[fuseops.HandleID]*fileHandle), next: 1},
	}
	fs.readers = readahead.NewFiles(cfg.Content, fs, cfg.ReadAheadFiles)
	fs.ready = newReadier(cfg.Content, cfg.Passthrough, log, now)
	// The kernel holds one implicit reference to the root.
	root := &inode{id: fuseops.RootInodeID, path: "", dir: true, lookups: 1}
	fs.inodes[root.id] = root
	fs.byKey[root.key()] = root.id
	if cfg.Registerer != nil {
		if err := fs.register(cfg.Registerer); err != nil {
			return nil, err
		}
	}
	return fs, nil
}

// inodeCount is how many inodes are live, the root included.
func (fs *fileSystem) inodeCount() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.inodes)
}

// checkInvariants panics if an INVARIANT above does not hold. Tests call it.
func (fs *fileSystem) checkInvariants() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	root, ok := fs.inodes[fuseops.RootInodeID]
	if !ok || !root.dir || root.path != "" {
		panic("fs: root inode missing or wrong")
	}
	if len(fs.byKey) != len(fs.inodes) {
		panic("fs: byKey and inodes differ in size")
	}
	for id, in := range fs.inodes {
		if in.id != id {
			panic("fs: inode id mismatch")
		}
		if fs.byKey[in.key()] != id {
			panic("fs: byKey does not point at inode " + in.path)
		}
		if id != fuseops.RootInodeID && in.lookups == 0 {
			panic("fs: live inode with zero lookups: " + in.path)
		}
		if id >= fs.nextInode {
			panic("fs: inode id beyond nextInode")
		}
	}
	// The inodes' bytes (inodes.go) are counted right.
	var bytes int64
	for id, in := range fs.inodes {
		if id != fuseops.RootInodeID {
			bytes += inodeBytes(in)
		}
	}
	if bytes != fs.trim.bytes {
		panic("fs: the inodes' bytes are not counted right")
	}
	// Passthrough counts (passthrough.go) match the open handles.
	cached := map[*inode]int{}
	backed := map[*backing]int{}
	for _, h := range fs.handles.files {
		switch {
		case !h.counted:
		case h.backing != nil:
			backed[h.backing]++
			if h.in.open == nil || h.in.open.backing != h.backing {
				panic("fs: a passthrough handle's backing is not its inode's: " + h.in.path)
			}
		default:
			cached[h.in]++
		}
	}
	for _, in := range fs.inodes {
		var o inodeOpen
		if in.open != nil {
			o.cachedOpens, o.backing = in.open.cachedOpens, in.open.backing
		}
		if o.cachedOpens != cached[in] {
			panic("fs: cachedOpens does not count the inode's handles: " + in.path)
		}
		if b := o.backing; b != nil && (b.handles == 0 || b.handles != backed[b]) {
			panic("fs: a backing's handles are not counted right: " + in.path)
		}
	}
}

////////////////////////////////////////////////////////////////////////
// Errors
////////////////////////////////////////////////////////////////////////

// errno is the one place a bucket error becomes an errno. The real error
// is logged here because the kernel only ever sees the number.
func (fs *fileSystem) errno(op string, path string, err error) error {
	if err == nil {
		return nil
	}
	// Our own errnos pass through; a store error may wrap the errno of a
	// socket (ECONNREFUSED, ECONNRESET), which must not reach the reader.
	var en syscall.Errno
	if errors.As(err, &en) && !isStoreError(err) {
		return en
	}
	var code syscall.Errno
	level := slog.LevelWarn
	switch {
	// Cancellation first: bucket.ContextError joins ErrCanceled with the
	// error the store gave, which may match another sentinel too.
	// A bare context error is ours only when no store sentinel says
	// otherwise: a backend's own timeout is ErrUnavailable wrapping
	// context.DeadlineExceeded, and that is EIO, not EINTR.
	case errors.Is(err, bucket.ErrCanceled),
		!isStoreError(err) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		code, level = syscall.EINTR, slog.LevelDebug
	case errors.Is(err, bucket.ErrNotFound):
		code, level = syscall.ENOENT, slog.LevelDebug
	case errors.Is(err, bucket.ErrPrecondition):
		code = syscall.ESTALE
	case errors.Is(err, bucket.ErrPermission):
		code = syscall.EACCES
	default: // ErrUnavailable, ErrInvalid, anything unexpected
		code = syscall.EIO
	}
	fs.log.Log(context.Background(), level, "fs: store error", "op", op, "path", path, "errno", code.Error(), "err", err)
	return code
}

////////////////////////////////////////////////////////////////////////
// Inodes and attributes
////////////////////////////////////////////////////////////////////////

// expiration turns the metadata TTL into a kernel expiration time.
func (fs *fileSystem) expiration() time.Time {
	switch ttl := fs.attrs.ttl; {
	case ttl < 0:
		return time.Now().Add(forever)
	case ttl == 0:
		return time.Time{}
	default:
		// The kernel counts from the reply, in real time.
		return time.Now().Add(ttl)
	}
}

// LOCKS_REQUIRED(fs.mu)
func (fs *fileSystem) attributes(in *inode) fuseops.InodeAttributes {
	a := &fs.attrs
	if in.dir {
		return fuseops.InodeAttributes{
			Nlink: 2,
			Mode:  os.ModeDir | a.dirMode,
			Atime: a.mountTime, Mtime: a.mountTime, Ctime: a.mountTime,
			Uid: a.uid, Gid: a.gid,
		}
	}
	t := in.obj.updatedTime()
	return fuseops.InodeAttributes{
		Size:  in.obj.size,
		Nlink: 1,
		Mode:  a.fileMode,
		Atime: t, Mtime: t, Ctime: t,
		Uid: a.uid, Gid: a.gid,
	}
}

// acquire returns the inode for path as e says, creating it if needed,
// and adds one kernel lookup reference.
//
// LOCKS_REQUIRED(fs.mu)
func (fs *fileSystem) acquire(path string, e metadata.Entry) *inode {
	key := keyOf(path, e)
	in, ok := fs.inodes[fs.byKey[key]]
	if !ok {
		if e.Kind == metadata.File && e.Obj.Name == path {
			// A listing's entry has the path and version in one
			// allocation (metadata.DirEntry): keep that, not a copy.
			path = e.Obj.Name
			key.path = path
		}
		in = &inode{id: fs.nextInode, path: path, dir: key.dir}
		if !in.dir {
			in.obj = objectAt(e.Obj)
		}
		fs.nextInode++
		fs.inodes[in.id] = in
		fs.byKey[key] = in.id
		fs.chargeLocked(inodeBytes(in))
	}
	fs.followUnversioned(in, e)
	in.seen = max(in.seen, e.Seq)
	in.lookups++
	return in
}

// keyOf is the key of the inode that shows e at path.
func keyOf(path string, e metadata.Entry) inodeKey {
	if e.Kind == metadata.Dir {
		return inodeKey{path: path, dir: true}
	}
	return inodeKey{path: path, version: e.Obj.Version}
}

// followUnversioned updates a file inode of a store without versions
// (nothing to pin, so nothing to keep apart) to the store's latest view; a
// listing served from cache may be older than what a lookup saw, so an
// older Updated time never replaces a newer one.
//
// LOCKS_REQUIRED(fs.mu)
func (fs *fileSystem) followUnversioned(in *inode, e metadata.Entry) {
	if !in.dir && e.Kind == metadata.File && in.obj.version == "" && e.Obj.Version == "" && !e.Obj.Updated.Before(in.obj.updatedTime()) {
		in.obj = objectAt(e.Obj)
	}
}

// childEntry fills the reply for a looked-up inode.
//
// LOCKS_REQUIRED(fs.mu)
func (fs *fileSystem) childEntry(in *inode) fuseops.ChildInodeEntry {
	exp := fs.expiration()
	return fuseops.ChildInodeEntry{
		Child:                in.id,
		Attributes:           fs.attributes(in),
		AttributesExpiration: exp,
		EntryExpiration:      exp,
	}
}

// dirInode returns the live directory inode id, or an error for the kernel.
func (fs *fileSystem) dirInode(id fuseops.InodeID) (*inode, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	in, ok := fs.inodes[id]
	if !ok {
		return nil, syscall.ESTALE
	}
	if !in.dir {
		return nil, syscall.ENOTDIR
	}
	return in, nil
}

// forget drops n kernel references to id, freeing the inode at zero.
//
// LOCKS_REQUIRED(fs.mu)
func (fs *fileSystem) forget(id fuseops.InodeID, n uint64) {
	in, ok := fs.inodes[id]
	if !ok {
		fs.log.Error("fs: forget of unknown inode", "inode", id, "n", n)
		return
	}
	if n > in.lookups {
		fs.log.Error("fs: forget below zero", "inode", id, "path", in.path, "n", n, "lookups", in.lookups)
		n = in.lookups
	}
	in.lookups -= n
	if in.lookups == 0 && id != fuseops.RootInodeID {
		delete(fs.inodes, id)
		delete(fs.byKey, in.key())
		fs.chargeLocked(-inodeBytes(in))
	}
}

////////////////////////////////////////////////////////////////////////
// fuseutil.FileSystem: inodes
////////////////////////////////////////////////////////////////////////

func (fs *fileSystem) StatFS(ctx context.Context, op *fuseops.StatFSOp) error {
	// A bucket has no capacity; report a large, constant one so that tools
	// that check free space before reading do not refuse.
	const blocks = 1 << 40
	op.BlockSize = 4096
	op.Blocks, op.BlocksFree, op.BlocksAvailable = blocks, blocks, blocks
	op.IoSize = 1 << 20
	op.Inodes, op.InodesFree = 1<<40, 1<<40
	return nil
}

func (fs *fileSystem) LookUpInode(ctx context.Context, op *fuseops.LookUpInodeOp) error {
	parent, err := fs.dirInode(op.Parent)
	if err != nil {
		return err
	}
	path := metadata.ChildPath(parent.path, op.Name)
	if !metadata.ValidName(op.Name) {
		fs.meta.NoteHidden(path)
		return syscall.ENOENT
	}
	e, err := fs.meta.Resolve(ctx, path)
	if err != nil {
		return fs.errno("lookup", path, err)
	}
	if e.Kind == metadata.None {
		return syscall.ENOENT
	}
	fs.lu.used(parent.path, true)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	op.Entry = fs.childEntry(fs.acquire(path, e))
	return nil
}

func (fs *fileSystem) GetInodeAttributes(ctx context.Context, op *fuseops.GetInodeAttributesOp) error {
	fs.mu.Lock()
	in, ok := fs.inodes[op.Inode]
	unversioned := ok && !in.dir && in.obj.version == ""
	fs.mu.Unlock()
	if !ok {
		return syscall.ESTALE
	}
	// A file inode shows one version, whose attributes never change (a
	// new version is a new inode, found by lookup). Only a store without
	// versions is asked again, once the TTL lets it; if it cannot say,
	// the last attributes stand.
	if unversioned {
		if _, err := fs.current(ctx, in); err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, bucket.ErrUnavailable) {
			return fs.errno("getattr", in.path, err)
		}
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	op.Attributes = fs.attributes(in)
	op.AttributesExpiration = fs.expiration()
	return nil
}

// current re-resolves a file inode's path (from cache while fresh) and
// returns what is there now; an unversioned inode follows it. The error
// is syscall.ENOENT if the path is no longer a file, else the store's.
func (fs *fileSystem) current(ctx context.Context, in *inode) (metadata.Entry, error) {
	e, err := fs.meta.Resolve(ctx, in.path)
	if err != nil {
		return metadata.Entry{}, err
	}
	if e.Kind != metadata.File {
		return metadata.Entry{}, syscall.ENOENT
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.followUnversioned(in, e)
	return e, nil
}

func (fs *fileSystem) ForgetInode(ctx context.Context, op *fuseops.ForgetInodeOp) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.forget(op.Inode, op.N)
	return nil
}

func (fs *fileSystem) BatchForget(ctx context.Context, op *fuseops.BatchForgetOp) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, e := range op.Entries {
		fs.forget(e.Inode, e.N)
	}
	return nil
}

// Destroy runs once the connection ends: release whatever the kernel did
// not.
func (fs *fileSystem) Destroy() {
	fs.readers.Close()
	fs.ready.stop()
	fs.mu.Lock()
	files, dirs := fs.handles.files, fs.handles.dirs
	fs.handles.files = make(map[fuseops.HandleID]*fileHandle)
	fs.handles.dirs = make(map[fuseops.HandleID]*dirHandle)
	fs.mu.Unlock()
	for _, h := range dirs {
		h.release(fs.meta)
	}
	for _, h := range files {
		if h.reader != nil {
			h.reader.Close()
		}
		if h.counted {
			fs.releasePassthrough(h.in, h.backing)
		}
	}
}

////////////////////////////////////////////////////////////////////////
// Read-only: every change is EROFS. (The mount is "ro" too, so the kernel
// stops most of these first; these answer the rest.)
////////////////////////////////////////////////////////////////////////

func (fs *fileSystem) SetInodeAttributes(ctx context.Context, op *fuseops.SetInodeAttributesOp) error {
	return syscall.EROFS
}
func (fs *fileSystem) MkDir(ctx context.Context, op *fuseops.MkDirOp) error   { return syscall.EROFS }
func (fs *fileSystem) MkNode(ctx context.Context, op *fuseops.MkNodeOp) error { return syscall.EROFS }
func (fs *fileSystem) CreateFile(ctx context.Context, op *fuseops.CreateFileOp) error {
	return syscall.EROFS
}
func (fs *fileSystem) CreateLink(ctx context.Context, op *fuseops.CreateLinkOp) error {
	return syscall.EROFS
}
func (fs *fileSystem) CreateSymlink(ctx context.Context, op *fuseops.CreateSymlinkOp) error {
	return syscall.EROFS
}
func (fs *fileSystem) Rename(ctx context.Context, op *fuseops.RenameOp) error { return syscall.EROFS }
func (fs *fileSystem) RmDir(ctx context.Context, op *fuseops.RmDirOp) error   { return syscall.EROFS }
func (fs *fileSystem) Unlink(ctx context.Context, op *fuseops.UnlinkOp) error { return syscall.EROFS }
func (fs *fileSystem) WriteFile(ctx context.Context, op *fuseops.WriteFileOp) error {
	return syscall.EROFS
}
func (fs *fileSystem) SetXattr(ctx context.Context, op *fuseops.SetXattrOp) error {
	return syscall.EROFS
}
func (fs *fileSystem) RemoveXattr(ctx context.Context, op *fuseops.RemoveXattrOp) error {
	return syscall.EROFS
}
func (fs *fileSystem) Fallocate(ctx context.Context, op *fuseops.FallocateOp) error {
	return syscall.EROFS
}

// GetXattr and ListXattr are left to fuseutil.NotImplementedFileSystem:
// ENOSYS, after which the kernel stops asking (`ls -l` asks for
// security.selinux and ACLs of every entry).
