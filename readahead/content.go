package readahead

import (
	"context"
	"os"

	"ferry/bucket"
	"ferry/ranges"
)

// Content is the read path below the file system: what package fs reads
// file bytes through, and asks of the disk cache. *Fetcher implements it;
// fs's tests implement it with fakes. All methods are safe for concurrent
// use.
type Content interface {
	// Open returns a reader of obj, pinned to obj.Version, for one open
	// file handle.
	Open(obj bucket.Object) Reader
	// OpenAhead opens a reader of obj as Open does, and starts its
	// readahead at once, as a read from offset 0 would: for an object
	// expected to be read next. If it fetches nothing (cached already, or
	// no memory free), the reader is not Unread.
	OpenAhead(obj bucket.Object) Reader
	// Cached reports whether the disk cache holds every byte of obj.
	Cached(obj bucket.Object) bool
	// CachedBytes says how many bytes of obj the disk cache holds,
	// reading nothing; ok is false when there is no disk cache.
	CachedBytes(obj bucket.Object) (n int64, ok bool)
	// Whole returns the disk cache's file of obj if it holds obj whole,
	// for the kernel to read directly (FUSE passthrough). The caller
	// releases it.
	Whole(obj bucket.Object) (WholeFile, bool)
	// Unready returns the byte ranges of obj that stand between it and
	// its next Whole file that checks good (blocks missing from the disk
	// cache, or not yet checked by reads), if they come to at most limit
	// bytes; none otherwise.
	Unready(obj bucket.Object, limit int64) []ranges.ByteRange
}

// Reader reads one object version for one open file handle (*Handle).
// All methods may be called concurrently.
type Reader interface {
	// ReadAt has io.ReaderAt semantics: fewer than len(p) bytes only at
	// the end of the object, with io.EOF. It does not retain p. A changed
	// object fails with an error matching bucket.ErrPrecondition.
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
	// Spliceable is ReadAt for a caller that can send bytes from a file
	// without reading them (fs splices them to the kernel): if the disk
	// cache hands out [off, off+size) clipped to the object, it returns
	// that file, where the bytes are at the same offsets, how many bytes
	// to send, and release, which unpins the file once it has been sent
	// from. ok is false, and nothing counted, if the cache cannot: the
	// caller then calls ReadAt.
	Spliceable(off int64, size int) (f *os.File, n int, release func(), ok bool)
	// ReadRandomly reports whether the reads so far were random (part of
	// no sequential stream, and large); known is false if there were too
	// few to tell.
	ReadRandomly() (random, known bool)
	// NotifyAtEnd sets fn to run once, in its own goroutine, when the
	// readahead of a sequential stream has reached the end of the object
	// and drains (the moment to start the next file). Random reads never
	// call it.
	NotifyAtEnd(fn func())
	// Unread reports whether the reader was opened ahead, started
	// fetching something then, and has not been read since.
	Unread() bool
	// Close cancels the reader's readahead and frees what it holds.
	// Reads after Close fail.
	Close()
}

// WholeFile is an object's bytes held whole in a local file: the disk
// cache's (filecache.WholeFile), which the kernel reads itself once it
// is checked (FUSE passthrough).
type WholeFile interface {
	// File is the file; the caller does not close it.
	File() *os.File
	// Check reports whether the file holds exactly the object's bytes
	// (cheap when it has not changed since the last Check).
	Check() bool
	// Checked reports, without reading the file, whether Check would
	// be cheap: the file was found good and has not changed since.
	Checked() bool
	// CheckAsRead asks that reads of the object through the cache count
	// toward a check: once they have covered the whole file, unchanged,
	// it is Checked. It reports whether such a check was asked for
	// before and is not done yet.
	CheckAsRead() (pending bool)
	// Release gives the file back; it is called once.
	Release()
}

// What Fetcher and Handle implement, checked at compile time.
var (
	_ Content = (*Fetcher)(nil)
	_ Reader  = (*Handle)(nil)
)
