package fs

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jacobsa/fuse"
	"github.com/jacobsa/fuse/fuseops"

	"ferry/metadata"
)

// Control lets the process that mounted a file system act on it while it
// is mounted: ferry's control socket uses it to drop cached metadata of a
// path without remounting (mounts with an infinite TTL never drop it by
// themselves). Create it with NewControl, pass it in Config.Control; it is
// usable once Mount has returned.
type Control struct {
	mu sync.Mutex
	fs *fileSystem // GUARDED_BY(mu); nil until mounted
}

// NewControl returns a Control to pass in Config.Control.
func NewControl() *Control { return &Control{} }

// ErrNotMounted is returned by Control methods before Mount or after the
// file system has stopped serving.
var ErrNotMounted = errors.New("fs: not mounted")

// ErrInvalid is returned by Control methods for a path no file can have,
// or a directory where a file is needed.
var ErrInvalid = errors.New("invalid argument")

func (c *Control) bind(fs *fileSystem) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fs = fs
}

func (c *Control) fileSystem() (*fileSystem, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fs == nil {
		return nil, ErrNotMounted
	}
	return c.fs, nil
}

// InvalidateResult says what one invalidation dropped.
type InvalidateResult struct {
	// Path is the object path invalidated, "" for the whole mount.
	Path string
	// CacheItems is how many metadata cache entries and listings were
	// dropped, and files opened ahead of their readers (closed).
	CacheItems int
	// KernelEntries is how many names the kernel was told to forget
	// (dentries and the attributes and pages of their inodes).
	KernelEntries int
}

// Invalidate drops everything the file system and the kernel cache about
// p and, if it is a directory, everything under it: positive and negative
// entries, listings (including the parent's, which names p), and the
// kernel's dentries, attributes and page cache of those inodes. The next
// lookup, stat or read of p goes to the store. p is an object path
// relative to the mount ("a/b", "" or "/" for the whole mount).
//
// Files open at the time keep reading the version they opened (reads are
// pinned to it); a changed object gives them ESTALE, as always.
func (c *Control) Invalidate(ctx context.Context, p string) (InvalidateResult, error) {
	fs, err := c.fileSystem()
	if err != nil {
		return InvalidateResult{}, err
	}
	clean, err := cleanObjectPath(p)
	if err != nil {
		return InvalidateResult{}, err
	}
	return fs.invalidate(ctx, clean)
}

// CachedFile is what Control.Cached says of one file.
type CachedFile struct {
	// Bytes of the file in the local disk cache, and its size.
	Bytes, Size int64
	// NoCache: the mount has no disk cache (and the rest is unset).
	NoCache bool
	// OpenedAhead: the mount has opened the file ahead of its reader
	// (--read-ahead-files, readahead.Files) and no open has taken it yet. Its
	// bytes are being fetched, or were, for a reader expected soon: what
	// the cache holds of it is not what it held before that reader came.
	OpenedAhead bool
}

// Cached reports what the local disk cache holds of the file at object
// path p. It reads no data (resolving p may cost a metadata request when
// the metadata cache does not know it). `ferry warm` asks it through the
// control socket: answering through getxattr instead would make the
// kernel send every `ls -l` a getxattr round trip per entry, which cut a
// cached `ls -lR` to a fifth of its speed.
func (c *Control) Cached(ctx context.Context, p string) (CachedFile, error) {
	fs, err := c.fileSystem()
	if err != nil {
		return CachedFile{}, err
	}
	clean, err := cleanObjectPath(p)
	if err != nil {
		return CachedFile{}, err
	}
	e, err := fs.meta.Resolve(ctx, clean)
	if err != nil {
		return CachedFile{}, err
	}
	if e.Kind != metadata.File {
		return CachedFile{}, fmt.Errorf("fs: %q is not a file: %w", p, ErrInvalid)
	}
	n, ok := fs.content.CachedBytes(e.Obj)
	if !ok {
		return CachedFile{NoCache: true}, nil
	}
	return CachedFile{Bytes: n, Size: int64(e.Obj.Size), OpenedAhead: fs.readers.OpenedAhead(clean, e.Obj)}, nil
}

// cleanObjectPath turns "/a/b/", "a/b" or "" into "a/b" or "" (the root),
// refusing names no inode can have.
func cleanObjectPath(p string) (string, error) {
	p = strings.Trim(p, "/")
	if p == "" {
		return "", nil
	}
	for _, c := range strings.Split(p, "/") {
		if !metadata.ValidName(c) {
			return "", fmt.Errorf("fs: invalid path %q: %w", p, ErrInvalid)
		}
	}
	return p, nil
}

// kernelEntry is one name the kernel may have cached.
type kernelEntry struct {
	parent fuseops.InodeID
	name   string
	inode  fuseops.InodeID
	dir    bool
}

func (fs *fileSystem) invalidate(ctx context.Context, p string) (InvalidateResult, error) {
	res := InvalidateResult{Path: p, CacheItems: fs.meta.Invalidate(p)}
	res.CacheItems += fs.readers.Forget(p)
	n, err := fs.notifyKernel(ctx, fs.kernelEntries(p))
	res.KernelEntries = n
	fs.log.Debug("fs: invalidated", "path", "/"+p, "cache_items", res.CacheItems, "kernel_entries", n)
	return res, err
}

// kernelEntries lists the inodes the kernel holds at or under p, with
// their parents. A name the kernel caches has a live inode, and so has
// its parent.
func (fs *fileSystem) kernelEntries(p string) []kernelEntry {
	var kes []kernelEntry
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for id, in := range fs.inodes {
		if id == fuseops.RootInodeID || !metadata.Under(in.path, p) {
			continue
		}
		dir, name := metadata.SplitPath(in.path)
		parent, ok := fs.byKey[inodeKey{path: dir, dir: true}]
		if !ok {
			continue // the kernel cannot hold a name whose parent it forgot
		}
		kes = append(kes, kernelEntry{parent: parent, name: name, inode: id, dir: in.dir})
	}
	return kes
}

// versionGone is called when the store proved the version of path that
// a handle read gone: a read pinned to it answered "changed" or "not
// found". Whatever the metadata TTL, the next lookup of path asks the
// store, and the kernel forgets the name (in the background: never from
// inside an op), so that new opens find the version there now. Handles
// open on the old version keep getting ESTALE.
func (fs *fileSystem) versionGone(path string) {
	fs.meta.Refresh(path)
	kes := fs.kernelEntries(path)
	if len(kes) == 0 {
		return
	}
	go func() {
		if _, err := fs.notifyKernel(context.Background(), kes); err != nil {
			fs.log.Debug("fs: cannot make the kernel forget a replaced file", "path", path, "err", err)
		}
	}()
}

// notifyTimeout bounds one invalidation's kernel notifications: the kernel
// answers each at once unless an op on the same directory is in flight.
const notifyTimeout = 30 * time.Second

// notifyKernel tells the kernel to forget each entry: the dentry (so the
// next path walk looks it up again), then the inode's attributes and, for
// files, its page cache. Names the kernel no longer has are not errors.
// It returns how many entries it notified.
func (fs *fileSystem) notifyKernel(ctx context.Context, kes []kernelEntry) (int, error) {
	if len(kes) == 0 || !fs.conn.serving.Load() {
		return 0, nil // no kernel has seen these names (unit tests)
	}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	// Notifications are written by jacobsa/fuse's notifier goroutine,
	// which exists only while the connection is served; if serving ends
	// mid-way this goroutine stays blocked, which only happens at unmount.
	go func() {
		var r result
		for _, ke := range kes {
			if err := fs.conn.notifier.InvalidateEntry(ke.parent, ke.name); err != nil && !errors.Is(err, syscall.ENOENT) {
				r.err = fmt.Errorf("fs: kernel refused to invalidate %q: %w", ke.name, err)
				break
			}
			off := int64(0) // attributes and every page
			if ke.dir {
				off = -1 // attributes only
			}
			if err := fs.conn.notifier.InvalidateInode(ke.inode, off, 0); err != nil && !errors.Is(err, syscall.ENOENT) {
				r.err = fmt.Errorf("fs: kernel refused to invalidate inode of %q: %w", ke.name, err)
				break
			}
			r.n++
		}
		done <- r
	}()
	timer := time.NewTimer(notifyTimeout)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.n, r.err
	case <-fs.conn.served:
		return 0, ErrNotMounted
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-timer.C:
		return 0, errors.New("fs: kernel invalidation timed out")
	}
}

// connState is the file system's side of the kernel connection.
type connState struct {
	// notifier writes invalidations; only while the connection is served
	// (jacobsa/fuse runs its writer goroutine inside ServeOps).
	notifier *fuse.Notifier
	// fc is the connection, once ServeOps has it (for passthrough's
	// backing files, passthrough.go).
	fc      atomic.Pointer[fuse.Connection]
	serving atomic.Bool   // ServeOps has started
	served  chan struct{} // closed when ServeOps returns
	once    sync.Once
}

func newConnState() *connState {
	return &connState{notifier: fuse.NewNotifier(), served: make(chan struct{})}
}

// servedServer tracks when jacobsa/fuse serves the connection, so that
// notifications are neither sent before nor waited for after.
type servedServer struct {
	inner fuse.Server
	conn  *connState
	fs    *fileSystem
}

func (s *servedServer) ServeOps(c *fuse.Connection) {
	s.conn.fc.Store(c)
	s.fs.logPassthrough(c)
	s.conn.serving.Store(true)
	defer s.conn.once.Do(func() { close(s.conn.served) })
	s.inner.ServeOps(c)
}

// objectPath is how an inode's path is shown to users and tools: with a
// leading slash, "/" for the root.
func objectPath(in *inode) string {
	return path.Join("/", in.path)
}
