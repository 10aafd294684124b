package file

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"ferry/bucket"
	"ferry/bucket/buckettest"
)

func TestConformanceFile(t *testing.T) {
	buckettest.Run(t, func(t *testing.T) (bucket.Bucket, bucket.Writer) {
		return newBucket(t, t.TempDir())
	})
}

func newBucket(t *testing.T, dir string) (*Bucket, *Bucket) {
	t.Helper()
	b, err := New(Config{Dir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b, b
}

func readAll(t *testing.T, b *Bucket, req *bucket.ReadRequest) ([]byte, error) {
	t.Helper()
	r, err := b.NewRangeReader(t.Context(), req)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func TestNewRejectsNonDirectory(t *testing.T) {
	dir := t.TempDir()
	_, err := New(Config{Dir: filepath.Join(dir, "missing")})
	assert.ErrorIs(t, err, bucket.ErrNotFound)
	assert.ErrorIs(t, err, fs.ErrNotExist, "the os error stays visible")
	assert.Equal(t, "no such directory", err.Error(), "the caller names the directory; said once")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), nil, 0o644))
	_, err = New(Config{Dir: filepath.Join(dir, "f")})
	assert.ErrorIs(t, err, bucket.ErrInvalid)
	assert.Equal(t, "not a directory", err.Error())
}

// TestNoEscape proves that no name reaches outside the root: a secret file
// next to the root can be neither read, stat'ed, listed, overwritten nor
// deleted.
func TestNoEscape(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "sub"), 0o755))
	secret := filepath.Join(parent, "x")
	require.NoError(t, os.WriteFile(secret, []byte("secret"), 0o644))
	// A symbolic link inside the root that points out of it.
	require.NoError(t, os.Symlink(secret, filepath.Join(root, "link")))
	require.NoError(t, os.Symlink(parent, filepath.Join(root, "sub", "dirlink")))
	b, w := newBucket(t, root)
	ctx := t.Context()

	bad := []string{
		"../x", "sub/../../x", "./../x", "/" + secret, secret, "sub//x", "sub/./x", "..", ".", "", "/",
		"x\x00", "sub/dirlink/x", "sub/dirlink/root/sub/../../x",
	}
	// The link itself is not an object. (Put may replace the link with a
	// file: that happens inside the root.)
	_, err := b.Stat(ctx, &bucket.StatRequest{Name: "link"})
	assert.ErrorIs(t, err, bucket.ErrNotFound)
	got, err := readAll(t, b, &bucket.ReadRequest{Name: "link", Range: bucket.ByteRange{Limit: 100}})
	assert.ErrorIs(t, err, bucket.ErrNotFound)
	assert.Empty(t, got)
	for _, name := range bad {
		_, err := b.Stat(ctx, &bucket.StatRequest{Name: name})
		assert.True(t, isInvalidOrNotFound(err), "Stat(%q): %v", name, err)
		got, err := readAll(t, b, &bucket.ReadRequest{Name: name, Range: bucket.ByteRange{Limit: 100}})
		assert.True(t, isInvalidOrNotFound(err), "read(%q): %v", name, err)
		assert.Empty(t, got)
		_, err = w.Put(ctx, &bucket.PutRequest{Name: name, Data: []byte("pwned")})
		assert.Error(t, err, "Put(%q)", name)
		err = w.Delete(ctx, name)
		assert.True(t, isInvalidOrNotFound(err), "Delete(%q): %v", name, err)
	}
	var l *bucket.Listing
	var data []byte
	for _, prefix := range []string{"../", "sub/../../", "/", "link/", "sub/dirlink/", "sub/dirlink/root/"} {
		for _, delim := range []string{"/", ""} {
			l, err = b.List(ctx, &bucket.ListRequest{Prefix: prefix, Delimiter: delim})
			if err == nil {
				assert.Empty(t, l.Objects, "List(%q)", prefix)
				assert.Empty(t, l.Prefixes, "List(%q)", prefix)
			} else {
				assert.ErrorIs(t, err, bucket.ErrInvalid, "List(%q)", prefix)
			}
		}
	}
	data, err = os.ReadFile(secret)
	require.NoError(t, err)
	assert.Equal(t, "secret", string(data), "the file outside the root changed")
	entries, err := os.ReadDir(parent)
	require.NoError(t, err)
	assert.Len(t, entries, 2, "something was created next to the root")

	// Symbolic links are not listed.
	l, err = b.List(ctx, &bucket.ListRequest{Delimiter: "/"})
	require.NoError(t, err)
	assert.Empty(t, l.Objects)
	assert.Equal(t, []string{"sub/"}, l.Prefixes)
	l, err = b.List(ctx, &bucket.ListRequest{})
	require.NoError(t, err)
	require.Len(t, l.Objects, 1, "only sub's marker: it holds nothing but a link")
	assert.Equal(t, "sub/", l.Objects[0].Name)
}

func isInvalidOrNotFound(err error) bool {
	return errors.Is(err, bucket.ErrInvalid) || errors.Is(err, bucket.ErrNotFound)
}

func TestListSkipsNonRegularAndTempFiles(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, tempPrefix+"abc"), []byte("half"), 0o644))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "empty"), 0o755))
	b, _ := newBucket(t, dir)

	l, err := b.List(t.Context(), &bucket.ListRequest{Delimiter: "/"})
	require.NoError(t, err)
	require.Len(t, l.Objects, 1)
	assert.Equal(t, "file", l.Objects[0].Name)
	assert.Equal(t, []string{"empty/"}, l.Prefixes, "a directory on disk is a prefix, even empty")
	// ... and, like a folder made in a store's console, a marker object
	// under its own prefix, so that its listing is not empty.
	l, err = b.List(t.Context(), &bucket.ListRequest{Prefix: "empty/", Delimiter: "/"})
	require.NoError(t, err)
	require.Len(t, l.Objects, 1)
	assert.Equal(t, "empty/", l.Objects[0].Name)
	assert.Zero(t, l.Objects[0].Size)
	assert.NotEmpty(t, l.Objects[0].Version)
	assert.Empty(t, l.Prefixes)

	_, err = b.Stat(t.Context(), &bucket.StatRequest{Name: "fifo"})
	assert.ErrorIs(t, err, bucket.ErrNotFound)
	_, err = readAll(t, b, &bucket.ReadRequest{Name: "fifo", Range: bucket.ByteRange{Limit: 4}})
	assert.ErrorIs(t, err, bucket.ErrNotFound)
	_, err = b.Stat(t.Context(), &bucket.StatRequest{Name: "empty"})
	assert.ErrorIs(t, err, bucket.ErrNotFound)
}

// statted writes obj in a new bucket directory with content and stats it.
func statted(t *testing.T, content string) (b *Bucket, dir, path string, o *bucket.Object) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "obj")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	b, _ = newBucket(t, dir)
	o, err := b.Stat(t.Context(), &bucket.StatRequest{Name: "obj"})
	require.NoError(t, err)
	return b, dir, path, o
}

func TestPinnedReadDetectsReplacedFile(t *testing.T) {
	b, dir, path, o := statted(t, "old content")

	// Replaced behind the bucket's back, same size, mtime forced equal:
	// the inode (and the change time) tell.
	tmp := filepath.Join(dir, "tmp")
	require.NoError(t, os.WriteFile(tmp, []byte("NEW CONTENT"), 0o644))
	require.NoError(t, os.Chtimes(tmp, o.Updated, o.Updated))
	require.NoError(t, os.Rename(tmp, path))

	got, err := readAll(t, b, &bucket.ReadRequest{Name: "obj", Version: o.Version, Range: bucket.ByteRange{Limit: 11}})
	assert.ErrorIs(t, err, bucket.ErrPrecondition)
	assert.Empty(t, got)
}

func TestReadDetectsInPlaceRewrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "obj")
	require.NoError(t, os.WriteFile(path, []byte("aaaaaaaaaa"), 0o644))
	b, _ := newBucket(t, dir)
	r, err := b.NewRangeReader(t.Context(), &bucket.ReadRequest{Name: "obj", Range: bucket.ByteRange{Limit: 10}})
	require.NoError(t, err)
	defer r.Close()
	buf := make([]byte, 5)
	_, err = io.ReadFull(r, buf)
	require.NoError(t, err)
	assert.Equal(t, "aaaaa", string(buf))

	// Same inode, same size, new bytes and mtime.
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("bbbbbbbbbb"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	fi, err := os.Stat(path)
	require.NoError(t, err)
	later := fi.ModTime().Add(1e9)
	require.NoError(t, os.Chtimes(path, later, later))

	n, err := r.Read(buf)
	assert.ErrorIs(t, err, bucket.ErrPrecondition)
	assert.Zero(t, n)
}

// cp -p onto an existing file: same inode, same size, the old mtime put
// back. Only the change time tells; before it was part of the version,
// the old version's cached blocks were served as the new one's.
func TestVersionChangesWithPreservedMtime(t *testing.T) {
	b, _, path, o := statted(t, "aaaaaaaaaa")
	before, err := os.Stat(path)
	require.NoError(t, err)

	// ctime has the file system's timestamp granularity: let it move.
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, os.WriteFile(path, []byte("bbbbbbbbbb"), 0o644))
	require.NoError(t, os.Chtimes(path, o.Updated, o.Updated))
	after, err := os.Stat(path)
	require.NoError(t, err)
	require.True(t, os.SameFile(before, after), "rewritten in place")
	require.Equal(t, before.ModTime(), after.ModTime())

	o2, err := b.Stat(t.Context(), &bucket.StatRequest{Name: "obj"})
	require.NoError(t, err)
	assert.NotEqual(t, o.Version, o2.Version)
	got, err := readAll(t, b, &bucket.ReadRequest{Name: "obj", Version: o.Version, Range: bucket.ByteRange{Limit: 10}})
	assert.ErrorIs(t, err, bucket.ErrPrecondition)
	assert.Empty(t, got)
}

func TestReadDetectsTruncation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "obj")
	require.NoError(t, os.WriteFile(path, []byte("0123456789"), 0o644))
	b, _ := newBucket(t, dir)
	r, err := b.NewRangeReader(t.Context(), &bucket.ReadRequest{Name: "obj", Range: bucket.ByteRange{Limit: 10}})
	require.NoError(t, err)
	defer r.Close()
	require.NoError(t, os.Truncate(path, 3))
	got, err := io.ReadAll(r)
	assert.ErrorIs(t, err, bucket.ErrPrecondition)
	assert.Empty(t, got)
}

func TestPutIsAtomicAndLeavesNoTempFiles(t *testing.T) {
	dir := t.TempDir()
	b, w := newBucket(t, dir)
	for i := range 3 {
		_, err := w.Put(t.Context(), &bucket.PutRequest{Name: "a/b/obj", Data: []byte{byte(i)}})
		require.NoError(t, err)
	}
	var files []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, rel)
		}
		return err
	}))
	assert.Equal(t, []string{"a/b/obj"}, files)
	got, err := readAll(t, b, &bucket.ReadRequest{Name: "a/b/obj", Range: bucket.ByteRange{Limit: 10}})
	require.NoError(t, err)
	assert.Equal(t, []byte{2}, got)

	// Deleting the last object removes the directories it left empty.
	require.NoError(t, w.Delete(t.Context(), "a/b/obj"))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries)
}

func TestPutUnrepresentableNames(t *testing.T) {
	b, w := newBucket(t, t.TempDir())
	_, err := w.Put(t.Context(), &bucket.PutRequest{Name: "x"})
	require.NoError(t, err)
	for _, name := range []string{"x/y", "marker/", string(make([]byte, 300))} {
		_, err := w.Put(t.Context(), &bucket.PutRequest{Name: name})
		assert.ErrorIs(t, err, bucket.ErrInvalid, "Put(%q)", name)
	}
	_, err = w.Put(t.Context(), &bucket.PutRequest{Name: "d/e"})
	require.NoError(t, err)
	_, err = w.Put(t.Context(), &bucket.PutRequest{Name: "d"})
	assert.ErrorIs(t, err, bucket.ErrInvalid, "a file over a directory")
	_, err = b.Stat(t.Context(), &bucket.StatRequest{Name: "d/e"})
	assert.NoError(t, err)
}

func TestPermissionDenied(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores file permissions; see TestMapErr")
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "locked"), []byte("x"), 0o000))
	b, _ := newBucket(t, dir)
	_, err := readAll(t, b, &bucket.ReadRequest{Name: "locked", Range: bucket.ByteRange{Limit: 1}})
	assert.ErrorIs(t, err, bucket.ErrPermission)
}

func TestMapErr(t *testing.T) {
	for errno, want := range map[syscall.Errno]error{
		syscall.ENOENT:       bucket.ErrNotFound,
		syscall.ENOTDIR:      bucket.ErrNotFound,
		syscall.EACCES:       bucket.ErrPermission,
		syscall.EPERM:        bucket.ErrPermission,
		syscall.EIO:          bucket.ErrUnavailable,
		syscall.ESTALE:       bucket.ErrUnavailable,
		syscall.ENAMETOOLONG: bucket.ErrNotFound,
	} {
		err := mapErr(t.Context(), "stat", "n", &fs.PathError{Op: "stat", Path: "n", Err: errno})
		assert.ErrorIs(t, err, want, "%v", errno)
		assert.ErrorIs(t, err, errno, "the original stays visible")
	}
}

func TestEmptyDirectoryMarker(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a", "empty"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a", "links"), 0o755))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dir, "a", "links", "l")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a", "f"), []byte("x"), 0o644))
	b, _ := newBucket(t, dir)
	ctx := t.Context()

	names := func(l *bucket.Listing) []string {
		var out []string
		for _, o := range l.Objects {
			out = append(out, o.Name)
		}
		return out
	}
	// A directory holding only what is not an object (a symbolic link)
	// counts as empty too.
	for _, p := range []string{"a/empty/", "a/links/"} {
		l, err := b.List(ctx, &bucket.ListRequest{Prefix: p, Delimiter: "/"})
		require.NoError(t, err)
		assert.Equal(t, []string{p}, names(l), p)
	}
	// Not for a directory with something in it, nor for a partial name.
	l, err := b.List(ctx, &bucket.ListRequest{Prefix: "a/", Delimiter: "/"})
	require.NoError(t, err)
	assert.Equal(t, []string{"a/f"}, names(l))
	assert.Equal(t, []string{"a/empty/", "a/links/"}, l.Prefixes)
	l, err = b.List(ctx, &bucket.ListRequest{Prefix: "a/emp", Delimiter: "/"})
	require.NoError(t, err)
	assert.Empty(t, l.Objects)
	assert.Equal(t, []string{"a/empty/"}, l.Prefixes)
	// A flat listing shows the markers in order, and pages across them.
	l, err = b.List(ctx, &bucket.ListRequest{Prefix: "a/"})
	require.NoError(t, err)
	assert.Equal(t, []string{"a/empty/", "a/f", "a/links/"}, names(l))
	l, err = b.List(ctx, &bucket.ListRequest{Prefix: "a/", MaxResults: 1})
	require.NoError(t, err)
	assert.Equal(t, []string{"a/empty/"}, names(l))
	l, err = b.List(ctx, &bucket.ListRequest{Prefix: "a/", MaxResults: 1, ContinuationToken: l.ContinuationToken})
	require.NoError(t, err)
	assert.Equal(t, []string{"a/f"}, names(l), "the marker is not listed again after its token")
	// A missing directory is an empty listing, with no marker.
	l, err = b.List(ctx, &bucket.ListRequest{Prefix: "nope/", Delimiter: "/"})
	require.NoError(t, err)
	assert.Empty(t, l.Objects)
}

func TestTempNamesAreNeverObjects(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, tempPrefix+"notes"), []byte("user data"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, tempPrefix+"d"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, tempPrefix+"d", "f"), []byte("x"), 0o644))
	b, _ := newBucket(t, dir)
	ctx := t.Context()
	// Hidden by name as in listings, whatever was read before.
	for _, name := range []string{tempPrefix + "notes", tempPrefix + "d/f"} {
		_, err := b.Stat(ctx, &bucket.StatRequest{Name: name})
		assert.ErrorIs(t, err, bucket.ErrNotFound, name)
		_, err = readAll(t, b, &bucket.ReadRequest{Name: name, Range: bucket.ByteRange{Limit: 1}})
		assert.ErrorIs(t, err, bucket.ErrNotFound, name)
	}
	l, err := b.List(ctx, &bucket.ListRequest{Delimiter: "/"})
	require.NoError(t, err)
	assert.Empty(t, l.Objects)
	assert.Empty(t, l.Prefixes)
	l, err = b.List(ctx, &bucket.ListRequest{Prefix: tempPrefix + "d/", Delimiter: "/"})
	require.NoError(t, err)
	assert.Empty(t, l.Objects)
	// Nor can one be made or removed through the bucket.
	_, w := newBucket(t, dir)
	_, err = w.Put(ctx, &bucket.PutRequest{Name: "x/" + tempPrefix + "y", Data: []byte("z")})
	assert.ErrorIs(t, err, bucket.ErrInvalid)
	assert.ErrorIs(t, w.Delete(ctx, tempPrefix+"notes"), bucket.ErrNotFound)
	assert.FileExists(t, filepath.Join(dir, tempPrefix+"notes"))
}
