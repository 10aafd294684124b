// Package file serves a local directory (a test fixture or NAS data) as a
// bucket.Bucket and bucket.Writer. An object name is a path relative to
// the root with "/" separators; a directory on disk is a prefix; the
// version of an object is its size, mtime (ns) and inode.
//
// It must never touch anything outside the root: names with "..", ".",
// empty components, NUL or a leading "/" are rejected before any system
// call, and every access goes through an os.Root, which refuses symbolic
// links that lead out of the root. Symbolic links are followed to the
// files and directories they name inside the root (links.go), and shown
// under their own names; a link that leads out of the root, points to
// nothing or goes round a loop is hidden, counted and logged once.
// Listings show only regular files and directories, reached directly or
// through links. A ranged read makes the kernel read from the disk only
// the range asked for, not its readahead past the end (ranged.go).
package file

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ferry/bucket"
)

var (
	_ bucket.Bucket = (*Bucket)(nil)
	_ bucket.Writer = (*Bucket)(nil)
)

// DefaultMaxResults is the page size when ListRequest.MaxResults is 0, and
// the cap on larger requests (as on GCS and S3).
const DefaultMaxResults = 1000

// tempPrefix starts the names of Put's temporary files. No name with a
// component that starts with it is an object, in listings or by name, so
// a half-written object is never seen (nor is a file of the user's that
// happens to be named so: one rule, whatever was read before).
const tempPrefix = ".ferry-put-"

// isTemp reports whether a component of name starts with tempPrefix.
func isTemp(name string) bool {
	for c := range strings.SplitSeq(name, "/") {
		if strings.HasPrefix(c, tempPrefix) {
			return true
		}
	}
	return false
}

// Bucket is a directory tree seen as a bucket. Safe for concurrent use.
type Bucket struct {
	// Dependencies
	log *slog.Logger // nil discards

	// Constant data
	dir     string     // absolute root, for Name()
	realDir string     // dir with its symbolic links resolved
	root    *os.Root   // every file access goes through it
	plain   *plainRoot // objects read with no link on the way (plainopen.go)

	// Mutable state
	aheads       readAheads    // each device's read_ahead_kb (ranged.go)
	hiddenLinks  atomic.Uint64 // see HiddenLinks
	hiddenLogged atomic.Bool
	dirReads     atomic.Uint64 // directories read for listings (tests)

	mu sync.Mutex
	// lastMtime is the mtime given to the most recent Put. Put makes mtimes
	// strictly increasing so that two quick writes of the same size, which
	// may reuse a freed inode, still get different versions.
	lastMtime time.Time // GUARDED_BY(mu)
	// snaps are directories being listed page by page (list.go).
	snaps map[snapKey]*dirSnap // GUARDED_BY(mu)
}

// Config says which directory to serve, and where to report what it
// hides.
type Config struct {
	// Dir is the root; it must exist.
	Dir string
	// Logger gets the first hidden symbolic link; nil discards.
	Logger *slog.Logger
	// Registerer receives ferry_file_hidden_links_total; nil registers
	// none (HiddenLinks still counts).
	Registerer prometheus.Registerer
}

// New opens cfg.Dir as a bucket.
func New(cfg Config) (*Bucket, error) {
	dir := cfg.Dir
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("file: %q: %w: %w", dir, bucket.ErrInvalid, err)
	}
	// The caller names the directory (the URL): say only what is wrong.
	fi, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, &rootError{"no such directory", bucket.ErrNotFound, err}
	case errors.Is(err, fs.ErrPermission):
		return nil, &rootError{"permission denied", bucket.ErrPermission, err}
	case err != nil:
		return nil, mapErr(context.Background(), "open", abs, err)
	case !fi.IsDir():
		return nil, &rootError{"not a directory", bucket.ErrInvalid, nil}
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, mapErr(context.Background(), "open", abs, err)
	}
	learnPathEscapes(root)
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		real = abs
	}
	b := &Bucket{log: cfg.Logger, dir: abs, realDir: real, root: root, plain: newPlainRoot(root)}
	if reg := cfg.Registerer; reg != nil {
		err := reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ferry_file_hidden_links_total",
			Help: "Symbolic links in a file:// source hidden because they lead out of it, point to nothing or loop.",
		}, func() float64 { return float64(b.hiddenLinks.Load()) }))
		var are prometheus.AlreadyRegisteredError
		if err != nil && !errors.As(err, &are) { // another bucket's, in tests: it keeps the name
			b.plain.close()
			root.Close()
			return nil, err
		}
	}
	return b, nil
}

// rootError is New's error about the directory itself: what is wrong with
// it, in a few words, matching a bucket sentinel and the os error.
type rootError struct {
	what     string
	sentinel error
	err      error // nil when the os said nothing
}

func (e *rootError) Error() string   { return e.what }
func (e *rootError) Unwrap() []error { return []error{e.sentinel, e.err} }

// Close releases the root directory handle. The bucket must not be used
// afterwards.
func (b *Bucket) Close() error {
	b.plain.close()
	return b.root.Close()
}

// Name implements bucket.Bucket.
func (b *Bucket) Name() string { return "file://" + b.dir }

// checkName reports whether name is a safe object path: relative, with no
// empty, "." or ".." components and no NUL. A trailing "/" (a directory
// marker in GCS terms) is allowed only if marker is set; the caller decides
// what it means.
func checkName(name string, marker bool) error {
	if marker {
		name = strings.TrimSuffix(name, "/")
	}
	if name == "" {
		return fmt.Errorf("empty object name: %w", bucket.ErrInvalid)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("object name contains NUL: %w", bucket.ErrInvalid)
	}
	for c := range strings.SplitSeq(name, "/") {
		switch c {
		case "":
			return fmt.Errorf("object name %q has an empty component or leading '/': %w", name, bucket.ErrInvalid)
		case ".", "..":
			return fmt.Errorf("object name %q has a %q component: %w", name, c, bucket.ErrInvalid)
		}
	}
	return nil
}

// errPathEscapes is the error os.Root returns for a path that leads out of
// the root (through a symbolic link); os does not export it, so New learns
// it by asking for "..", which our own name checks never let through.
var (
	errPathEscapesOnce sync.Once
	errPathEscapes     error
)

func learnPathEscapes(root *os.Root) {
	errPathEscapesOnce.Do(func() {
		_, err := root.Lstat("..")
		var pe *fs.PathError
		if errors.As(err, &pe) {
			errPathEscapes = pe.Err
		}
	})
}

// mapErr translates an os error into the bucket sentinels, keeping the
// original for logs.
func mapErr(ctx context.Context, op, name string, err error) error {
	var sentinel error
	var le *linkError
	switch {
	case errors.As(err, &le), errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR),
		errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ELOOP),
		errPathEscapes != nil && errors.Is(err, errPathEscapes):
		// A link out of the root (or one hidden by links.go) is, for
		// the bucket, nothing.
		sentinel = bucket.ErrNotFound
	case errors.Is(err, fs.ErrPermission): // EACCES, EPERM
		sentinel = bucket.ErrPermission
	case errors.Is(err, syscall.EIO), errors.Is(err, syscall.ESTALE), errors.Is(err, syscall.ETIMEDOUT),
		errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
		// What a flaky NAS mount returns; worth another try.
		sentinel = bucket.ErrUnavailable
	}
	if sentinel != nil {
		err = fmt.Errorf("file: %s %q: %w: %w", op, name, sentinel, err)
	} else {
		err = fmt.Errorf("file: %s %q: %w", op, name, err)
	}
	return bucket.ContextError(ctx, err)
}

func ctxErr(ctx context.Context, op, name string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("file: %s %q: %w", op, name, bucket.ContextError(ctx, err))
	}
	return nil
}

func notFound(op, name, why string) error {
	return fmt.Errorf("file: %s %q: %s: %w", op, name, why, bucket.ErrNotFound)
}

// version is the opaque version string: size-mtime(ns)-inode-ctime(ns).
// Size, mtime and inode alone can stay the same across a change of
// contents: `cp -p` onto an existing file rewrites it in place, and an
// archive extracted with fixed mtimes recreates a file that may get the
// freed inode number back. The change time cannot be set by users and
// moves with every write and every new file.
func version(fi fs.FileInfo) string {
	var ino uint64
	var ctime int64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
		ctime = st.Ctim.Nano()
	}
	return fmt.Sprintf("%d-%d-%d-%d", fi.Size(), fi.ModTime().UnixNano(), ino, ctime)
}

func toObject(name string, fi fs.FileInfo) *bucket.Object {
	return &bucket.Object{
		Name:    name,
		Size:    uint64(fi.Size()),
		Version: version(fi),
		Updated: fi.ModTime(),
	}
}

// Stat implements bucket.Bucket. Only regular files are objects; a
// directory, a symbolic link or a name ending in "/" is ErrNotFound.
func (b *Bucket) Stat(ctx context.Context, req *bucket.StatRequest) (*bucket.Object, error) {
	if err := ctxErr(ctx, "stat", req.Name); err != nil {
		return nil, err
	}
	if err := checkName(req.Name, true); err != nil {
		return nil, fmt.Errorf("file: stat: %w", err)
	}
	if strings.HasSuffix(req.Name, "/") {
		return nil, notFound("stat", req.Name, "directories are not objects")
	}
	if isTemp(req.Name) {
		return nil, notFound("stat", req.Name, "a temporary file of Put")
	}
	_, fi, _, err := b.resolve(req.Name)
	if err != nil {
		return nil, mapErr(ctx, "stat", req.Name, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, notFound("stat", req.Name, "not a regular file")
	}
	return toObject(req.Name, fi), nil
}

// NewRangeReader implements bucket.Bucket. The version is checked on the
// opened descriptor (fstat), so a file replaced between Stat and open is
// detected, and again after every read, so bytes of a file rewritten in
// place while being read are never returned.
func (b *Bucket) NewRangeReader(ctx context.Context, req *bucket.ReadRequest) (io.ReadCloser, error) {
	if err := ctxErr(ctx, "read", req.Name); err != nil {
		return nil, err
	}
	if err := checkName(req.Name, true); err != nil {
		return nil, fmt.Errorf("file: read: %w", err)
	}
	if req.Range.Start > req.Range.Limit {
		return nil, fmt.Errorf("file: read %q %v: %w", req.Name, req.Range, bucket.ErrInvalid)
	}
	if strings.HasSuffix(req.Name, "/") {
		return nil, notFound("read", req.Name, "directories are not objects")
	}
	if isTemp(req.Name) {
		return nil, notFound("read", req.Name, "a temporary file of Put")
	}
	f, err := b.openObject(ctx, req.Name)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, mapErr(ctx, "read", req.Name, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, notFound("read", req.Name, "not a regular file")
	}
	v := version(fi)
	if req.Version != "" && req.Version != v {
		f.Close()
		return nil, fmt.Errorf("file: read %q: version %s is now %s: %w", req.Name, req.Version, v, bucket.ErrPrecondition)
	}
	r := req.Range.Clip(uint64(fi.Size()))
	var ahead int64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ahead = b.aheads.of(st.Dev)
	}
	adviseRandom(f)
	return &reader{ctx: ctx, f: f, name: req.Name, version: v, off: int64(r.Start), end: int64(r.Limit),
		advised: int64(r.Start), ahead: ahead}, nil
}

// openObject opens name for reading: in one call if no symbolic link is
// on the way (plainopen.go), else following links here, so that none is
// followed out of the root or round a loop. If a name on the way is
// swapped for a link after this, os.Root still keeps the open inside the
// root. The caller checks that what it opened is a regular file.
func (b *Bucket) openObject(ctx context.Context, name string) (*os.File, error) {
	if f, ok := b.plain.open(name); ok {
		return f, nil
	}
	real, lfi, _, err := b.resolve(name)
	if err != nil {
		return nil, mapErr(ctx, "read", name, err)
	}
	if !lfi.Mode().IsRegular() {
		return nil, notFound("read", name, "not a regular file")
	}
	// O_NONBLOCK: never hang opening a FIFO swapped in after the check.
	f, err := b.root.OpenFile(real, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, mapErr(ctx, "read", name, err)
	}
	return f, nil
}

// reader reads [off, end) of one open file, and makes the kernel read
// from the disk only that range (ranged.go). Used by one goroutine at a
// time, as io.Reader requires.
type reader struct {
	ctx     context.Context
	f       *os.File
	name    string
	version string // at open
	off     int64
	end     int64
	advised int64 // the kernel was asked for [start, advised) (ranged.go)
	ahead   int64 // how far past off to ask it for; 0: never
}

func (r *reader) Read(p []byte) (int, error) {
	if err := ctxErr(r.ctx, "read", r.name); err != nil {
		return 0, err
	}
	if r.off >= r.end {
		return 0, io.EOF
	}
	if int64(len(p)) > r.end-r.off {
		p = p[:r.end-r.off]
	}
	if r.off+int64(len(p)) < r.end && r.ahead > 0 {
		// More of the range is to come: have it in flight while this
		// read waits for its own pages (a last read reads just those).
		r.advise(min(r.end, r.off+int64(len(p))+r.ahead))
	}
	n, err := r.f.ReadAt(p, r.off)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, mapErr(r.ctx, "read", r.name, err)
	}
	// Check after reading: a change that landed before or during the
	// pread shows in the mtime or size now.
	fi, serr := r.f.Stat()
	if serr != nil {
		return 0, mapErr(r.ctx, "read", r.name, serr)
	}
	if v := version(fi); v != r.version {
		return 0, fmt.Errorf("file: read %q: changed while reading (version %s is now %s): %w",
			r.name, r.version, v, bucket.ErrPrecondition)
	}
	if n < len(p) {
		// Same version but fewer bytes than it had: the body ended early.
		return 0, fmt.Errorf("file: read %q at %d: %w: %w", r.name, r.off, bucket.ErrUnavailable, io.ErrUnexpectedEOF)
	}
	r.off += int64(n)
	return n, nil
}

func (r *reader) Close() error { return r.f.Close() }

// Put implements bucket.Writer: the data goes to a temporary file in the
// target directory, which is then renamed over the name, so readers see
// the old or the new file, never a mix. Directories are created as
// needed. Names ending in "/" (markers) cannot be stored: ErrInvalid.
func (b *Bucket) Put(ctx context.Context, req *bucket.PutRequest) (*bucket.Object, error) {
	if err := ctxErr(ctx, "put", req.Name); err != nil {
		return nil, err
	}
	if err := checkName(req.Name, false); err != nil {
		return nil, fmt.Errorf("file: put: %w", err)
	}
	if isTemp(req.Name) {
		// It could never be read back: such names are not objects.
		return nil, fmt.Errorf("file: put %q: a component starting %q is reserved for temporary files: %w",
			req.Name, tempPrefix, bucket.ErrInvalid)
	}
	dir := ""
	if i := strings.LastIndexByte(req.Name, '/'); i >= 0 {
		dir = req.Name[:i+1]
		if err := b.root.MkdirAll(dir[:i], 0o755); err != nil {
			return nil, putErr(ctx, req.Name, err)
		}
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := dir + tempPrefix + hex.EncodeToString(rnd[:])
	f, err := b.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, putErr(ctx, req.Name, err)
	}
	_, err = f.Write(req.Data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		mtime := b.nextMtime()
		err = b.root.Chtimes(tmp, mtime, mtime)
	}
	if err == nil {
		err = b.root.Rename(tmp, req.Name)
	}
	if err != nil {
		b.root.Remove(tmp)
		return nil, putErr(ctx, req.Name, err)
	}
	fi, err := b.root.Lstat(req.Name)
	if err != nil {
		return nil, mapErr(ctx, "put", req.Name, err)
	}
	return toObject(req.Name, fi), nil
}

// putErr maps a failed write; a name that a directory tree cannot hold
// (a file where a directory is needed, or the reverse, or a component
// over 255 bytes) is ErrInvalid.
func putErr(ctx context.Context, name string, err error) error {
	if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR) || errors.Is(err, fs.ErrExist) ||
		errors.Is(err, syscall.ENAMETOOLONG) {
		return bucket.ContextError(ctx, fmt.Errorf("file: put %q: %w: %w", name, bucket.ErrInvalid, err))
	}
	return mapErr(ctx, "put", name, err)
}

// nextMtime returns now, or just after the previous Put's mtime if the
// clock has not moved on.
func (b *Bucket) nextMtime() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := time.Now().Round(0)
	if !t.After(b.lastMtime) {
		t = b.lastMtime.Add(time.Microsecond)
	}
	b.lastMtime = t
	return t
}

// Delete implements bucket.Writer. Directories left empty are removed, as
// a prefix disappears from a store when its last object goes.
func (b *Bucket) Delete(ctx context.Context, name string) error {
	if err := ctxErr(ctx, "delete", name); err != nil {
		return err
	}
	if err := checkName(name, true); err != nil {
		return fmt.Errorf("file: delete: %w", err)
	}
	if strings.HasSuffix(name, "/") {
		return notFound("delete", name, "directories are not objects")
	}
	if isTemp(name) {
		// Never an object; maybe a Put in progress.
		return notFound("delete", name, "a temporary file of Put")
	}
	fi, err := b.root.Lstat(name)
	if err != nil {
		return mapErr(ctx, "delete", name, err)
	}
	if !fi.Mode().IsRegular() {
		return notFound("delete", name, "not a regular file")
	}
	if err := b.root.Remove(name); err != nil {
		return mapErr(ctx, "delete", name, err)
	}
	for dir := name; ; {
		i := strings.LastIndexByte(dir, '/')
		if i < 0 {
			return nil
		}
		dir = dir[:i]
		if b.root.Remove(dir) != nil {
			return nil // not empty (or gone): stop
		}
	}
}
